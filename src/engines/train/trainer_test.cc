// The trainer end to end on a toy model: the loss falls to near zero on 8 rows, a run stopped
// and resumed logs exactly the losses of an uninterrupted one, checkpoints rotate, and bad
// setups are refused. (Against PyTorch: tests/train/train_e2e_test.py and
// model/train/training_oracle_test.cc.)
#include "engines/train/trainer.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "engines/train/checkpoint.h"
#include "formats/token_dataset.h"
#include "model/weights.h"
#include "model/toy_models_test_util.h"

namespace gk::train {
namespace {

struct RunSetup {
  std::string model, data, out;
};

// A toy Gemma 4 model and 8 rows of 24 random tokens, the second half of each row the target.
RunSetup MakeSetup(const std::string& name) {
  RunSetup s;
  const ModelConfig c = ToyConfig("tiny", 8);
  s.model = WriteToyModel(c, "gk_trainer_model", DType::kBF16, 5);
  s.data = TestTempDir("gk_trainer_data_" + name) + "/ds";
  std::mt19937_64 rng(3);
  std::vector<TokenRow> rows;
  for (int r = 0; r < 8; ++r) {
    TokenRow row;
    for (int i = 0; i < 24; ++i) {
      row.tokens.push_back(int32_t(rng() % 300));
      row.loss_mask.push_back(i >= 12 ? 1 : 0);
    }
    rows.push_back(std::move(row));
  }
  EXPECT_TRUE(WriteTokenDataset(s.data, rows, {{"source", "trainer_test"}}).ok());
  s.out = TestTempDir("gk_trainer_run_" + name);
  std::filesystem::remove_all(s.out);
  return s;
}

TrainRecipe Recipe(const RunSetup& s) {
  TrainRecipe r;
  r.model = s.model;
  r.data = s.data;
  r.out = s.out;
  r.rank = 8;
  r.alpha = 16;
  r.dropout = 0.05;
  r.learning_rate = 1e-2;
  r.warmup_steps = 3;
  r.micro_batch = 2;
  r.grad_accum = 2;
  r.max_steps = 12;
  r.save_every = 4;
  r.keep_last = 2;
  r.max_seq_len = 64;
  return r;
}

std::vector<StepLog> RunToEnd(const TrainRecipe& r, bool resume, int64_t stop_after = -1, bool* stopped = nullptr) {
  ThreadPool pool(2);
  auto t = Trainer::Create(r, r.data, &pool, resume);
  EXPECT_TRUE(t.ok()) << t.message();
  if (!t.ok()) return {};
  std::atomic<bool> stop{false};
  std::vector<StepLog> logs;
  Status st = (*t)->Run(&stop, [&](const StepLog& l) {
    logs.push_back(l);
    if (l.step == stop_after) stop = true;
  });
  EXPECT_TRUE(st.ok()) << st.message();
  if (stopped) *stopped = (*t)->stopped();
  return logs;
}

std::vector<double> MetricsLosses(const std::string& out) {
  std::ifstream in(out + "/metrics.jsonl");
  std::vector<double> losses;
  std::string line;
  while (std::getline(in, line)) losses.push_back(nlohmann::json::parse(line)["loss"].get<double>());
  return losses;
}

// In both precisions: bf16 (the default) must still converge.
class TrainerOverfit : public testing::TestWithParam<const char*> {};

TEST_P(TrainerOverfit, OverfitsEightRows) {
  RunSetup s = MakeSetup(std::string("overfit_") + GetParam());
  TrainRecipe r = Recipe(s);
  r.precision = GetParam();
  r.dropout = 0;
  r.max_steps = 80;
  r.save_every = 0;
  const std::vector<StepLog> logs = RunToEnd(r, false);
  ASSERT_EQ(logs.size(), 80u);
  EXPECT_GT(logs.front().loss, 4.0);  // ~ln(300) at the start
  EXPECT_LT(logs.back().loss, 0.05) << "the adapter did not memorise 8 rows";
  EXPECT_GT(logs.back().accuracy, 0.99);
  EXPECT_EQ(logs.front().learning_rate, 0.0);  // optax: the first update uses the warm-up's start
  EXPECT_TRUE(std::filesystem::exists(s.out + "/adapter/adapter_model.safetensors"));
  auto run = nlohmann::json::parse(std::ifstream(s.out + "/training_run.json"));
  EXPECT_EQ(run["steps"]["done"], 80);
  EXPECT_GT(run["parameters"]["trainable"].template get<int64_t>(), 0);
  EXPECT_LT(run["parameters"]["trainable"].template get<int64_t>(), run["parameters"]["total"].template get<int64_t>());
  EXPECT_EQ(run["dataset"]["rows"], 8);
  EXPECT_EQ(run["precision"], GetParam());
}

INSTANTIATE_TEST_SUITE_P(Precisions, TrainerOverfit, testing::Values("bf16", "f32"));

TEST(Trainer, ResumeUnderAnotherPrecisionIsRefusedNamingTheKey) {
  RunSetup s = MakeSetup("precision_resume");
  TrainRecipe r = Recipe(s);
  r.precision = "f32";
  r.max_steps = 4;
  ASSERT_EQ(RunToEnd(r, false).size(), 4u);
  r.precision = "bf16";
  r.max_steps = 8;
  ThreadPool pool(1);
  auto refused = Trainer::Create(r, r.data, &pool, true);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.message().find("train.precision (\"f32\" in the checkpoint, \"bf16\" now)"), std::string::npos)
      << refused.message();
}

TEST(Trainer, StoppedAndResumedRunLogsTheSameLosses) {
  RunSetup a = MakeSetup("straight");
  const std::vector<StepLog> straight = RunToEnd(Recipe(a), false);
  ASSERT_EQ(straight.size(), 12u);

  RunSetup b = MakeSetup("resumed");
  bool stopped = false;
  const std::vector<StepLog> first = RunToEnd(Recipe(b), false, /*stop_after=*/6, &stopped);
  EXPECT_TRUE(stopped);
  ASSERT_EQ(first.size(), 6u);
  // The stop wrote a checkpoint of step 6 (between the periodic ones at 4 and 8).
  auto latest = FindLatestCheckpoint(b.out);
  ASSERT_TRUE(latest.ok() && latest->has_value());
  EXPECT_EQ(std::filesystem::path(**latest).filename(), "checkpoint-6");
  // Without --resume an existing run is not overwritten.
  ThreadPool pool(1);
  auto refused = Trainer::Create(Recipe(b), b.data, &pool, false);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.message().find("--resume"), std::string::npos) << refused.message();

  const std::vector<StepLog> rest = RunToEnd(Recipe(b), true);
  ASSERT_EQ(rest.size(), 6u);
  EXPECT_EQ(rest.front().step, 7);
  for (size_t i = 0; i < 12; ++i) {
    const StepLog& got = i < 6 ? first[i] : rest[i - 6];
    EXPECT_EQ(got.loss, straight[i].loss) << "step " << i + 1;  // bit for bit
    EXPECT_EQ(got.grad_norm, straight[i].grad_norm) << "step " << i + 1;
  }
  EXPECT_EQ(MetricsLosses(b.out), MetricsLosses(a.out));
  // keep_last = 2: checkpoints 8 and 12 remain.
  int checkpoints = 0;
  for (const auto& e : std::filesystem::directory_iterator(b.out)) {
    checkpoints += e.path().filename().string().starts_with("checkpoint-");
  }
  EXPECT_EQ(checkpoints, 2);

  // A changed recipe does not resume another run's checkpoint.
  TrainRecipe other = Recipe(b);
  other.learning_rate = 5e-3;
  other.max_steps = 16;
  auto mismatch = Trainer::Create(other, b.data, &pool, true);
  ASSERT_FALSE(mismatch.ok());
  EXPECT_NE(mismatch.message().find("different recipe"), std::string::npos) << mismatch.message();
}

// Full fine-tuning: every weight trains (the loss falls faster than LoRA's), RUN/model is a
// complete checkpoint the inference engine loads and whose logits are the trained model's, and a
// stopped run resumes bit for bit from its checkpoint of f32 masters and moments.
TEST(Trainer, FullFineTuneTrainsWritesTheModelAndResumes) {
  RunSetup a = MakeSetup("full_straight");
  TrainRecipe r = Recipe(a);
  r.full_finetune = true;
  r.learning_rate = 3e-3;
  const std::vector<StepLog> straight = RunToEnd(r, false);
  ASSERT_EQ(straight.size(), 12u);
  EXPECT_LT(straight.back().loss, 0.5 * straight.front().loss);
  auto run = nlohmann::json::parse(std::ifstream(a.out + "/training_run.json"));
  EXPECT_EQ(run["parameters"]["full_finetune"], true);
  EXPECT_EQ(run["trained_model"], a.out + "/model");
  EXPECT_FALSE(std::filesystem::exists(a.out + "/adapter"));
  const ModelConfig c = ToyConfig("tiny", 8);
  auto base = LoadWeights(r.model, c);
  auto trained = LoadWeights(a.out + "/model", c);
  ASSERT_TRUE(trained.ok()) << trained.message();
  ASSERT_TRUE(base.ok());
  EXPECT_EQ(trained->layers[0].q.dtype, DType::kBF16);  // the base's dtype
  EXPECT_NE(std::memcmp(trained->layers[0].q.data, base->layers[0].q.data, size_t(base->layers[0].q.bytes())), 0);
  EXPECT_EQ(trained->layers[0].layer_scalar, base->layers[0].layer_scalar);  // a buffer, not trained
  EXPECT_NE(trained->final_norm, base->final_norm);

  RunSetup b = MakeSetup("full_resumed");
  TrainRecipe rb = Recipe(b);
  rb.full_finetune = true;
  rb.learning_rate = 3e-3;
  bool stopped = false;
  const std::vector<StepLog> first = RunToEnd(rb, false, /*stop_after=*/5, &stopped);
  EXPECT_TRUE(stopped);
  EXPECT_FALSE(std::filesystem::exists(b.out + "/model"));  // a stopped run writes no final model
  const std::vector<StepLog> rest = RunToEnd(rb, true);
  ASSERT_EQ(first.size() + rest.size(), 12u);
  for (size_t i = 0; i < 12; ++i) {
    const StepLog& got = i < first.size() ? first[i] : rest[i - first.size()];
    EXPECT_EQ(got.loss, straight[i].loss) << "step " << i + 1;
    EXPECT_EQ(got.grad_norm, straight[i].grad_norm) << "step " << i + 1;
  }
  // A LoRA recipe does not resume a full fine-tuning checkpoint.
  TrainRecipe lora = Recipe(b);
  lora.max_steps = 16;
  ThreadPool pool(1);
  EXPECT_FALSE(Trainer::Create(lora, b.data, &pool, true).ok());
}

TEST(Trainer, RefusesWhatItCannotTrain) {
  RunSetup s = MakeSetup("refuse");
  ThreadPool pool(1);
  TrainRecipe r = Recipe(s);
  r.full_finetune = true;
  r.max_bytes = 1 << 20;  // a full fine-tune that does not fit: refused before the model loads, with the numbers
  auto t = Trainer::Create(r, r.data, &pool, false);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.message().find("needs"), std::string::npos) << t.message();
  EXPECT_NE(t.message().find("master weights"), std::string::npos) << t.message();
  EXPECT_NE(t.message().find("memory.max_bytes"), std::string::npos) << t.message();
  EXPECT_FALSE(std::filesystem::exists(s.out + "/metrics.jsonl"));
  r.init_adapter = s.model;  // init_adapter belongs to LoRA runs
  r.max_bytes = 0;
  t = Trainer::Create(r, r.data, &pool, false);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.message().find("init_adapter"), std::string::npos) << t.message();
  r = Recipe(s);
  r.micro_batch = 8;
  r.grad_accum = 2;  // 16 rows a step, 8 in the data set
  EXPECT_FALSE(Trainer::Create(r, r.data, &pool, false).ok());
  r = Recipe(s);
  r.target_modules = R"(.*\.nothing)";
  t = Trainer::Create(r, r.data, &pool, false);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.message().find("matches no projection"), std::string::npos) << t.message();
  r = Recipe(s);
  EXPECT_FALSE(Trainer::Create(r, s.out + "/no-such-dataset", &pool, false).ok());
}

}  // namespace
}  // namespace gk::train
