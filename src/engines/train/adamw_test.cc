#include "engines/train/adamw.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engines/train/lr_schedule.h"
#include "util/result.h"
#include "util/test_temp_dir.h"

namespace gk::train {
namespace {

// The update written out in double, moments unrounded: the formula of adamw.h, step t from 1.
struct RefAdamW {
  AdamWOptions o;
  std::vector<double> p, m, v;
  int t = 0;
  void Step(const std::vector<double>& g, double lr) {
    ++t;
    for (size_t i = 0; i < p.size(); ++i) {
      m[i] = o.beta1 * m[i] + (1 - o.beta1) * g[i];
      v[i] = o.beta2 * v[i] + (1 - o.beta2) * g[i] * g[i];
      const double mhat = m[i] / (1 - std::pow(o.beta1, t));
      const double vhat = v[i] / (1 - std::pow(o.beta2, t));
      p[i] -= lr * (mhat / (std::sqrt(vhat) + o.eps) + o.weight_decay * p[i]);
    }
  }
};

std::vector<double> ToDouble(const std::vector<float>& x) { return {x.begin(), x.end()}; }

TEST(AdamW, OneStepMatchesTheFormula) {
  const AdamWOptions o{0.9, 0.999, 1e-8, 0.1};
  std::vector<float> p = {1.0f, -2.0f, 0.5f, 3.0f};
  const std::vector<float> g = {0.1f, -0.3f, 2.0f, 1e-9f};
  RefAdamW ref{o, ToDouble(p), std::vector<double>(4), std::vector<double>(4)};
  AdamW opt(o, {4});
  const ParamRef r{p.data(), g.data(), 4};
  opt.Step({&r, 1}, 1e-2);
  ref.Step(ToDouble(g), 1e-2);
  EXPECT_EQ(opt.step(), 1);
  for (size_t i = 0; i < p.size(); ++i) EXPECT_NEAR(p[i], ref.p[i], 1e-7 * std::abs(ref.p[i])) << i;
  // After bias correction the first update is lr·g/(|g|+eps) plus decay: about lr per element
  // (sign of g), except where |g| is near eps.
  EXPECT_NEAR(p[0], 1.0 - 1e-2 * (0.1 / (0.1 + 1e-8) + 0.1 * 1.0), 1e-7);
  EXPECT_NEAR(p[3], 3.0 - 1e-2 * (1e-9 / (1e-9 + 1e-8) + 0.1 * 3.0), 1e-6);
  // The moments are the raw (uncorrected) ones.
  EXPECT_FLOAT_EQ(opt.m()[0][1], float(0.1 * -0.3));
  EXPECT_FLOAT_EQ(opt.v()[0][2], float(0.001 * 4.0));
}

TEST(AdamW, SeveralStepsOverSeveralBuffersMatchTheFormula) {
  const AdamWOptions o{0.8, 0.95, 1e-6, 0.01};
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  std::vector<std::vector<float>> p(3);
  const std::vector<int64_t> sizes = {5, 1, 9};
  std::vector<RefAdamW> ref;
  for (size_t b = 0; b < 3; ++b) {
    for (int64_t i = 0; i < sizes[b]; ++i) p[b].push_back(normal(rng));
    ref.push_back({o, ToDouble(p[b]), std::vector<double>(size_t(sizes[b])), std::vector<double>(size_t(sizes[b]))});
  }
  AdamW opt(o, sizes);
  const double lrs[] = {1e-3, 5e-3, 1e-2, 2e-3, 0.0, 3e-3};
  for (double lr : lrs) {
    std::vector<std::vector<float>> g(3);
    std::vector<ParamRef> refs;
    for (size_t b = 0; b < 3; ++b) {
      for (int64_t i = 0; i < sizes[b]; ++i) g[b].push_back(normal(rng));
      refs.push_back({p[b].data(), g[b].data(), sizes[b]});
      ref[b].Step(ToDouble(g[b]), lr);
    }
    opt.Step(refs, lr);
    for (size_t b = 0; b < 3; ++b) {
      for (size_t i = 0; i < p[b].size(); ++i) {
        EXPECT_NEAR(p[b][i], ref[b].p[i], 2e-7 * std::max(1.0, std::abs(ref[b].p[i]))) << "step " << opt.step();
      }
    }
  }
  EXPECT_EQ(opt.step(), 6);
}

// With a constant gradient the corrected moments are exactly g and g², so every update is
// lr·g/(|g|+eps) from the first step on; without the correction the first would be
// (1-b1)/sqrt(1-b2) ≈ 3.16 times larger.
TEST(AdamW, BiasCorrectionMakesConstantGradientStepsEqual) {
  AdamW opt({0.9, 0.999, 1e-8, 0.0}, {2});
  std::vector<float> p = {0.f, 0.f};
  const std::vector<float> g = {0.25f, -4.f};
  const ParamRef r{p.data(), g.data(), 2};
  for (int k = 1; k <= 10; ++k) {
    opt.Step({&r, 1}, 1e-3);
    EXPECT_NEAR(p[0], -1e-3 * k, 1e-8) << k;  // float32 parameters: ulp(0.01) is 1e-9
    EXPECT_NEAR(p[1], 1e-3 * k, 1e-8) << k;
  }
}

// Decoupled decay: p shrinks by (1 - lr·wd) per step even with a zero gradient, and the decay
// never enters the moments (L2 regularisation, as in torch.optim.Adam's weight_decay, would).
TEST(AdamW, WeightDecayIsDecoupled) {
  AdamW opt({0.9, 0.999, 1e-8, 0.1}, {3});
  std::vector<float> p = {1.f, -2.f, 0.f};
  const std::vector<float> g(3, 0.f);
  const ParamRef r{p.data(), g.data(), 3};
  for (int k = 0; k < 3; ++k) opt.Step({&r, 1}, 0.01);
  const double f = std::pow(1 - 0.01 * 0.1, 3);
  EXPECT_NEAR(p[0], 1.0 * f, 1e-7);
  EXPECT_NEAR(p[1], -2.0 * f, 1e-7);
  EXPECT_EQ(p[2], 0.f);
  for (float x : opt.m()[0]) EXPECT_EQ(x, 0.f);
  for (float x : opt.v()[0]) EXPECT_EQ(x, 0.f);
  // lr 0 (the first update of a schedule warming up from 0) changes nothing but the moments.
  std::vector<float> q = {1.f};
  const std::vector<float> h = {0.5f};
  AdamW z({0.9, 0.999, 1e-8, 0.1}, {1});
  const ParamRef rq{q.data(), h.data(), 1};
  z.Step({&rq, 1}, 0.0);
  EXPECT_EQ(q[0], 1.f);
  EXPECT_FLOAT_EQ(z.m()[0][0], 0.05f);
}

// A checkpoint restores m, v and the step count; continuing from it equals not stopping.
TEST(AdamW, RestoredStateContinuesExactly) {
  const AdamWOptions o{0.9, 0.999, 1e-8, 0.01};
  std::vector<float> a = {0.3f, -0.7f}, g = {0.f, 0.f};
  AdamW full(o, {2});
  const ParamRef ra{a.data(), g.data(), 2};
  for (int k = 0; k < 3; ++k) {
    g = {0.1f * float(k + 1), -0.2f};
    full.Step({&ra, 1}, 1e-2);
  }
  std::vector<float> b = a;
  AdamW resumed(o, {2});
  resumed.m() = full.m();
  resumed.v() = full.v();
  resumed.set_step(full.step());
  g = {0.5f, 0.05f};
  full.Step({&ra, 1}, 1e-2);
  const ParamRef rb{b.data(), g.data(), 2};
  resumed.Step({&rb, 1}, 1e-2);
  EXPECT_EQ(a, b);
  EXPECT_EQ(resumed.step(), 4);
}

TEST(GlobalGradNorm, SumsSquaresOverBuffersInDouble) {
  // 1e8 + 1e6 · 0.01: in float the small squares vanish next to 1e8 (ulp 8).
  const std::vector<float> big = {1e4f};
  const std::vector<float> small(1000000, 0.1f);
  const std::vector<float> empty;
  const std::vector<std::span<const float>> grads = {big, empty, small};
  const double expected = std::sqrt(1e8 + 1e6 * double(0.1f) * double(0.1f));
  // Summing in float would give exactly 1e4; double is off by 1e6 roundings of ulp(1e8)/2.
  EXPECT_NEAR(GlobalGradNorm(grads), expected, 1e-6);
  const std::vector<float> three = {3.f}, four = {-4.f};
  EXPECT_DOUBLE_EQ(GlobalGradNorm(std::vector<std::span<const float>>{three, four}), 5.0);
  EXPECT_EQ(GlobalGradNorm({}), 0.0);
}

TEST(ClipByGlobalNorm, NoOpAtOrBelowTheLimit) {
  std::vector<float> a = {0.3f, -0.4f};
  const std::vector<std::span<float>> grads = {a};
  EXPECT_EQ(ClipByGlobalNorm(grads, 0.5, 1.0), 1.0);
  EXPECT_EQ(ClipByGlobalNorm(grads, 0.5, 0.5), 1.0);  // optax: norm < max_norm keeps g; = too
  EXPECT_EQ(ClipByGlobalNorm(grads, 0.5, 0.0), 1.0);  // 0: clipping off
  EXPECT_EQ(ClipByGlobalNorm(grads, std::nan(""), 1.0), 1.0);
  EXPECT_EQ(a, (std::vector<float>{0.3f, -0.4f}));
}

TEST(ClipByGlobalNorm, ScalesExactlyToTheLimit) {
  std::vector<float> a = {3.f, 0.f}, b = {-4.f, 12.f};
  const std::vector<float> a0 = a, b0 = b;
  const std::vector<std::span<float>> grads = {a, b};
  const std::vector<std::span<const float>> cgrads = {a, b};
  const double norm = GlobalGradNorm(cgrads);
  EXPECT_DOUBLE_EQ(norm, 13.0);
  const double factor = ClipByGlobalNorm(grads, norm, 1.3);
  EXPECT_DOUBLE_EQ(factor, 0.1);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(a[i], a0[i] * float(0.1));
    EXPECT_EQ(b[i], b0[i] * float(0.1));
  }
  EXPECT_NEAR(GlobalGradNorm(cgrads), 1.3, 1e-6);
}

// ---- The PyTorch oracle (tests/oracle/optim_check.py) ----

const char kPython[] = "/usr/bin/python3";

bool PythonHasTorch() {
  return std::system((std::string(kPython) + " -c 'import torch' > /dev/null 2>&1").c_str()) == 0;
}

// Runs the command, returns its exit status and puts stdout+stderr in `output`.
int RunCommand(const std::string& cmd, std::string& output) {
  FILE* pipe = popen((cmd + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return -1;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, pipe)) > 0) output.append(buf, n);
  return pclose(pipe);
}

nlohmann::json ScheduleJson(const WarmupCosineDecay& s) {
  return {{"init_value", s.init_value}, {"peak_value", s.peak_value}, {"warmup_steps", s.warmup_steps},
          {"decay_steps", s.decay_steps}, {"end_value", s.end_value}, {"exponent", s.exponent}};
}

struct OracleRun {
  AdamWOptions options;
  double max_grad_norm;
  WarmupCosineDecay schedule;
};

TEST(AdamWOracle, MatchesTorchAdamWClippingAndSchedules) {
  if (!PythonHasTorch()) GTEST_SKIP() << kPython << " cannot import torch (Debian: apt install python3-torch)";
  const std::vector<OracleRun> runs = {
      // The reference case's shape (FACTS.md §1 item 3), scaled down: warm-up from 0, cosine
      // to 0, wd 0.001, no clipping. HF-shaped, so LambdaLR is checked too.
      {{0.9, 0.999, 1e-8, 0.001}, 0.0, {0.0, 1e-2, 2, 5, 0.0, 1.0}},
      // Everything else: other betas/eps, clipping that bites on some steps, a non-zero start
      // and end, exponent 2 and a schedule that ends before the last step.
      {{0.8, 0.95, 1e-6, 0.05}, 3.0, {1e-3, 5e-2, 1, 4, 1e-3, 2.0}},
  };
  const std::vector<int64_t> sizes = {5, 1, 17};
  const float grad_scale[] = {0.5f, 3.f, 0.2f, 5.f, 1.f};
  const int kSteps = 5;

  std::mt19937 rng(11);
  std::normal_distribution<float> normal;
  nlohmann::json in = {{"runs", nlohmann::json::array()}, {"schedules", nlohmann::json::array()}};
  std::vector<std::vector<std::vector<float>>> init(runs.size());                // run, buffer
  std::vector<std::vector<std::vector<std::vector<float>>>> grads(runs.size());  // run, step, buffer
  for (size_t r = 0; r < runs.size(); ++r) {
    for (int64_t n : sizes) {
      std::vector<float> p;
      for (int64_t i = 0; i < n; ++i) p.push_back(normal(rng));
      init[r].push_back(p);
    }
    for (int k = 0; k < kSteps; ++k) {
      grads[r].emplace_back();
      for (int64_t n : sizes) {
        std::vector<float> g;
        for (int64_t i = 0; i < n; ++i) g.push_back(grad_scale[k] * normal(rng));
        grads[r].back().push_back(g);
      }
    }
    const auto& o = runs[r].options;
    in["runs"].push_back({{"options", {{"beta1", o.beta1}, {"beta2", o.beta2}, {"eps", o.eps},
                                       {"weight_decay", o.weight_decay}}},
                          {"max_grad_norm", runs[r].max_grad_norm},
                          {"schedule", ScheduleJson(runs[r].schedule)},
                          {"params", init[r]},
                          {"grads", grads[r]}});
  }
  const std::vector<std::pair<WarmupCosineDecay, int64_t>> schedules = {
      {{0.0, 1e-4, 100, 1244, 0.0, 1.0}, 1300},  // the reference case, past its end
      {{1e-6, 1e-3, 10, 100, 1e-5, 2.0}, 120},
      {{0.0, 2e-3, 0, 40, 0.0, 1.0}, 45},        // no warm-up
      {{0.0, 2e-3, 5, 40, 0.0, 1.0}, 45},        // recipes/tiny-verilog-lora.toml
      {{0.0, 1e-3, 3, 20, 2e-4, 0.5}, 25},
  };
  for (const auto& [s, steps] : schedules) {
    nlohmann::json j = ScheduleJson(s);
    j["steps"] = steps;
    in["schedules"].push_back(j);
  }

  const std::string dir = TestTempDir("gk_optim_oracle");
  std::filesystem::create_directories(dir);
  const std::string in_path = dir + "/in.json", out_path = dir + "/out.json";
  std::ofstream(in_path) << in.dump();
  std::string output;
  const int rc = RunCommand(StrCat(kPython, " ", GK_SOURCE_DIR, "/tests/oracle/optim_check.py ", in_path, " ",
                                   out_path),
                            output);
  ASSERT_EQ(rc, 0) << output;
  std::ifstream out_file(out_path);
  const nlohmann::json out = nlohmann::json::parse(out_file);

  // Parameters after every step, to 1e-6 relative (absolute below 1e-2: a parameter crossing
  // zero has no meaningful relative error).
  for (size_t r = 0; r < runs.size(); ++r) {
    SCOPED_TRACE(StrCat("run ", r));
    const nlohmann::json& res = out["runs"][r];
    AdamW opt(runs[r].options, sizes);
    std::vector<std::vector<float>> p = init[r];
    int clipped = 0, unclipped = 0;
    for (int k = 0; k < kSteps; ++k) {
      std::vector<std::vector<float>> g = grads[r][size_t(k)];
      std::vector<std::span<float>> gs(g.begin(), g.end());
      std::vector<std::span<const float>> cgs(g.begin(), g.end());
      const double norm = GlobalGradNorm(cgs);
      const double torch_norm = res["grad_norm"][k];
      EXPECT_NEAR(norm, torch_norm, 1e-6 * torch_norm) << "step " << k;
      if (runs[r].max_grad_norm > 0) {
        (ClipByGlobalNorm(gs, norm, runs[r].max_grad_norm) < 1 ? clipped : unclipped)++;
      }
      // optax's convention: update k (0-based) uses schedule(k); AdamW's own t is k + 1.
      const double lr = runs[r].schedule(k);
      const double torch_lr = res["lr"][k];
      EXPECT_NEAR(lr, torch_lr, 1e-12 * runs[r].schedule.peak_value) << "step " << k;
      if (!res["hf_lr"].is_null()) {
        const double hf_lr = res["hf_lr"][k];
        EXPECT_NEAR(lr, hf_lr, 1e-12 * runs[r].schedule.peak_value) << "LambdaLR, step " << k;
      }
      std::vector<ParamRef> refs;
      for (size_t b = 0; b < sizes.size(); ++b) refs.push_back({p[b].data(), g[b].data(), sizes[b]});
      opt.Step(refs, lr);
      for (size_t b = 0; b < sizes.size(); ++b) {
        for (size_t i = 0; i < p[b].size(); ++i) {
          const double want = res["params"][k][b][i];
          EXPECT_NEAR(p[b][i], want, 1e-6 * std::max(std::abs(want), 1e-2))
              << "step " << k << " buffer " << b << " element " << i;
        }
      }
    }
    if (runs[r].max_grad_norm > 0) {
      EXPECT_GT(clipped, 0) << "the test means clipping to bite on some steps";
      EXPECT_GT(unclipped, 0) << "and not on others";
    }
  }

  // Schedules against the optax transcription at every step, and against the HF formula
  // before its end (beyond it HF's cosine climbs back up; optax stays at end_value).
  ASSERT_EQ(out["schedules"].size(), schedules.size());
  for (size_t i = 0; i < schedules.size(); ++i) {
    const auto& [s, steps] = schedules[i];
    const nlohmann::json& res = out["schedules"][i];
    for (int64_t k = 0; k < steps; ++k) {
      const double optax = res["optax"][k];
      EXPECT_NEAR(s(k), optax, 1e-13 * s.peak_value) << "schedule " << i << " step " << k;
      if (!res["hf"].is_null() && k < s.decay_steps) {
        const double hf = res["hf"][k];
        EXPECT_NEAR(s(k), hf, 1e-13 * s.peak_value) << "schedule " << i << " step " << k << " (HF)";
      }
    }
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace gk::train
