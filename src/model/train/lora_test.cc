#include "model/train/lora.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "formats/safetensors.h"
#include "model/presets.h"
#include "util/test_temp_dir.h"

namespace gk {
namespace {

// PEFT adapters come from outside (downloads, other trainers): every malformed one must be an
// error naming the file, never an exception, an absurd allocation or a stack overflow.
class LoraLoadPeftTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = TestTempDir("gk_lora_load_peft");
    std::filesystem::create_directories(dir_);
    auto c = PresetConfig("tiny");
    ASSERT_TRUE(c.ok()) << c.message();
    config_ = *c;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  void WriteConfig(const std::string& text) { std::ofstream(dir_ + "/adapter_config.json") << text; }
  void WriteTensors(const std::vector<std::pair<std::string, std::vector<int64_t>>>& tensors) {
    std::vector<TensorSpec> specs;
    for (const auto& [name, shape] : tensors) {
      specs.push_back({name, DType::kF32, shape, [](uint8_t* dst, size_t n) {
                         std::memset(dst, 0, n);
                         return Status::Ok();
                       }});
    }
    ASSERT_TRUE(WriteSafetensors(dir_ + "/adapter_model.safetensors", specs).ok());
  }
  std::string LoadError() {
    auto a = LoraAdapter::LoadPeft(dir_, config_, "model.");
    EXPECT_FALSE(a.ok());
    EXPECT_EQ(a.message().find('\n'), std::string::npos) << a.message();
    return a.ok() ? "" : a.message();
  }

  std::string dir_;
  ModelConfig config_;
};

TEST_F(LoraLoadPeftTest, ValidAdapterLoads) {
  const int64_t d = config_.hidden_size, q = int64_t(config_.num_heads) * config_.HeadDim(0);
  WriteConfig(R"({"peft_type": "LORA", "r": 2, "lora_alpha": 4, "target_modules": ["q_proj"]})");
  WriteTensors({{"base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight", {2, d}},
                {"base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight", {q, 2}}});
  auto a = LoraAdapter::LoadPeft(dir_, config_, "model.");
  ASSERT_TRUE(a.ok()) << a.message();
  EXPECT_EQ(a->ParameterCount(), 2 * d + q * 2);
}

TEST_F(LoraLoadPeftTest, MalformedConfigsAreErrors) {
  WriteTensors({});
  WriteConfig(R"({"peft_type": "LORA", "r": 1e999, "lora_alpha": 4})");
  EXPECT_NE(LoadError().find("adapter_config.json: not valid JSON: number overflow"), std::string::npos);
  WriteConfig(R"({"peft_type": 5, "r": 2, "lora_alpha": 4})");  // value() on a number threw
  EXPECT_NE(LoadError().find("peft_type 5 is not LORA"), std::string::npos);
  WriteConfig(R"({"r": 2000000000, "lora_alpha": 4})");  // would allocate ~r x (in + out) floats per module
  EXPECT_NE(LoadError().find("\"r\" is 2000000000; it must be in [1, "), std::string::npos);
  WriteConfig(R"({"r": 0, "lora_alpha": 4})");
  EXPECT_NE(LoadError().find("\"r\" is 0"), std::string::npos);
  WriteConfig(R"({"r": 2, "lora_alpha": 4, "use_rslora": "yes", "use_dora": "no"})");
  EXPECT_NE(LoadError().find("no LoRA factors"), std::string::npos);
}

// std::regex matches recursively (a frame per character): a tensor name of 100k characters
// overflowed the stack in the KV-shared-layer hint.
TEST_F(LoraLoadPeftTest, HugeTensorNameIsAnError) {
  WriteConfig(R"({"r": 2, "lora_alpha": 4})");
  WriteTensors({{std::string(100000, 'x') + ".layers.1.self_attn.k_proj.lora_A.weight", {2, 2}}});
  EXPECT_NE(LoadError().find("is not a LoRA factor of a projection of this model"), std::string::npos);
}

TEST(LoraCreateTest, HugeTargetRegexIsRefused) {
  auto c = PresetConfig("tiny");
  ASSERT_TRUE(c.ok());
  LoraOptions o;
  o.target_regex = std::string(100000, '(') + "a" + std::string(100000, ')');
  auto a = LoraAdapter::Create(*c, "model.", o);
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.message().find("over the limit of 1024"), std::string::npos) << a.message();
}

}  // namespace
}  // namespace gk
