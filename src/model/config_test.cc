#include "model/config.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "model/presets.h"

namespace gk {
namespace {

using json = nlohmann::json;

json Gemma4Multimodal() {
  return json::parse(R"({
    "architectures": ["Gemma4ForConditionalGeneration"], "model_type": "gemma4",
    "eos_token_id": [1, 106],
    "text_config": {
      "model_type": "gemma4_text", "vocab_size": 262144, "hidden_size": 5376, "intermediate_size": 21504,
      "num_hidden_layers": 6, "num_attention_heads": 32, "num_key_value_heads": 16, "head_dim": 256,
      "global_head_dim": 512, "num_global_key_value_heads": 4, "attention_k_eq_v": true,
      "sliding_window": 1024, "final_logit_softcapping": 30.0, "rms_norm_eps": 1e-6,
      "hidden_activation": "gelu_pytorch_tanh", "eos_token_id": 1,
      "layer_types": ["sliding_attention","sliding_attention","sliding_attention","sliding_attention","sliding_attention","full_attention"],
      "rope_parameters": {"full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1000000.0},
                          "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}
    },
    "vision_config": {"model_type": "gemma4_vision"}
  })");
}

TEST(ModelConfig, ReadsGemma4TextConfig) {
  auto c = ParseModelConfig(Gemma4Multimodal());
  ASSERT_TRUE(c.ok()) << c.message();
  EXPECT_EQ(c->arch, Arch::kGemma4);
  EXPECT_EQ(c->hidden_size, 5376);
  EXPECT_TRUE(c->IsFull(5));
  EXPECT_FALSE(c->IsFull(0));
  EXPECT_EQ(c->HeadDim(5), 512);
  EXPECT_EQ(c->KvHeads(5), 4);
  EXPECT_EQ(c->KvHeads(0), 16);
  EXPECT_TRUE(c->KEqV(5));
  EXPECT_FLOAT_EQ(c->rope_full.partial_rotary_factor, 0.25f);
  EXPECT_FLOAT_EQ(c->rope_full.theta, 1e6f);
  EXPECT_FLOAT_EQ(c->rope_sliding.theta, 1e4f);
  EXPECT_EQ(c->eos_token_ids, (std::vector<int>{1, 106}));
}

TEST(ModelConfig, MissingFieldIsNamed) {
  json j = Gemma4Multimodal();
  j["text_config"].erase("hidden_size");
  auto c = ParseModelConfig(j);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.message().find("hidden_size"), std::string::npos) << c.message();
}

TEST(ModelConfig, UnknownArchitectureIsRejected) {
  json j = Gemma4Multimodal();
  j["model_type"] = "llama";
  j["text_config"]["model_type"] = "llama";
  auto c = ParseModelConfig(j);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.message().find("unknown architecture"), std::string::npos) << c.message();
}

TEST(ModelConfig, WrongTypeIsRejected) {
  json j = Gemma4Multimodal();
  j["text_config"]["num_hidden_layers"] = "six";
  EXPECT_FALSE(ParseModelConfig(j).ok());
}

TEST(ModelConfig, PresetsRoundTripThroughJson) {
  for (const auto& name : PresetNames()) {
    auto c = PresetConfig(name);
    ASSERT_TRUE(c.ok()) << name << ": " << c.message();
    auto back = ParseModelConfig(ModelConfigToJson(*c));
    ASSERT_TRUE(back.ok()) << name << ": " << back.message();
    EXPECT_EQ(back->ParameterCount(), c->ParameterCount()) << name;
    EXPECT_EQ(back->layer_types, c->layer_types) << name;
    EXPECT_EQ(back->KvSourceLayer(c->num_layers - 1), c->KvSourceLayer(c->num_layers - 1)) << name;
  }
}

// The spec's hand computation: Gemma 4 31B has 30.70 B text parameters; its full layers are
// 5, 11, ..., 59; E2B shares KV of sliding layers with layer 13 and of full layers with 14.
TEST(ModelConfig, RealShapesMatchTheSpec) {
  auto c31 = PresetConfig("31b");
  ASSERT_TRUE(c31.ok());
  EXPECT_NEAR(double(c31->ParameterCount()) / 1e9, 30.70, 0.01);
  for (int l = 0; l < 60; ++l) EXPECT_EQ(c31->IsFull(l), l % 6 == 5) << l;
  auto e2b = PresetConfig("e2b");
  ASSERT_TRUE(e2b.ok());
  EXPECT_EQ(e2b->KvSourceLayer(15), 13);  // sliding
  EXPECT_EQ(e2b->KvSourceLayer(19), 14);  // full
  EXPECT_EQ(e2b->KvSourceLayer(14), 14);
  EXPECT_EQ(e2b->MlpWidth(20), 12288);
  EXPECT_EQ(e2b->MlpWidth(0), 6144);
}

}  // namespace
}  // namespace gk
