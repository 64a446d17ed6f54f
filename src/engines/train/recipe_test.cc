#include "engines/train/recipe.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

#include "util/test_temp_dir.h"

namespace gk::train {
namespace {

const char kMinimal[] = R"(
model = "/m"
out = "/o"
[data]
path = "/d.jsonl"
)";

std::string SourcePath(const std::string& rel) { return std::string(GK_SOURCE_DIR) + "/" + rel; }

TEST(Recipe, DefaultsAreTheReferenceCase) {
  auto r = ParseRecipe(kMinimal, "min.toml");
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r->model, "/m");
  EXPECT_EQ(r->data, "/d.jsonl");
  EXPECT_EQ(r->out, "/o");
  EXPECT_EQ(r->rank, 64);
  EXPECT_EQ(r->alpha, 64);
  EXPECT_EQ(r->learning_rate, 1e-4);
  EXPECT_EQ(r->grad_accum, 8);
  EXPECT_TRUE(r->remat);
  EXPECT_TRUE(ValidateRecipe(*r).ok()) << ValidateRecipe(*r).message();
}

TEST(Recipe, ParsesEveryTable) {
  const char text[] = R"(
model = "m"
out = "o"
seed = 1234
[data]
path = "d"
max_seq_len = 1024
loss = "all"
max_rows = 10
shuffle = false
batching = "packed"
[lora]
rank = 8
alpha = 16.5
dropout = 0.1
use_rslora = true
target_modules = '.*\.q_proj'
full_finetune = false
[optim]
learning_rate = 3e-4
warmup_steps = 7
end_learning_rate = 1e-6
weight_decay = 0.01
beta1 = 0.8
beta2 = 0.95
eps = 1e-6
max_grad_norm = 1.0
[batch]
micro_batch = 2
grad_accum = 4
epochs = 3
max_steps = 50
[memory]
remat = false
[checkpoint]
save_every = 25
keep_last = 0
[log]
log_every = 5
)";
  auto r = ParseRecipe(text, "all.toml");
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r->seed, 1234u);
  EXPECT_EQ(r->max_seq_len, 1024);
  EXPECT_EQ(r->loss, "all");
  EXPECT_EQ(r->max_rows, 10);
  EXPECT_FALSE(r->shuffle);
  EXPECT_EQ(r->batching, "packed");
  EXPECT_EQ(r->rank, 8);
  EXPECT_EQ(r->alpha, 16.5);
  EXPECT_EQ(r->dropout, 0.1);
  EXPECT_TRUE(r->use_rslora);
  EXPECT_EQ(r->target_modules, R"(.*\.q_proj)");
  EXPECT_EQ(r->learning_rate, 3e-4);
  EXPECT_EQ(r->warmup_steps, 7);
  EXPECT_EQ(r->end_learning_rate, 1e-6);
  EXPECT_EQ(r->weight_decay, 0.01);
  EXPECT_EQ(r->beta1, 0.8);
  EXPECT_EQ(r->beta2, 0.95);
  EXPECT_EQ(r->eps, 1e-6);
  EXPECT_EQ(r->max_grad_norm, 1.0);
  EXPECT_EQ(r->micro_batch, 2);
  EXPECT_EQ(r->grad_accum, 4);
  EXPECT_EQ(r->epochs, 3);
  EXPECT_EQ(r->max_steps, 50);
  EXPECT_FALSE(r->remat);
  EXPECT_EQ(r->save_every, 25);
  EXPECT_EQ(r->keep_last, 0);
  EXPECT_EQ(r->log_every, 5);
  EXPECT_TRUE(ValidateRecipe(*r).ok()) << ValidateRecipe(*r).message();
}

TEST(Recipe, DottedKeysAndDataShorthand) {
  auto r = ParseRecipe("model = \"m\"\nout = \"o\"\ndata = \"rows.jsonl\"\nlora.rank = 4\noptim.eps = 1e-7\n", "x");
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r->data, "rows.jsonl");
  EXPECT_EQ(r->rank, 4);
  EXPECT_EQ(r->eps, 1e-7);
}

TEST(Recipe, IntegersAreAcceptedAsFloats) {
  auto r = ParseRecipe("[optim]\nlearning_rate = 1\nweight_decay = 0\n[lora]\nalpha = 32\n", "x");
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r->learning_rate, 1.0);
  EXPECT_EQ(r->weight_decay, 0.0);
  EXPECT_EQ(r->alpha, 32.0);
}

TEST(Recipe, UnknownKeysNameTheKeyAndSuggestOne) {
  auto r = ParseRecipe("[lora]\nrnak = 8\n", "r.toml");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.message(), "r.toml:2:1: unknown key \"lora.rnak\" (did you mean \"lora.rank\"?)");
  r = ParseRecipe("rank = 8\n", "r.toml");  // in the wrong table
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("\"rank\" (did you mean \"lora.rank\"?)"), std::string::npos) << r.message();
  r = ParseRecipe("[optimizer]\nlearning_rate = 1\n", "r.toml");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("unknown key \"optimizer\""), std::string::npos) << r.message();
  r = ParseRecipe("[lora.extra]\nx = 1\n", "r.toml");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("unknown key \"lora.extra\""), std::string::npos) << r.message();
}

TEST(Recipe, WrongTypesNameKeyExpectationAndValue) {
  auto r = ParseRecipe("[lora]\nrank = \"abc\"\n", "r.toml");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.message(), "r.toml:2:8: lora.rank: expected an integer, got \"abc\"");
  r = ParseRecipe("[lora]\nrank = 8.5\n", "r.toml");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("lora.rank: expected an integer, got 8.5"), std::string::npos) << r.message();
  r = ParseRecipe("model = 3\n", "r.toml");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("model: expected a string, got 3"), std::string::npos) << r.message();
  r = ParseRecipe("[memory]\nremat = 1\n", "r.toml");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("memory.remat: expected true or false, got 1"), std::string::npos) << r.message();
  r = ParseRecipe("[optim]\nlearning_rate = \"1e-4\"\n", "r.toml");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("optim.learning_rate: expected a number, got \"1e-4\""), std::string::npos);
  r = ParseRecipe("lora = 3\n", "r.toml");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("lora: expected a table"), std::string::npos) << r.message();
  r = ParseRecipe("seed = -1\n", "r.toml");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("seed: expected a non-negative integer, got -1"), std::string::npos);
  r = ParseRecipe("[lora]\nrank = 9999999999\n", "r.toml");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("lora.rank: 9999999999 is out of range"), std::string::npos) << r.message();
}

TEST(Recipe, SyntaxErrorsNameFileLineAndColumn) {
  auto r = ParseRecipe("model = \"m\"\n[lora]\nrank = = 3\n", "bad.toml");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.message().rfind("bad.toml:3:", 0), 0u) << r.message();
  r = ParseRecipe("[lora]\nrank = 1\nrank = 2\n", "dup.toml");  // duplicate keys
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.message().rfind("dup.toml:3:", 0), 0u) << r.message();
}

TEST(Recipe, LoadRecipeReadsAFileAndNamesItInErrors) {
  const std::string dir = TestTempDir("gk_recipe");
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/r.toml";
  std::ofstream(path) << "model = \"m\"\n[lora]\nrank = \"x\"\n";
  auto r = LoadRecipe(path);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.message().rfind(path + ":3:8: lora.rank", 0), 0u) << r.message();
  auto missing = LoadRecipe(dir + "/none.toml");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.message().find("none.toml"), std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST(Recipe, OverridesSetEveryKind) {
  auto r = ParseRecipe(kMinimal, "min.toml");
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(ApplyOverrides(*r, {"lora.rank=8", "model=/x", "optim.learning_rate=2e-3", "optim.weight_decay=0",
                                  "memory.remat=false", "seed=18446744073709551615", "data=/rows.jsonl",
                                  "data.loss=all", "lora.target_modules=.*=.*", "lora.rank=16"})
                  .ok());
  EXPECT_EQ(r->rank, 16);  // in order: the last one wins
  EXPECT_EQ(r->model, "/x");
  EXPECT_EQ(r->learning_rate, 2e-3);
  EXPECT_EQ(r->weight_decay, 0.0);
  EXPECT_FALSE(r->remat);
  EXPECT_EQ(r->seed, UINT64_MAX);
  EXPECT_EQ(r->data, "/rows.jsonl");
  EXPECT_EQ(r->loss, "all");
  EXPECT_EQ(r->target_modules, ".*=.*");  // split at the first '='
  ASSERT_TRUE(ApplyOverrides(*r, {"data.path=/p", "out="}).ok());
  EXPECT_EQ(r->data, "/p");
  EXPECT_EQ(r->out, "");
}

TEST(Recipe, BadOverridesAreErrors) {
  TrainRecipe r;
  Status s = ApplyOverrides(r, {"lora.rank=abc"});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("lora.rank: expected an integer, got \"abc\""), std::string::npos) << s.message();
  s = ApplyOverrides(r, {"lora.rnak=8"});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("unknown key \"lora.rnak\" (did you mean \"lora.rank\"?)"), std::string::npos);
  s = ApplyOverrides(r, {"learning_rate=1"});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("did you mean \"optim.learning_rate\"?"), std::string::npos) << s.message();
  s = ApplyOverrides(r, {"optim.lr=1e-3"});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("did you mean \"optim.learning_rate\"?"), std::string::npos) << s.message();
  s = ApplyOverrides(r, {"lora.rank"});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("expected key=value"), std::string::npos);
  s = ApplyOverrides(r, {"memory.remat=yes"});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("memory.remat: expected true or false"), std::string::npos);
  s = ApplyOverrides(r, {"batch.epochs=2.5"});
  ASSERT_FALSE(s.ok());
  s = ApplyOverrides(r, {"optim.eps=1e-7x"});
  ASSERT_FALSE(s.ok());
  s = ApplyOverrides(r, {"lora.rank=99999999999"});
  ASSERT_FALSE(s.ok());
  s = ApplyOverrides(r, {"seed=-3"});
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(r.rank, 64);  // nothing applied from a failed override
}

TEST(Recipe, ToJsonMirrorsTheTables) {
  auto r = ParseRecipe(kMinimal, "min.toml");
  ASSERT_TRUE(r.ok());
  const nlohmann::json j = r->ToJson();
  EXPECT_EQ(j["model"], "/m");
  EXPECT_EQ(j["out"], "/o");
  EXPECT_EQ(j["seed"], 0);
  EXPECT_EQ(j["data"]["path"], "/d.jsonl");
  EXPECT_EQ(j["data"]["max_seq_len"], 3072);
  EXPECT_EQ(j["lora"]["rank"], 64);
  EXPECT_EQ(j["lora"]["target_modules"], r->target_modules);
  EXPECT_EQ(j["optim"]["learning_rate"], 1e-4);
  EXPECT_EQ(j["batch"]["grad_accum"], 8);
  EXPECT_EQ(j["memory"]["remat"], true);
  EXPECT_EQ(j["checkpoint"]["keep_last"], 3);
  EXPECT_EQ(j["log"]["log_every"], 1);
  EXPECT_EQ(j["train"]["precision"], "bf16");
  EXPECT_EQ(j.size(), 11u);  // model, out, seed + 8 tables
  EXPECT_EQ(j["optim"].size(), 8u);
  // Round trip: every leaf given back as --set reproduces the recipe.
  TrainRecipe back;
  std::vector<std::string> sets;
  for (const auto& [k, v] : j.items()) {
    if (!v.is_object()) {
      sets.push_back(k + "=" + (v.is_string() ? v.get<std::string>() : v.dump()));
      continue;
    }
    for (const auto& [k2, v2] : v.items()) {
      sets.push_back(k + "." + k2 + "=" + (v2.is_string() ? v2.get<std::string>() : v2.dump()));
    }
  }
  ASSERT_TRUE(ApplyOverrides(back, sets).ok());
  EXPECT_EQ(back.ToJson(), j);
}

TEST(Recipe, ValidateChecksRanges) {
  auto base = ParseRecipe(kMinimal, "min.toml");
  ASSERT_TRUE(base.ok());
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"lora.rank=0", "lora.rank must be >= 1"},
      {"lora.alpha=0", "lora.alpha must be > 0"},
      {"lora.dropout=1", "lora.dropout must be in [0, 1)"},
      {"lora.dropout=-0.1", "lora.dropout"},
      {"optim.learning_rate=0", "optim.learning_rate must be > 0"},
      {"optim.learning_rate=nan", "optim.learning_rate must be > 0"},
      {"optim.warmup_steps=-1", "optim.warmup_steps must be >= 0"},
      {"optim.beta2=1", "optim.beta2"},
      {"optim.max_grad_norm=-1", "optim.max_grad_norm"},
      {"batch.micro_batch=0", "batch.micro_batch must be >= 1"},
      {"batch.grad_accum=0", "batch.grad_accum must be >= 1"},
      {"batch.epochs=0", "batch.epochs must be >= 1"},
      {"batch.max_steps=0", "batch.max_steps"},
      {"data.max_seq_len=1", "data.max_seq_len must be >= 2"},
      {"data.max_rows=0", "data.max_rows"},
      {"checkpoint.keep_last=-1", "checkpoint.keep_last must be >= 0"},
      {"checkpoint.save_every=-1", "checkpoint.save_every must be >= 0"},
      {"data.loss=prompt", "data.loss must be \"assistant\" or \"all\", got \"prompt\""},
      {"data.batching=bucketed", "data.batching must be \"padded\" or \"packed\""},
      {"train.precision=fp16", "train.precision must be \"bf16\" or \"f32\", got \"fp16\""},
      {"model=", "model:"},
      {"data=", "data.path:"},
      {"out=", "out:"},
      {"lora.target_modules=(q_proj", "lora.target_modules: not a valid ECMAScript regex"},
      {"log.log_every=0", "log.log_every"},
  };
  for (const auto& [set, want] : bad) {
    TrainRecipe r = *base;
    ASSERT_TRUE(ApplyOverrides(r, {set}).ok()) << set;
    const Status s = ValidateRecipe(r);
    ASSERT_FALSE(s.ok()) << set;
    EXPECT_NE(s.message().find(want), std::string::npos) << set << ": " << s.message();
  }
  // Several problems are reported together.
  TrainRecipe r = *base;
  ASSERT_TRUE(ApplyOverrides(r, {"lora.rank=0", "batch.epochs=0"}).ok());
  const Status s = ValidateRecipe(r);
  EXPECT_NE(s.message().find("lora.rank"), std::string::npos);
  EXPECT_NE(s.message().find("batch.epochs"), std::string::npos);
}

// PEFT's default-style pattern relies on a negative lookahead, which ECMAScript std::regex has.
TEST(Recipe, DefaultTargetModulesRegexMatchesTheTextDecoderOnly) {
  const std::regex re(TrainRecipe().target_modules, std::regex::ECMAScript);
  EXPECT_TRUE(std::regex_match("model.language_model.layers.0.self_attn.q_proj", re));
  EXPECT_TRUE(std::regex_match("model.language_model.layers.59.mlp.down_proj", re));
  EXPECT_FALSE(std::regex_match("model.vision_tower.encoder.layers.0.self_attn.q_proj", re));
  EXPECT_FALSE(std::regex_match("model.language_model.layers.0.self_attn.q_norm", re));
  EXPECT_FALSE(std::regex_match("model.language_model.embed_tokens", re));
}

TEST(Recipe, ShippedRecipesParseAndValidate) {
  auto ref = LoadRecipe(SourcePath("recipes/gemma4-31b-verilog-lora.toml"));
  ASSERT_TRUE(ref.ok()) << ref.message();
  EXPECT_TRUE(ValidateRecipe(*ref).ok()) << ValidateRecipe(*ref).message();
  // FACTS.md §1 items 1-3.
  EXPECT_EQ(ref->rank, 64);
  EXPECT_EQ(ref->alpha, 64.0);
  EXPECT_EQ(ref->dropout, 0.05);
  EXPECT_EQ(ref->learning_rate, 1e-4);
  EXPECT_EQ(ref->warmup_steps, 100);
  EXPECT_EQ(ref->end_learning_rate, 0.0);
  EXPECT_EQ(ref->weight_decay, 0.001);
  EXPECT_EQ(ref->micro_batch, 1);
  EXPECT_EQ(ref->grad_accum, 8);
  EXPECT_EQ(ref->max_seq_len, 3072);
  EXPECT_EQ(ref->max_rows, 10000);
  EXPECT_EQ(ref->epochs, 1);
  EXPECT_EQ(ref->loss, "assistant");
  EXPECT_EQ(ref->save_every, 100);
  EXPECT_EQ(ref->keep_last, 3);
  EXPECT_TRUE(ref->remat);
  EXPECT_EQ(ref->max_grad_norm, 0.0);
  EXPECT_EQ(ref->target_modules, TrainRecipe().target_modules);

  auto tiny = LoadRecipe(SourcePath("recipes/tiny-verilog-lora.toml"));
  ASSERT_TRUE(tiny.ok()) << tiny.message();
  EXPECT_TRUE(ValidateRecipe(*tiny).ok()) << ValidateRecipe(*tiny).message();
  EXPECT_EQ(tiny->model, "build/demo/tiny");
  EXPECT_EQ(tiny->data, "build/demo/verilog-train/sft.jsonl");
  EXPECT_EQ(tiny->out, "build/demo/train-run");
  EXPECT_EQ(tiny->rank, 8);
  EXPECT_EQ(tiny->alpha, 16.0);
  EXPECT_EQ(tiny->dropout, 0.0);
  EXPECT_EQ(tiny->learning_rate, 5e-3);
  EXPECT_EQ(tiny->warmup_steps, 5);
  EXPECT_EQ(tiny->max_steps, 30);
  EXPECT_EQ(tiny->micro_batch, 1);
  EXPECT_EQ(tiny->grad_accum, 1);
  EXPECT_EQ(tiny->max_seq_len, 512);
  EXPECT_EQ(tiny->save_every, 10);
  EXPECT_EQ(tiny->keep_last, 2);

  // E2B: the reference recipe; its regex also leaves the audio tower alone.
  auto e2b = LoadRecipe(SourcePath("recipes/gemma4-e2b-verilog-lora.toml"));
  ASSERT_TRUE(e2b.ok()) << e2b.message();
  EXPECT_TRUE(ValidateRecipe(*e2b).ok()) << ValidateRecipe(*e2b).message();
  EXPECT_EQ(e2b->rank, ref->rank);
  EXPECT_EQ(e2b->learning_rate, ref->learning_rate);
  EXPECT_EQ(e2b->grad_accum, ref->grad_accum);
  const std::regex re(e2b->target_modules);
  EXPECT_TRUE(std::regex_match("model.language_model.layers.20.mlp.down_proj", re));
  EXPECT_FALSE(std::regex_match("model.audio_tower.layers.0.self_attn.q_proj", re));
  EXPECT_FALSE(std::regex_match("model.vision_tower.encoder.layers.0.self_attn.q_proj", re));
}

// std::regex compiles recursively: a target_modules thousands of groups deep overflowed the
// stack in ValidateRecipe. Over 1024 bytes it is refused before compiling.
TEST(Recipe, HugeRegexAndInvalidUtf8AreErrors) {
  auto r = ParseRecipe(kMinimal, "min.toml");
  ASSERT_TRUE(r.ok());
  r->target_modules = std::string(100000, '(') + "a" + std::string(100000, ')');
  Status v = ValidateRecipe(*r);
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.message().find("lora.target_modules is 200001 bytes, over the limit of 1024"), std::string::npos)
      << v.message();
  // A --set value that is not UTF-8 made the error message's JSON quoting throw.
  TrainRecipe t;
  Status s = ApplyOverrides(t, {"lora.rank=\xff"});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("lora.rank: expected an integer"), std::string::npos) << s.message();
  auto bad = ParseRecipe("[lora]\nrank = 1e999999\n", "huge.toml");
  EXPECT_FALSE(bad.ok());
  EXPECT_EQ(bad.message().find('\n'), std::string::npos) << bad.message();
}

}  // namespace
}  // namespace gk::train
