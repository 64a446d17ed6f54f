#include "engines/train/checkpoint.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <thread>

#include "formats/safetensors.h"
#include "tensor/dtype.h"
#include "util/atomic_file.h"
#include "util/test_temp_dir.h"

namespace gk::train {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

NamedTensor Tensor(std::string name, std::vector<int64_t> shape, uint32_t seed) {
  NamedTensor t;
  t.name = std::move(name);
  t.shape = std::move(shape);
  int64_t n = 1;
  for (int64_t d : t.shape) n *= d;
  t.data.resize(size_t(n));
  uint32_t x = seed * 2654435761u + 1;
  for (auto& v : t.data) {
    x = x * 1664525u + 1013904223u;
    v = float(int32_t(x)) * 1e-9f;
  }
  return t;
}

CheckpointContents Small(int64_t step, uint32_t seed = 0) {
  CheckpointContents c;
  c.adapter_config = {{"peft_type", "LORA"}, {"r", 8}, {"lora_alpha", 16.0},
                      {"target_modules", {"q_proj", "v_proj"}}};
  const std::string a = "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight";
  const std::string b = "base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight";
  c.params.push_back(Tensor(a, {8, 32}, seed + 1));
  c.params.push_back(Tensor(b, {32, 8}, seed + 2));
  c.optimizer.push_back(Tensor(a + ".exp_avg", {8, 32}, seed + 3));
  c.optimizer.push_back(Tensor(a + ".exp_avg_sq", {8, 32}, seed + 4));
  c.optimizer.push_back(Tensor(b + ".exp_avg", {32, 8}, seed + 5));
  c.optimizer.push_back(Tensor(b + ".exp_avg_sq", {32, 8}, seed + 6));
  c.trainer_state = {{"step", step}, {"seed", seed}};
  return c;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * 4) == 0);
}

void ExpectSameTensors(const std::vector<NamedTensor>& got, const std::vector<NamedTensor>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    SCOPED_TRACE(want[i].name);
    EXPECT_EQ(got[i].name, want[i].name);
    EXPECT_EQ(got[i].shape, want[i].shape);
    EXPECT_TRUE(SameBits(got[i].data, want[i].data));
  }
}

void ExpectSame(const CheckpointContents& got, const CheckpointContents& want) {
  EXPECT_EQ(got.adapter_config, want.adapter_config);
  EXPECT_EQ(got.trainer_state, want.trainer_state);
  ExpectSameTensors(got.params, want.params);
  ExpectSameTensors(got.optimizer, want.optimizer);
}

std::string Latest(const std::string& run) {
  auto r = FindLatestCheckpoint(run);
  EXPECT_TRUE(r.ok()) << r.message();
  return r.ok() && r->has_value() ? **r : "";
}

std::vector<std::string> Entries(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

void WriteText(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    root_ = TestTempDir(StrCat("gk_ckpt_", info->name()));
    run_ = (fs::path(root_) / "run").string();
  }
  void TearDown() override { fs::remove_all(root_); }

  std::string Ckpt(int64_t step) const { return (fs::path(run_) / StrCat("checkpoint-", step)).string(); }

  std::string root_, run_;
};

TEST_F(CheckpointTest, RoundTripIsExact) {
  CheckpointContents c = Small(5, 7);
  // Values that a text or narrowing path would disturb.
  c.params[0].data[0] = -0.0f;
  c.params[0].data[1] = std::numeric_limits<float>::denorm_min();
  c.params[0].data[2] = std::numeric_limits<float>::infinity();
  c.params[0].data[3] = std::numeric_limits<float>::quiet_NaN();
  c.params[0].data[4] = 0.1f;
  c.params.push_back(Tensor("scalar", {}, 9));
  c.params.push_back(Tensor("empty", {0, 4}, 9));
  c.trainer_state["rng"] = {{"state", uint64_t(0xfedcba9876543210ull)}, {"inc", 12345}};
  c.trainer_state["loss"] = 0.1234567890123456789;
  c.trainer_state["data"] = {{"epoch", 1}, {"row", 42}, {"order", {3, 1, 2}}};

  ASSERT_TRUE(SaveCheckpoint(run_, c, 3).ok());  // RUN (and its parent) did not exist
  EXPECT_EQ(Latest(run_), Ckpt(5));
  EXPECT_EQ(Entries(Ckpt(5)), (std::vector<std::string>{"adapter_config.json",
                                                       "adapter_model.safetensors",
                                                       "optimizer.safetensors",
                                                       "trainer_state.json"}));
  EXPECT_EQ(Entries(run_), (std::vector<std::string>{"checkpoint-5"}));

  auto loaded = LoadCheckpoint(Ckpt(5));
  ASSERT_TRUE(loaded.ok()) << loaded.message();
  ExpectSame(*loaded, c);

  // On disk: F32 tensors with their shapes in the given order, PEFT's metadata, the marker.
  auto file = SafetensorsFile::Open(Ckpt(5) + "/adapter_model.safetensors");
  ASSERT_TRUE(file.ok()) << file.message();
  EXPECT_EQ((*file)->metadata(), (std::map<std::string, std::string>{{"format", "pt"}}));
  ASSERT_EQ((*file)->tensors().size(), c.params.size());
  for (size_t i = 0; i < c.params.size(); ++i) {
    EXPECT_EQ((*file)->tensors()[i].name, c.params[i].name);
    EXPECT_EQ((*file)->tensors()[i].dtype, DType::kF32);
    EXPECT_EQ((*file)->tensors()[i].shape, c.params[i].shape);
  }
  auto state_text = ReadFile(Ckpt(5) + "/trainer_state.json");
  ASSERT_TRUE(state_text.ok());
  json state = json::parse(*state_text);
  EXPECT_EQ(state["complete"], true);
  EXPECT_EQ(state["step"], 5);
  auto config_text = ReadFile(Ckpt(5) + "/adapter_config.json");
  ASSERT_TRUE(config_text.ok());
  EXPECT_EQ(json::parse(*config_text), c.adapter_config);
}

TEST_F(CheckpointTest, KeepLastPrunesByNumericStep) {
  // Lexicographically "checkpoint-99" > "checkpoint-9" > "checkpoint-8" > "checkpoint-100".
  for (int64_t step : {8, 9, 10, 99, 100}) {
    ASSERT_TRUE(SaveCheckpoint(run_, Small(step, uint32_t(step)), 3).ok());
  }
  EXPECT_EQ(Entries(run_), (std::vector<std::string>{"checkpoint-10", "checkpoint-100",
                                                     "checkpoint-99"}));
  EXPECT_EQ(Latest(run_), Ckpt(100));
  auto loaded = LoadCheckpoint(Ckpt(100));
  ASSERT_TRUE(loaded.ok()) << loaded.message();
  ExpectSame(*loaded, Small(100, 100));
}

TEST_F(CheckpointTest, KeepLastZeroKeepsAll) {
  for (int64_t step : {1, 2, 3, 4}) ASSERT_TRUE(SaveCheckpoint(run_, Small(step), 0).ok());
  EXPECT_EQ(Entries(run_).size(), 4u);
  ASSERT_TRUE(SaveCheckpoint(run_, Small(5), 1).ok());
  EXPECT_EQ(Entries(run_), (std::vector<std::string>{"checkpoint-5"}));
}

TEST_F(CheckpointTest, ResavingAStepReplacesIt) {
  ASSERT_TRUE(SaveCheckpoint(run_, Small(4, 1), 3).ok());
  ASSERT_TRUE(SaveCheckpoint(run_, Small(5, 1), 3).ok());
  ASSERT_TRUE(SaveCheckpoint(run_, Small(5, 2), 3).ok());  // a resumed run saving step 5 again
  EXPECT_EQ(Entries(run_), (std::vector<std::string>{"checkpoint-4", "checkpoint-5"}));
  auto loaded = LoadCheckpoint(Ckpt(5));
  ASSERT_TRUE(loaded.ok()) << loaded.message();
  ExpectSame(*loaded, Small(5, 2));
}

TEST_F(CheckpointTest, NewCheckpointIsKeptEvenBelowNewerSteps) {
  for (int64_t step : {200, 300, 400}) ASSERT_TRUE(SaveCheckpoint(run_, Small(step), 2).ok());
  // A run resumed by hand from an older checkpoint saves step 150.
  ASSERT_TRUE(SaveCheckpoint(run_, Small(150), 2).ok());
  EXPECT_EQ(Entries(run_), (std::vector<std::string>{"checkpoint-150", "checkpoint-400"}));
}

TEST_F(CheckpointTest, IncompleteAndForeignDirectoriesAreSkipped) {
  ASSERT_TRUE(SaveCheckpoint(run_, Small(10), 0).ok());
  ASSERT_TRUE(SaveCheckpoint(run_, Small(20), 0).ok());
  auto full_state = ReadFile(Ckpt(20) + "/trainer_state.json");
  ASSERT_TRUE(full_state.ok());

  // Newer step numbers, each incomplete in its own way, all with the other files in place.
  auto copy_without_state = [&](int64_t step) {
    fs::copy(Ckpt(20), Ckpt(step), fs::copy_options::recursive);
    fs::remove(fs::path(Ckpt(step)) / "trainer_state.json");
  };
  copy_without_state(30);  // trainer_state.json missing
  copy_without_state(40);
  WriteText(fs::path(Ckpt(40)) / "trainer_state.json", full_state->substr(0, full_state->size() / 2));
  copy_without_state(50);
  WriteText(fs::path(Ckpt(50)) / "trainer_state.json", R"({"step": 50})");  // no marker
  copy_without_state(60);
  WriteText(fs::path(Ckpt(60)) / "trainer_state.json", R"({"step": 60, "complete": false})");
  // Complete copies under names that are not checkpoints.
  fs::copy(Ckpt(20), fs::path(run_) / ".checkpoint-70.tmp-1", fs::copy_options::recursive);
  fs::copy(Ckpt(20), fs::path(run_) / "checkpoint-070", fs::copy_options::recursive);
  fs::copy(Ckpt(20), fs::path(run_) / "checkpoint-80x", fs::copy_options::recursive);
  fs::copy(Ckpt(20), fs::path(run_) / "checkpoint-", fs::copy_options::recursive);
  fs::copy(Ckpt(20), fs::path(run_) / "checkpoint-99999999999999999999", fs::copy_options::recursive);
  WriteText(fs::path(run_) / "checkpoint-90", "a file, not a directory");

  EXPECT_EQ(Latest(run_), Ckpt(20));

  auto missing = LoadCheckpoint(Ckpt(30));
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.message().find("trainer_state.json is missing"), std::string::npos)
      << missing.message();
  auto truncated = LoadCheckpoint(Ckpt(40));
  ASSERT_FALSE(truncated.ok());
  EXPECT_NE(truncated.message().find("trainer_state.json: not valid JSON"), std::string::npos)
      << truncated.message();
  WriteText(fs::path(Ckpt(40)) / "trainer_state.json", R"({"step": 1e999, "complete": true})");
  auto huge = LoadCheckpoint(Ckpt(40));
  ASSERT_FALSE(huge.ok());
  EXPECT_NE(huge.message().find("trainer_state.json: not valid JSON: number overflow"), std::string::npos)
      << huge.message();
  auto unmarked = LoadCheckpoint(Ckpt(50));
  ASSERT_FALSE(unmarked.ok());
  EXPECT_NE(unmarked.message().find("complete"), std::string::npos) << unmarked.message();

  // Pruning only counts complete checkpoints and leaves what it does not recognise alone.
  ASSERT_TRUE(SaveCheckpoint(run_, Small(21), 1).ok());
  EXPECT_FALSE(fs::exists(Ckpt(10)));
  EXPECT_FALSE(fs::exists(Ckpt(20)));
  EXPECT_TRUE(fs::exists(Ckpt(30)));
  EXPECT_TRUE(fs::exists(fs::path(run_) / "checkpoint-070"));
  EXPECT_FALSE(fs::exists(fs::path(run_) / ".checkpoint-70.tmp-1"));
  EXPECT_EQ(Latest(run_), Ckpt(21));
}

TEST_F(CheckpointTest, FindLatestWithoutCheckpoints) {
  auto missing = FindLatestCheckpoint(run_);
  ASSERT_TRUE(missing.ok()) << missing.message();
  EXPECT_FALSE(missing->has_value());

  fs::create_directories(run_);
  auto empty = FindLatestCheckpoint(run_);
  ASSERT_TRUE(empty.ok()) << empty.message();
  EXPECT_FALSE(empty->has_value());

  const std::string file = root_ + "/not_a_dir";
  WriteText(file, "x");
  auto not_dir = FindLatestCheckpoint(file);
  ASSERT_FALSE(not_dir.ok());
  EXPECT_NE(not_dir.message().find("not a directory"), std::string::npos) << not_dir.message();

  if (::geteuid() != 0) {  // root reads through permissions
    fs::permissions(run_, fs::perms::none);
    auto unreadable = FindLatestCheckpoint(run_);
    fs::permissions(run_, fs::perms::owner_all);
    ASSERT_FALSE(unreadable.ok());
    EXPECT_NE(unreadable.message().find(run_), std::string::npos) << unreadable.message();
  }
}

TEST_F(CheckpointTest, StaleTmpDirectoriesAreRemovedOnSave) {
  ASSERT_TRUE(SaveCheckpoint(run_, Small(1), 3).ok());
  // What killed saves leave: a half-written tmp dir, an old copy set aside, a pruning victim.
  for (const char* name : {".checkpoint-2.tmp-99999", ".checkpoint-1.tmp-123.old",
                           ".checkpoint-0.tmp-5.del"}) {
    fs::create_directories(fs::path(run_) / name);
    WriteText(fs::path(run_) / name / "adapter_model.safetensors.tmp.99999", "partial");
  }
  ASSERT_TRUE(SaveCheckpoint(run_, Small(2), 3).ok());
  EXPECT_EQ(Entries(run_), (std::vector<std::string>{"checkpoint-1", "checkpoint-2"}));
}

TEST_F(CheckpointTest, DamagedFilesGiveClearErrors) {
  ASSERT_TRUE(SaveCheckpoint(run_, Small(3), 3).ok());
  const fs::path dir = Ckpt(3);
  const std::string adapter = (dir / "adapter_model.safetensors").string();
  auto bytes = ReadFile(adapter);
  ASSERT_TRUE(bytes.ok());

  auto expect_error = [&](const std::string& what, const std::string& needle) {
    SCOPED_TRACE(what);
    auto r = LoadCheckpoint(dir.string());
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.message().find(needle), std::string::npos) << r.message();
  };

  WriteText(adapter, bytes->substr(0, bytes->size() - 10));  // truncated data
  expect_error("truncated", "adapter_model.safetensors");
  std::string garbage = *bytes;
  garbage[8] = '#';  // header JSON broken
  WriteText(adapter, garbage);
  expect_error("bad header", "adapter_model.safetensors");
  WriteText(adapter, "xy");
  expect_error("tiny", "adapter_model.safetensors");
  fs::remove(adapter);
  expect_error("missing", "adapter_model.safetensors is missing");
  WriteText(adapter, *bytes);
  ASSERT_TRUE(LoadCheckpoint(dir.string()).ok());

  fs::remove(dir / "optimizer.safetensors");
  expect_error("optimizer missing", "optimizer.safetensors is missing");
  WriteText(dir / "adapter_config.json", "{\"r\": ");
  expect_error("config truncated", "adapter_config.json: not valid JSON");
  WriteText(dir / "adapter_config.json", "[1, 2]");
  expect_error("config not an object", "adapter_config.json must hold a JSON object");

  auto r = LoadCheckpoint(Ckpt(4));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("does not exist"), std::string::npos) << r.message();
}

TEST_F(CheckpointTest, LoadsBf16AndF16AdaptersAsF32AndRejectsOtherDtypes) {
  ASSERT_TRUE(SaveCheckpoint(run_, Small(3), 3).ok());
  const std::string adapter = Ckpt(3) + "/adapter_model.safetensors";
  const std::vector<float> want = {1.0f, -2.5f, 0.1f, 65504.0f, -0.0f, 3.140625f};
  auto half_spec = [&](const std::string& name, DType dtype) {
    TensorSpec t;
    t.name = name;
    t.dtype = dtype;
    t.shape = {2, 3};
    t.fill = [&want, dtype](uint8_t* dst, size_t n) -> Status {
      if (n != want.size() * 2) return Status::Error("size");
      ConvertFromF32(dtype, want.data(), int64_t(want.size()), dst);
      return Status::Ok();
    };
    return t;
  };
  ASSERT_TRUE(WriteSafetensors(adapter, {half_spec("a", DType::kBF16), half_spec("b", DType::kF16)},
                               {{"format", "pt"}})
                  .ok());
  auto loaded = LoadCheckpoint(Ckpt(3));
  ASSERT_TRUE(loaded.ok()) << loaded.message();
  ASSERT_EQ(loaded->params.size(), 2u);
  EXPECT_EQ(loaded->params[0].name, "a");
  EXPECT_EQ(loaded->params[1].name, "b");
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(loaded->params[0].data[i], RoundToBf16(want[i]));
    EXPECT_EQ(loaded->params[1].data[i], F16ToF32(F32ToF16(want[i])));
  }
  EXPECT_EQ(loaded->params[0].shape, (std::vector<int64_t>{2, 3}));

  TensorSpec ints;
  ints.name = "steps";
  ints.dtype = DType::kI64;
  ints.shape = {1};
  ints.fill = [](uint8_t* dst, size_t n) -> Status {
    std::memset(dst, 0, n);
    return Status::Ok();
  };
  ASSERT_TRUE(WriteSafetensors(adapter, {ints}).ok());
  auto bad = LoadCheckpoint(Ckpt(3));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("adapter_model.safetensors: tensor 'steps' has dtype I64"),
            std::string::npos)
      << bad.message();
}

TEST_F(CheckpointTest, InvalidContentsWriteNothing) {
  CheckpointContents no_step = Small(1);
  no_step.trainer_state.erase("step");
  auto st = SaveCheckpoint(run_, no_step, 3);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("\"step\""), std::string::npos) << st.message();

  CheckpointContents negative = Small(-1);
  EXPECT_FALSE(SaveCheckpoint(run_, negative, 3).ok());

  CheckpointContents bad_shape = Small(1);
  bad_shape.optimizer[1].shape = {3, 3};
  st = SaveCheckpoint(run_, bad_shape, 3);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("optimizer.safetensors"), std::string::npos) << st.message();
  EXPECT_FALSE(fs::exists(run_));

  // A failure inside the write (duplicate names) leaves no tmp dir and no checkpoint.
  ASSERT_TRUE(SaveCheckpoint(run_, Small(1), 3).ok());
  CheckpointContents dup = Small(2);
  dup.params[1].name = dup.params[0].name;
  dup.params[1].shape = dup.params[0].shape;
  st = SaveCheckpoint(run_, dup, 3);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("duplicate"), std::string::npos) << st.message();
  EXPECT_EQ(Entries(run_), (std::vector<std::string>{"checkpoint-1"}));
}

// ---- Kill safety ----

// About 200 MB of tensors whose bits depend on (step, variant), so a loaded checkpoint can be
// checked against the one it claims to be.
CheckpointContents Big(int64_t step, int64_t variant) {
  CheckpointContents c;
  c.adapter_config = {{"peft_type", "LORA"}, {"r", 16}};
  const uint32_t seed = uint32_t(step * 1000 + variant);
  auto big = [seed](std::string name, int64_t rows, int64_t cols, uint32_t salt) {
    NamedTensor t;
    t.name = std::move(name);
    t.shape = {rows, cols};
    t.data.resize(size_t(rows * cols));
    const uint32_t s = (seed * 2654435761u) ^ (salt * 40503u);
    for (size_t i = 0; i < t.data.size(); ++i) t.data[i] = float((uint32_t(i) * 747796405u) ^ s);
    return t;
  };
  for (int l = 0; l < 4; ++l) {
    const std::string p = StrCat("base_model.model.layers.", l, ".mlp.down_proj.lora_");
    c.params.push_back(big(p + "A.weight", 16, 1 << 16, uint32_t(2 * l)));       // 4 MB
    c.params.push_back(big(p + "B.weight", 1 << 16, 16, uint32_t(2 * l + 1)));   // 4 MB
  }
  for (size_t i = 0; i < c.params.size(); ++i) {
    const NamedTensor& a = c.params[i];
    // Moments sized up so that the whole checkpoint is ~220 MB and a save takes a while.
    c.optimizer.push_back(big(a.name + ".exp_avg", a.shape[0] * 3, a.shape[1], uint32_t(100 + i)));
    c.optimizer.push_back(big(a.name + ".exp_avg_sq", a.shape[0] * 3, a.shape[1], uint32_t(200 + i)));
  }
  c.trainer_state = {{"step", step}, {"variant", variant}};
  return c;
}

bool Equal(const CheckpointContents& a, const CheckpointContents& b) {
  auto same = [](const std::vector<NamedTensor>& x, const std::vector<NamedTensor>& y) {
    if (x.size() != y.size()) return false;
    for (size_t i = 0; i < x.size(); ++i) {
      if (x[i].name != y[i].name || x[i].shape != y[i].shape || !SameBits(x[i].data, y[i].data)) {
        return false;
      }
    }
    return true;
  };
  return a.adapter_config == b.adapter_config && a.trainer_state == b.trainer_state &&
         same(a.params, b.params) && same(a.optimizer, b.optimizer);
}

// Saves in a child process and SIGKILLs it after `delay`; returns true when the child had
// finished by itself.
bool SaveAndKill(const std::string& run, const CheckpointContents& c, int64_t keep_last,
                 std::chrono::microseconds delay) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    Status st = SaveCheckpoint(run, c, keep_last);
    ::_exit(st.ok() ? 0 : 1);
  }
  EXPECT_GT(pid, 0);
  std::this_thread::sleep_for(delay);
  ::kill(pid, SIGKILL);
  int wstatus = 0;
  EXPECT_EQ(::waitpid(pid, &wstatus, 0), pid);
  if (WIFEXITED(wstatus)) {
    EXPECT_EQ(WEXITSTATUS(wstatus), 0) << "the child's save failed";
    return true;
  }
  EXPECT_TRUE(WIFSIGNALED(wstatus));
  return false;
}

TEST_F(CheckpointTest, KillAtAnyMomentLeavesThePreviousOrTheNewCheckpoint) {
  constexpr int64_t kKeep = 2;
  // The first save, uninterrupted, also tells how long one takes on this machine, so the kill
  // delays can be spread across its phases (tensors, JSON, renames, pruning).
  CheckpointContents prev = Big(1, 0);
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(SaveCheckpoint(run_, prev, kKeep).ok());
  const auto save_us = std::chrono::duration_cast<std::chrono::microseconds>(
      std::chrono::steady_clock::now() - t0);
  std::printf("one ~220 MB save took %.1f ms\n", save_us.count() / 1e3);

  const std::vector<double> fractions = {0.0, 0.02, 0.1, 0.3, 0.6, 0.85, 0.95, 1.0, 1.05, 1.3};
  int killed_before_done = 0, finished = 0;
  int64_t next_step = 2;
  for (size_t i = 0; i < fractions.size() + 4; ++i) {
    // The last rounds re-save the latest step (a resumed run), which replaces a directory.
    const bool resave = i >= fractions.size();
    const double f = resave ? 0.7 + 0.15 * double(i - fractions.size()) : fractions[i];
    const int64_t prev_step = prev.trainer_state["step"].get<int64_t>();
    const int64_t prev_variant = prev.trainer_state["variant"].get<int64_t>();
    CheckpointContents next = resave ? Big(prev_step, prev_variant + 1) : Big(next_step++, 0);
    const auto delay = std::chrono::microseconds(int64_t(f * double(save_us.count())));
    SCOPED_TRACE(StrCat("round ", i, " delay ", delay.count(), " us, resave ", resave));

    const bool done = SaveAndKill(run_, next, kKeep, delay);

    auto latest = FindLatestCheckpoint(run_);
    ASSERT_TRUE(latest.ok()) << latest.message();
    ASSERT_TRUE(latest->has_value()) << "no complete checkpoint left";
    auto loaded = LoadCheckpoint(**latest);
    ASSERT_TRUE(loaded.ok()) << loaded.message();
    const bool is_next = Equal(*loaded, next);
    const bool is_prev = Equal(*loaded, prev);
    ASSERT_TRUE(is_next || is_prev) << **latest << " holds neither the previous nor the new checkpoint";
    if (done) {
      ASSERT_TRUE(is_next) << "the child finished but its checkpoint is not the latest";
    }
    // No half checkpoint under any checkpoint-<N> name: every one of them loads.
    for (const std::string& name : Entries(run_)) {
      if (name.rfind("checkpoint-", 0) != 0) continue;
      auto r = LoadCheckpoint((fs::path(run_) / name).string());
      EXPECT_TRUE(r.ok()) << r.message();
    }
    if (is_next) {
      prev = std::move(next);
      ++finished;
    } else {
      ++killed_before_done;
    }
  }
  std::printf("%d kills left the previous checkpoint, %d saves completed\n", killed_before_done,
              finished);
  EXPECT_GT(killed_before_done, 0) << "no kill landed inside a save; the test proved nothing";

  // The next uninterrupted save cleans up what the killed ones left behind.
  ASSERT_TRUE(SaveCheckpoint(run_, Big(next_step, 0), kKeep).ok());
  for (const std::string& name : Entries(run_)) {
    EXPECT_EQ(name.rfind("checkpoint-", 0), 0u) << "left behind: " << name;
  }
  EXPECT_EQ(Entries(run_).size(), size_t(kKeep));
}

}  // namespace
}  // namespace gk::train
