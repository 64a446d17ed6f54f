#include "model/config.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

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

// What transformers >= 5.15 writes for the same model: the full layer's shape as
// per_layer_config, no global_head_dim / num_global_key_value_heads, `dtype`.
json Gemma4PerLayerStyle() {
  json j = Gemma4Multimodal();
  json& t = j["text_config"];
  t.erase("global_head_dim");
  t.erase("num_global_key_value_heads");
  t["per_layer_config"] = {{"5", {{"head_dim", 512}, {"num_key_value_heads", 4}}}};
  t["dtype"] = "bfloat16";
  j["dtype"] = "bfloat16";
  return j;
}

TEST(ModelConfig, PerLayerConfigParsesLikeTheReleasedStyle) {
  auto released = ParseModelConfig(Gemma4Multimodal());
  auto per_layer = ParseModelConfig(Gemma4PerLayerStyle());
  ASSERT_TRUE(released.ok()) << released.message();
  ASSERT_TRUE(per_layer.ok()) << per_layer.message();
  EXPECT_EQ(per_layer->global_head_dim, 512);
  EXPECT_EQ(per_layer->num_global_kv_heads, 4);
  EXPECT_TRUE(per_layer->UniformPerLayerType());
  for (int l = 0; l < 6; ++l) {
    EXPECT_EQ(per_layer->HeadDim(l), released->HeadDim(l)) << l;
    EXPECT_EQ(per_layer->KvHeads(l), released->KvHeads(l)) << l;
  }
  EXPECT_EQ(per_layer->ParameterCount(), released->ParameterCount());
  // Written back in the released style, which transformers reads.
  const json out = ModelConfigToJson(*per_layer);
  EXPECT_EQ(out["global_head_dim"], 512);
  EXPECT_EQ(out["num_global_key_value_heads"], 4);
  EXPECT_FALSE(out.contains("per_layer_config"));
}

// With per_layer_config, a layer without an entry has head_dim and num_key_value_heads, also a
// full one (transformers ignores global_head_dim then).
TEST(ModelConfig, PerLayerConfigAppliesEachEntryToItsLayer) {
  json j = Gemma4PerLayerStyle();
  j["text_config"]["global_head_dim"] = 1024;  // ignored, as transformers does
  j["text_config"]["per_layer_config"] = {{"1", {{"num_key_value_heads", 8}}},
                                          {"2", {{"head_dim", 128}, {"sliding_window", 1024}}},
                                          {"5", {{"head_dim", 512}, {"num_key_value_heads", 2}}}};
  auto c = ParseModelConfig(j);
  ASSERT_TRUE(c.ok()) << c.message();
  const int head[6] = {256, 256, 128, 256, 256, 512}, kv[6] = {16, 8, 16, 16, 16, 2};
  for (int l = 0; l < 6; ++l) {
    EXPECT_EQ(c->HeadDim(l), head[l]) << l;
    EXPECT_EQ(c->KvHeads(l), kv[l]) << l;
  }
  EXPECT_FALSE(c->UniformPerLayerType());
  EXPECT_EQ(c->MaxHeadDim(), 512);
  EXPECT_EQ(c->MaxKvHeads(), 16);
  // Round trip: the overrides come back as per_layer_config.
  auto back = ParseModelConfig(ModelConfigToJson(*c));
  ASSERT_TRUE(back.ok()) << back.message();
  for (int l = 0; l < 6; ++l) {
    EXPECT_EQ(back->HeadDim(l), head[l]) << l;
    EXPECT_EQ(back->KvHeads(l), kv[l]) << l;
  }
}

TEST(ModelConfig, PerLayerConfigErrorsNameTheLayerAndKey) {
  auto error = [](const json& per_layer) {
    json j = Gemma4PerLayerStyle();
    j["text_config"]["per_layer_config"] = per_layer;
    auto c = ParseModelConfig(j);
    EXPECT_FALSE(c.ok());
    return c.ok() ? std::string() : c.message();
  };
  std::string m = error({{"5", {{"intermediate_size", 4096}}}});
  EXPECT_NE(m.find("layer 5"), std::string::npos) << m;
  EXPECT_NE(m.find("'intermediate_size'"), std::string::npos) << m;
  m = error({{"6", {{"head_dim", 512}}}});
  EXPECT_NE(m.find("'6' is not a layer index"), std::string::npos) << m;
  m = error({{"x", {{"head_dim", 512}}}});
  EXPECT_NE(m.find("'x'"), std::string::npos) << m;
  m = error({{"5", {{"head_dim", -4}}}});
  EXPECT_NE(m.find("positive integer"), std::string::npos) << m;
  m = error({{"5", {{"head_dim", 511}}}});
  EXPECT_NE(m.find("layer 5"), std::string::npos) << m;
  m = error({{"5", {{"num_key_value_heads", 5}}}});  // 32 query heads
  EXPECT_NE(m.find("layer 5"), std::string::npos) << m;
  m = error(json::array({1, 2}));
  EXPECT_NE(m.find("per_layer_config must be an object"), std::string::npos) << m;
  // The same value as the global one overrides nothing and is accepted.
  json j = Gemma4PerLayerStyle();
  j["text_config"]["per_layer_config"]["5"]["sliding_window"] = 1024;
  EXPECT_TRUE(ParseModelConfig(j).ok());
}

// Fields transformers 5.x writes: `dtype` (not torch_dtype), null for unused MoE fields,
// rope_parameters per layer type (also for Gemma 3), a text-only Gemma4ForCausalLM at the top.
TEST(ModelConfig, AcceptsTransformers5Fields) {
  json j = Gemma4PerLayerStyle();
  j["text_config"].erase("dtype");
  j["dtype"] = "float32";
  j["text_config"]["num_experts"] = nullptr;
  j["text_config"]["top_k_experts"] = nullptr;
  j["text_config"]["moe_intermediate_size"] = nullptr;
  j["text_config"]["enable_moe_block"] = false;
  j["text_config"]["use_bidirectional_attention"] = "vision";
  j["text_config"]["final_logit_softcapping"] = nullptr;
  auto c = ParseModelConfig(j);
  ASSERT_TRUE(c.ok()) << c.message();
  EXPECT_EQ(c->torch_dtype, "float32");
  EXPECT_FLOAT_EQ(c->final_logit_softcap, 0.f);
  json text = j["text_config"];
  text["architectures"] = {"Gemma4ForCausalLM"};
  EXPECT_TRUE(ParseModelConfig(text).ok());

  json g3 = json::parse(R"({
    "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text", "vocab_size": 262144,
    "hidden_size": 640, "intermediate_size": 2048, "num_hidden_layers": 6, "num_attention_heads": 4,
    "num_key_value_heads": 1, "head_dim": 256, "sliding_window": 512, "query_pre_attn_scalar": 256,
    "layer_types": ["sliding_attention","sliding_attention","sliding_attention","sliding_attention","sliding_attention","full_attention"],
    "rope_parameters": {"full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0},
                        "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}},
    "final_logit_softcapping": null, "attn_logit_softcapping": null, "dtype": "bfloat16"
  })");
  auto c3 = ParseModelConfig(g3);
  ASSERT_TRUE(c3.ok()) << c3.message();
  EXPECT_FLOAT_EQ(c3->rope_full.scaling_factor, 8.f);
  EXPECT_FLOAT_EQ(c3->rope_full.theta, 1e6f);
  EXPECT_FLOAT_EQ(c3->rope_sliding.theta, 1e4f);
  g3["attn_logit_softcapping"] = 50.0;
  EXPECT_FALSE(ParseModelConfig(g3).ok());
}

TEST(ModelConfig, RefusesWhatChangesTheFunction) {
  json j = Gemma4PerLayerStyle();
  j["text_config"]["use_bidirectional_attention"] = "all";
  auto c = ParseModelConfig(j);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.message().find("use_bidirectional_attention"), std::string::npos) << c.message();
  j = Gemma4PerLayerStyle();
  j["text_config"]["attention_bias"] = true;
  EXPECT_FALSE(ParseModelConfig(j).ok());
}

// A crafted config must be an error, never undefined behaviour or an exception: a float far
// outside int for an integer field (the cast was UB), a layer count that would allocate
// gigabytes, a string where value() expects a number.
TEST(ModelConfig, OutOfRangeNumbersAreErrors) {
  json j = Gemma4Multimodal();
  j["text_config"]["hidden_size"] = 1e300;
  auto c = ParseModelConfig(j);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.message().find("field 'hidden_size' has the wrong type or is out of range (1e+300)"), std::string::npos)
      << c.message();
  j["text_config"]["hidden_size"] = 3.5;
  EXPECT_FALSE(ParseModelConfig(j).ok());
  j["text_config"]["hidden_size"] = 5376.0;  // an integral float is still accepted
  EXPECT_TRUE(ParseModelConfig(j).ok());
  j["text_config"]["num_hidden_layers"] = 2000000000;
  j["text_config"].erase("layer_types");
  c = ParseModelConfig(j);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.message().find("num_hidden_layers 2000000000 is over the limit of 4096"), std::string::npos)
      << c.message();
  j = Gemma4Multimodal();
  j["text_config"]["intermediate_size"] = int64_t(1) << 40;
  EXPECT_FALSE(ParseModelConfig(j).ok());
}

TEST(ModelConfig, UnparsableConfigFileIsOneLine) {
  const std::string dir = ::testing::TempDir() + "/gk_config_bad_number";
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/config.json") << R"({"text_config": {"vocab_size": 1e999}})";
  auto c = LoadModelConfig(dir);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.message().find("config.json: not valid JSON: number overflow parsing '1e999'"), std::string::npos)
      << c.message();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace gk
