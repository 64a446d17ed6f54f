#include "tools/bridge/gguf_export.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "formats/gguf.h"
#include "formats/safetensors.h"
#include "formats/sentencepiece_model_test_util.h"
#include "model/quantize.h"
#include "model/toy_models_test_util.h"
#include "tensor/dtype.h"
#include "util/atomic_file.h"

namespace gk::bridge {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::string TokenizerDir() { return std::string(GK_SOURCE_DIR) + "/build/tokenizer/gemma3"; }
bool HaveTokenizer() { return fs::exists(TokenizerDir() + "/tokenizer.json"); }
#define REQUIRE_TOKENIZER()                                                                      \
  if (!HaveTokenizer()) GTEST_SKIP() << TokenizerDir() << "/tokenizer.json missing; run scripts/fetch_tokenizer.sh"

// A toy checkpoint with random weights and the real Gemma tokenizer files beside it.
std::string MakeModel(const ModelConfig& c, const std::string& name, DType dtype) {
  const std::string dir = WriteToyModel(c, name, dtype, 11);
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"}) {
    fs::copy_file(TokenizerDir() + "/" + f, dir + "/" + f, fs::copy_options::overwrite_existing);
  }
  return dir;
}

ModelConfig Gemma3Toy() {
  ModelConfig c = ToyConfig("gemma3-270m", 8);
  c.query_pre_attn_scalar = float(c.head_dim);  // as in the real models (llama.cpp assumes it)
  return c;
}

// The names llama.cpp gives each checkpoint tensor (gguf-py constants.py TENSOR_NAMES,
// tensor_mapping.py), written out here independently of the exporter's table.
std::vector<std::pair<std::string, std::string>> ExpectedNames(const ModelConfig& c) {
  std::vector<std::pair<std::string, std::string>> e = {{"embed_tokens.weight", "token_embd.weight"},
                                                        {"norm.weight", "output_norm.weight"}};
  if (c.hidden_size_per_layer_input > 0) {
    e.push_back({"embed_tokens_per_layer.weight", "per_layer_token_embd.weight"});
    e.push_back({"per_layer_model_projection.weight", "per_layer_model_proj.weight"});
    e.push_back({"per_layer_projection_norm.weight", "per_layer_proj_norm.weight"});
  }
  for (int l = 0; l < c.num_layers; ++l) {
    const std::string h = StrCat("layers.", l, "."), g = StrCat("blk.", l, ".");
    auto add = [&](const char* a, const char* b) { e.push_back({h + a, g + b}); };
    add("input_layernorm.weight", "attn_norm.weight");
    add("post_attention_layernorm.weight", "post_attention_norm.weight");
    add("pre_feedforward_layernorm.weight", "ffn_norm.weight");
    add("post_feedforward_layernorm.weight", "post_ffw_norm.weight");
    add("self_attn.q_proj.weight", "attn_q.weight");
    add("self_attn.q_norm.weight", "attn_q_norm.weight");
    if (!c.IsKvShared(l)) {
      add("self_attn.k_proj.weight", "attn_k.weight");
      add("self_attn.k_norm.weight", "attn_k_norm.weight");
      if (!c.KEqV(l)) add("self_attn.v_proj.weight", "attn_v.weight");
    }
    add("self_attn.o_proj.weight", "attn_output.weight");
    add("mlp.gate_proj.weight", "ffn_gate.weight");
    add("mlp.up_proj.weight", "ffn_up.weight");
    add("mlp.down_proj.weight", "ffn_down.weight");
    if (c.arch == Arch::kGemma4) add("layer_scalar", "layer_output_scale.weight");
    if (c.hidden_size_per_layer_input > 0) {
      add("per_layer_input_gate.weight", "inp_gate.weight");
      add("per_layer_projection.weight", "proj.weight");
      add("post_per_layer_input_norm.weight", "post_norm.weight");
    }
    if (c.enable_moe_block) {
      add("router.proj.weight", "ffn_gate_inp.weight");
      add("router.scale", "ffn_gate_inp.scale");
      add("router.per_expert_scale", "ffn_down_exps.scale");
      add("experts.gate_up_proj", "ffn_gate_up_exps.weight");
      add("experts.down_proj", "ffn_down_exps.weight");
      add("pre_feedforward_layernorm_2.weight", "pre_ffw_norm_2.weight");
      add("post_feedforward_layernorm_1.weight", "post_ffw_norm_1.weight");
      add("post_feedforward_layernorm_2.weight", "post_ffw_norm_2.weight");
    }
  }
  return e;
}

std::vector<float> SourceFloats(const SafetensorsSet& set, const TensorInfo& t) {
  std::vector<uint8_t> raw(t.nbytes);
  EXPECT_TRUE(set.ReadInto(t, raw.data()).ok());
  std::vector<float> f(size_t(t.numel()));
  for (size_t i = 0; i < f.size(); ++i) {
    uint16_t h;
    if (t.dtype == DType::kF32) {
      std::memcpy(&f[i], raw.data() + 4 * i, 4);
    } else {
      std::memcpy(&h, raw.data() + 2 * i, 2);
      f[i] = t.dtype == DType::kBF16 ? Bf16ToF32(h) : F16ToF32(h);
    }
  }
  return f;
}

// Names, shapes (reversed), element types and values of every exported tensor against the
// checkpoint; returns the number of tensors checked.
size_t CheckTensors(const GgufFile& g, const std::string& dir, const ModelConfig& c, GgufType type) {
  auto set = SafetensorsSet::Open(dir);
  EXPECT_TRUE(set.ok()) << set.message();
  const auto names = ExpectedNames(c);
  bool any_full = false;
  for (int l = 0; l < c.num_layers; ++l) any_full = any_full || c.IsFull(l);
  const size_t extra = (c.arch == Arch::kGemma4 && any_full) ? 1 : 0;  // rope_freqs
  EXPECT_EQ(g.tensors().size(), names.size() + extra);
  for (const auto& [hf, name] : names) {
    const TensorInfo* src = set->Find("model." + hf);
    const GgufTensorInfo* t = g.FindTensor(name);
    if (!src || !t) {
      ADD_FAILURE() << hf << " -> " << name << (src ? " missing in the GGUF" : " missing in the checkpoint");
      continue;
    }
    EXPECT_EQ(t->ne, std::vector<int64_t>(src->shape.rbegin(), src->shape.rend())) << name;
    GgmlType want = GgmlType::kF32;
    const bool matrix = t->ne.size() >= 2 && name.find(".ffn_gate_inp.weight") == std::string::npos;
    if (matrix) {
      switch (type) {
        case GgufType::kF32: want = GgmlType::kF32; break;
        case GgufType::kBF16: want = GgmlType::kBF16; break;
        case GgufType::kF16: want = GgmlType::kF16; break;
        case GgufType::kQ8_0: want = t->ne[0] % 32 == 0 ? GgmlType::kQ8_0 : GgmlType::kF16; break;
        case GgufType::kAuto: ADD_FAILURE(); break;
      }
    }
    EXPECT_EQ(t->type, uint32_t(want)) << name;
    std::vector<uint8_t> raw(t->nbytes);
    EXPECT_TRUE(g.ReadTensor(*t, raw.data()).ok());
    std::vector<float> got(size_t(t->numel()));
    EXPECT_TRUE(DequantizeGgml(t->type, raw.data(), t->numel(), got.data()).ok()) << name;
    std::vector<float> x = SourceFloats(*set, *src);
    const bool gemma3_norm = c.arch == Arch::kGemma3 && hf.size() >= 11 && hf.substr(hf.size() - 11) == "norm.weight";
    if (gemma3_norm) {
      for (float& v : x) v += 1.f;  // Gemma3RMSNorm: x · (1 + w)
    }
    size_t bad = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      float expect = x[i], tol = 0.f;
      if (want == GgmlType::kBF16) expect = Bf16ToF32(F32ToBf16(x[i]));
      if (want == GgmlType::kF16) expect = F16ToF32(F32ToF16(x[i]));
      if (want == GgmlType::kQ8_0) {
        const size_t b = i / 32 * 32;
        float amax = 0.f;
        for (size_t k = b; k < b + 32; ++k) amax = std::max(amax, std::fabs(x[k]));
        tol = amax / 127.f * (0.5f + 127.f / 1024.f);
      }
      if (!(std::fabs(got[i] - expect) <= tol)) ++bad;
    }
    EXPECT_EQ(bad, 0u) << name << ": " << bad << " of " << x.size() << " values off";
  }
  if (extra) {
    const GgufTensorInfo* r = g.FindTensor("rope_freqs.weight");
    if (r) {
      EXPECT_EQ(r->type, uint32_t(GgmlType::kF32));
      EXPECT_EQ(r->ne, std::vector<int64_t>{c.global_head_dim / 2});
      std::vector<float> f(size_t(r->numel()));
      EXPECT_TRUE(g.ReadTensor(*r, f.data()).ok());
      const int rotated = int(c.global_head_dim * c.rope_full.partial_rotary_factor / 2);
      for (int i = 0; i < int(f.size()); ++i) EXPECT_EQ(f[size_t(i)], i < rotated ? 1.f : 1e30f) << i;
    } else {
      ADD_FAILURE() << "no rope_freqs.weight";
    }
  }
  return names.size() + extra;
}

int64_t Int(const GgufFile& g, const std::string& key) {
  const GgufValue* v = g.Find(key);
  int64_t x = -1;
  EXPECT_TRUE(v && v->GetInt(&x)) << key;
  return x;
}
uint32_t U32(const GgufFile& g, const std::string& key) {
  const GgufValue* v = g.Find(key);
  EXPECT_TRUE(v && v->type() == GgufValueType::kU32) << key << " is not a u32";
  return uint32_t(Int(g, key));
}
float F32(const GgufFile& g, const std::string& key) {
  const GgufValue* v = g.Find(key);
  double d = -1;
  EXPECT_TRUE(v && v->type() == GgufValueType::kF32 && v->GetFloat(&d)) << key << " is not an f32";
  return float(d);
}
std::string Str(const GgufFile& g, const std::string& key) {
  const GgufValue* v = g.Find(key);
  EXPECT_TRUE(v && v->GetString()) << key << " is not a string";
  return v && v->GetString() ? *v->GetString() : "";
}
bool Bool(const GgufFile& g, const std::string& key) {
  const GgufValue* v = g.Find(key);
  bool b = false;
  EXPECT_TRUE(v && v->GetBool(&b)) << key << " is not a bool";
  return b;
}
std::vector<int64_t> Ints(const GgufFile& g, const std::string& key, GgufValueType elem) {
  const GgufValue* v = g.Find(key);
  std::vector<int64_t> out;
  if (!v || !v->is_array() || v->elem_type() != elem) {
    ADD_FAILURE() << key << " is not an array of " << GgufValueTypeName(elem);
    return out;
  }
  for (uint64_t i = 0; i < v->size(); ++i) out.push_back(v->IntAt(i));
  return out;
}

GgufFile Export(const std::string& dir, GgufType type, const std::string& file = "m.gguf") {
  const std::string path = dir + "/" + file;
  Status s = ExportGguf(dir, path, type);
  EXPECT_TRUE(s.ok()) << s.message();
  auto g = GgufFile::Open(path);
  EXPECT_TRUE(g.ok()) << g.message();
  EXPECT_TRUE(g->Contiguous());
  return std::move(*g);
}

json ReadJsonFile(const std::string& path) { return json::parse(*ReadFile(path)); }

TEST(GgufExportTest, Gemma4EveryTypeHasLlamaCppNamesShapesTypesAndValues) {
  REQUIRE_TOKENIZER();
  const ModelConfig c = ToyConfig("tiny", 16);  // layer 5: full attention, K=V
  const std::string dir = MakeModel(c, "gguf_export_g4", DType::kF32);
  for (GgufType type : {GgufType::kF32, GgufType::kBF16, GgufType::kF16, GgufType::kQ8_0}) {
    SCOPED_TRACE(std::string(GgufTypeName(type)));
    GgufFile g = Export(dir, type, StrCat("m_", GgufTypeName(type), ".gguf"));
    CheckTensors(g, dir, c, type);
    EXPECT_EQ(U32(g, "general.file_type"), GgufFileType(type));
    EXPECT_EQ(g.FindTensor("blk.5.attn_v.weight"), nullptr);  // K=V: llama.cpp uses K as V
    EXPECT_NE(g.FindTensor("blk.4.attn_v.weight"), nullptr);
  }
  EXPECT_EQ(GgufFileType(GgufType::kF32), 0u);
  EXPECT_EQ(GgufFileType(GgufType::kF16), 1u);
  EXPECT_EQ(GgufFileType(GgufType::kQ8_0), 7u);
  EXPECT_EQ(GgufFileType(GgufType::kBF16), 32u);
}

TEST(GgufExportTest, Gemma4MetadataAndTokenizer) {
  REQUIRE_TOKENIZER();
  const ModelConfig c = ToyConfig("tiny", 16);
  const std::string dir = MakeModel(c, "gguf_export_g4_meta", DType::kBF16);
  GgufFile g = Export(dir, GgufType::kBF16);
  EXPECT_EQ(Str(g, "general.architecture"), "gemma4");
  EXPECT_EQ(Str(g, "general.type"), "model");
  EXPECT_EQ(Str(g, "general.name"), fs::path(dir).filename().string());
  EXPECT_EQ(U32(g, "general.quantization_version"), 2u);
  EXPECT_EQ(U32(g, "gemma4.block_count"), 6u);
  EXPECT_EQ(U32(g, "gemma4.context_length"), 4096u);
  EXPECT_EQ(U32(g, "gemma4.embedding_length"), 128u);
  EXPECT_EQ(U32(g, "gemma4.feed_forward_length"), 512u);
  EXPECT_EQ(U32(g, "gemma4.attention.head_count"), 4u);
  EXPECT_EQ(Ints(g, "gemma4.attention.head_count_kv", GgufValueType::kI32), (std::vector<int64_t>{2, 2, 2, 2, 2, 1}));
  EXPECT_EQ(U32(g, "gemma4.attention.key_length"), 64u);
  EXPECT_EQ(U32(g, "gemma4.attention.value_length"), 64u);
  EXPECT_EQ(U32(g, "gemma4.attention.key_length_swa"), 32u);
  EXPECT_EQ(U32(g, "gemma4.attention.value_length_swa"), 32u);
  EXPECT_EQ(U32(g, "gemma4.attention.sliding_window"), 16u);
  EXPECT_EQ(Ints(g, "gemma4.attention.sliding_window_pattern", GgufValueType::kBool),
            (std::vector<int64_t>{1, 1, 1, 1, 1, 0}));
  EXPECT_EQ(U32(g, "gemma4.attention.shared_kv_layers"), 0u);
  EXPECT_EQ(U32(g, "gemma4.embedding_length_per_layer_input"), 0u);
  EXPECT_EQ(U32(g, "gemma4.rope.dimension_count"), 64u);
  EXPECT_EQ(U32(g, "gemma4.rope.dimension_count_swa"), 32u);
  EXPECT_EQ(F32(g, "gemma4.rope.freq_base"), 1e6f);
  EXPECT_EQ(F32(g, "gemma4.rope.freq_base_swa"), 1e4f);
  EXPECT_EQ(F32(g, "gemma4.attention.layer_norm_rms_epsilon"), 1e-6f);
  EXPECT_EQ(F32(g, "gemma4.final_logit_softcapping"), 30.f);
  EXPECT_EQ(g.Find("gemma4.expert_count"), nullptr);

  // Tokenizer: llama.cpp's gemma4 BPE vocabulary (tokens, merges, types), cut to the toy's 300 rows.
  const json tj = ReadJsonFile(dir + "/tokenizer.json");
  const json tc = ReadJsonFile(dir + "/tokenizer_config.json");
  EXPECT_EQ(Str(g, "tokenizer.ggml.model"), "gemma4");
  EXPECT_EQ(g.Find("tokenizer.ggml.pre"), nullptr);
  const auto* tokens = g.Find("tokenizer.ggml.tokens")->GetStrings();
  ASSERT_NE(tokens, nullptr);
  ASSERT_EQ(tokens->size(), 300u);  // = embedding rows
  std::map<int64_t, std::string> by_id;
  for (const auto& [piece, id] : tj["model"]["vocab"].items()) by_id[id.get<int64_t>()] = piece;
  std::map<int64_t, bool> special;
  for (const json& a : tj["added_tokens"]) special[a["id"].get<int64_t>()] = a["special"].get<bool>();
  const auto types = Ints(g, "tokenizer.ggml.token_type", GgufValueType::kI32);
  const GgufValue* scores = g.Find("tokenizer.ggml.scores");
  ASSERT_TRUE(scores && scores->elem_type() == GgufValueType::kF32 && scores->size() == 300);
  ASSERT_EQ(types.size(), 300u);
  for (int64_t i = 0; i < 300; ++i) {
    EXPECT_EQ((*tokens)[size_t(i)], by_id[i]) << i;
    EXPECT_EQ(scores->NumberAt(uint64_t(i)), -1000.0);
    const std::string& t = by_id[i];
    const int64_t want = (t.size() == 6 && t.rfind("<0x", 0) == 0) ? 6 : (special.count(i) && special[i]) ? 3 : 1;
    EXPECT_EQ(types[size_t(i)], want) << i << " " << t;
  }
  EXPECT_EQ(types[2], 3);    // <bos>: CONTROL
  EXPECT_EQ(types[248], 6);  // <0x0A>: BYTE
  const auto* merges = g.Find("tokenizer.ggml.merges")->GetStrings();
  ASSERT_NE(merges, nullptr);
  EXPECT_GT(merges->size(), 0u);
  std::set<std::string> kept(tokens->begin(), tokens->end());
  for (const std::string& m : *merges) {
    const size_t sp = m.find(' ', 1);
    ASSERT_NE(sp, std::string::npos) << m;
    EXPECT_TRUE(kept.count(m.substr(0, sp)) && kept.count(m.substr(sp + 1)) && kept.count(m.substr(0, sp) + m.substr(sp + 1)))
        << m;
  }
  EXPECT_EQ(U32(g, "tokenizer.ggml.bos_token_id"), 2u);
  EXPECT_EQ(U32(g, "tokenizer.ggml.eos_token_id"), 106u);  // tokenizer_config eos_token <end_of_turn>
  EXPECT_EQ(U32(g, "tokenizer.ggml.unknown_token_id"), 3u);
  EXPECT_EQ(U32(g, "tokenizer.ggml.padding_token_id"), 0u);
  EXPECT_TRUE(Bool(g, "tokenizer.ggml.add_bos_token"));
  EXPECT_FALSE(Bool(g, "tokenizer.ggml.add_eos_token"));
  EXPECT_FALSE(Bool(g, "tokenizer.ggml.add_space_prefix"));
  EXPECT_EQ(Str(g, "tokenizer.chat_template"), tc["chat_template"].get<std::string>());
}

TEST(GgufExportTest, Gemma4PleKvSharingDoubleWideMlpAsQ8_0) {
  REQUIRE_TOKENIZER();
  const ModelConfig c = ToyConfig("tiny-e2b", 16);
  const std::string dir = MakeModel(c, "gguf_export_e2b", DType::kBF16);
  GgufFile g = Export(dir, GgufType::kQ8_0);
  CheckTensors(g, dir, c, GgufType::kQ8_0);
  // The per-layer projection has rows of 16: not whole Q8_0 blocks, so F16 (the converter's fallback).
  EXPECT_EQ(g.FindTensor("blk.0.proj.weight")->type, uint32_t(GgmlType::kF16));
  EXPECT_EQ(g.FindTensor("blk.0.inp_gate.weight")->type, uint32_t(GgmlType::kQ8_0));
  EXPECT_EQ(g.FindTensor("blk.5.attn_k.weight"), nullptr);  // KV-shared layers carry no K/V
  EXPECT_EQ(Ints(g, "gemma4.feed_forward_length", GgufValueType::kI32),
            (std::vector<int64_t>{512, 512, 512, 512, 1024, 1024}));
  EXPECT_EQ(U32(g, "gemma4.attention.head_count_kv"), 2u);
  EXPECT_EQ(U32(g, "gemma4.attention.shared_kv_layers"), 2u);
  EXPECT_EQ(U32(g, "gemma4.embedding_length_per_layer_input"), 16u);
  EXPECT_EQ(Ints(g, "gemma4.attention.sliding_window_pattern", GgufValueType::kBool),
            (std::vector<int64_t>{1, 1, 0, 1, 1, 0}));
}

TEST(GgufExportTest, Gemma4MixtureOfExperts) {
  REQUIRE_TOKENIZER();
  const ModelConfig c = ToyConfig("tiny-moe", 16);
  const std::string dir = MakeModel(c, "gguf_export_moe", DType::kF32);
  GgufFile g = Export(dir, GgufType::kF16);
  CheckTensors(g, dir, c, GgufType::kF16);
  EXPECT_EQ(g.FindTensor("blk.0.ffn_gate_up_exps.weight")->ne, (std::vector<int64_t>{128, 128, 8}));
  EXPECT_EQ(g.FindTensor("blk.0.ffn_down_exps.weight")->ne, (std::vector<int64_t>{64, 128, 8}));
  EXPECT_EQ(g.FindTensor("blk.0.ffn_gate_inp.weight")->type, uint32_t(GgmlType::kF32));
  EXPECT_EQ(U32(g, "gemma4.expert_count"), 8u);
  EXPECT_EQ(U32(g, "gemma4.expert_used_count"), 2u);
  EXPECT_EQ(U32(g, "gemma4.expert_feed_forward_length"), 64u);
}

TEST(GgufExportTest, Gemma3NormsGetOneAddedAndTheVocabularyIsSentencePiece) {
  REQUIRE_TOKENIZER();
  const ModelConfig c = Gemma3Toy();
  const std::string dir = MakeModel(c, "gguf_export_g3", DType::kBF16);
  GgufFile g = Export(dir, GgufType::kBF16);
  CheckTensors(g, dir, c, GgufType::kBF16);
  EXPECT_EQ(Str(g, "general.architecture"), "gemma3");
  EXPECT_EQ(g.FindTensor("rope_freqs.weight"), nullptr);
  EXPECT_EQ(U32(g, "gemma3.block_count"), 6u);
  EXPECT_EQ(U32(g, "gemma3.context_length"), 32768u);
  EXPECT_EQ(U32(g, "gemma3.embedding_length"), 64u);
  EXPECT_EQ(U32(g, "gemma3.attention.head_count_kv"), 1u);
  EXPECT_EQ(U32(g, "gemma3.attention.key_length"), 32u);
  EXPECT_EQ(U32(g, "gemma3.attention.sliding_window"), 8u);
  EXPECT_EQ(F32(g, "gemma3.rope.freq_base"), 1e6f);
  EXPECT_EQ(g.Find("gemma3.final_logit_softcapping"), nullptr);
  EXPECT_EQ(g.Find("gemma3.attention.sliding_window_pattern"), nullptr);

  EXPECT_EQ(Str(g, "tokenizer.ggml.model"), "llama");
  EXPECT_EQ(Str(g, "tokenizer.ggml.pre"), "default");
  EXPECT_EQ(g.Find("tokenizer.ggml.merges"), nullptr);
  const auto* tokens = g.Find("tokenizer.ggml.tokens")->GetStrings();
  const auto types = Ints(g, "tokenizer.ggml.token_type", GgufValueType::kI32);
  const GgufValue* scores = g.Find("tokenizer.ggml.scores");
  ASSERT_TRUE(tokens && tokens->size() == 300 && types.size() == 300 && scores && scores->size() == 300);
  // tokenizer_config.json added_tokens_decoder: CONTROL when special or special-looking,
  // else USER_DEFINED with ▁ written as a space; score -1000.
  const json tc = ReadJsonFile(dir + "/tokenizer_config.json");
  int user_defined_with_space = 0;
  for (const auto& [key, e] : tc["added_tokens_decoder"].items()) {
    const int id = std::stoi(key);
    if (id >= 300) continue;
    std::string content = e["content"].get<std::string>();
    const bool looks = content == "<mask>" || content == "<pad>" || content.rfind("<unused", 0) == 0;
    if (e["special"].get<bool>() || looks) {
      EXPECT_EQ(types[size_t(id)], 3) << content;
    } else {
      EXPECT_EQ(types[size_t(id)], 4) << content;
      for (size_t p = content.find("\xE2\x96\x81"); p != std::string::npos; p = content.find("\xE2\x96\x81")) {
        content.replace(p, 3, " ");
        ++user_defined_with_space;
      }
    }
    EXPECT_EQ((*tokens)[size_t(id)], content);
    EXPECT_EQ(scores->NumberAt(uint64_t(id)), -1000.0);
  }
  EXPECT_GT(user_defined_with_space, 0);
  EXPECT_EQ(types[248], 6);  // <0x0A>
  EXPECT_EQ(types[6], 3);    // <unused0>: special-looking, so CONTROL
  EXPECT_TRUE(Bool(g, "tokenizer.ggml.add_bos_token"));
  EXPECT_EQ(U32(g, "tokenizer.ggml.eos_token_id"), 106u);
  EXPECT_EQ(Str(g, "tokenizer.chat_template"), tc["chat_template"].get<std::string>());
}

TEST(GgufExportTest, Gemma3TakesPiecesScoresAndTypesFromTokenizerModel) {
  REQUIRE_TOKENIZER();
  const ModelConfig c = Gemma3Toy();
  const std::string dir = MakeModel(c, "gguf_export_g3_spm", DType::kF32);
  const json tj = ReadJsonFile(dir + "/tokenizer.json");
  std::map<int64_t, std::string> by_id;
  for (const auto& [piece, id] : tj["model"]["vocab"].items()) by_id[id.get<int64_t>()] = piece;
  spm_test::ProtoWriter model;
  model.Bytes(2, "trainer spec, skipped");
  for (int i = 0; i < 320; ++i) {
    const std::string& p = by_id[i];
    const int type = i == 3 ? 2 : (i < 3 ? 3 : (p.rfind("<0x", 0) == 0 ? 6 : 1));
    model.Bytes(1, spm_test::PieceMessage({p, -float(i) - 0.5f, type}));
  }
  ASSERT_TRUE(WriteFileAtomic(dir + "/tokenizer.model", model.bytes).ok());
  auto pieces = ParseSentencePieceModel(model.bytes, "tokenizer.model");
  ASSERT_TRUE(pieces.ok()) << pieces.message();
  ASSERT_EQ(pieces->size(), 320u);
  EXPECT_EQ((*pieces)[250].score, -250.5f);
  EXPECT_EQ((*pieces)[3].type, 2);

  GgufFile g = Export(dir, GgufType::kF32);
  const GgufValue* scores = g.Find("tokenizer.ggml.scores");
  const auto types = Ints(g, "tokenizer.ggml.token_type", GgufValueType::kI32);
  ASSERT_EQ(scores->size(), 300u);
  EXPECT_EQ(scores->NumberAt(250), -250.5);  // <0xNN>: not an added token, so the model's score stays
  EXPECT_EQ(types[250], 6);
  EXPECT_EQ(scores->NumberAt(2), -1000.0);  // <bos>: an added token
  EXPECT_EQ(types[3], 3);  // <unk>: UNKNOWN in the model, CONTROL as a special added token
}

TEST(GgufExportTest, AutoTypeFollowsTheCheckpoint) {
  REQUIRE_TOKENIZER();
  const ModelConfig c = ToyConfig("tiny", 16);
  auto bf = PlanGgufExport(MakeModel(c, "gguf_export_auto_bf16", DType::kBF16), GgufType::kAuto);
  ASSERT_TRUE(bf.ok()) << bf.message();
  EXPECT_EQ(bf->type, GgufType::kBF16);
  auto f32 = PlanGgufExport(MakeModel(c, "gguf_export_auto_f32", DType::kF32), GgufType::kAuto);
  ASSERT_TRUE(f32.ok()) << f32.message();
  EXPECT_EQ(f32->type, GgufType::kF16);  // convert_hf_to_gguf.py's default for f32 weights
  ASSERT_FALSE(f32->notes.empty());
  EXPECT_NE(f32->notes[0].find("kept the first 300 tokens"), std::string::npos) << f32->notes[0];
}

TEST(GgufExportTest, RefusesWhatLlamaCppWouldLoadWrongOrNotAtAll) {
  REQUIRE_TOKENIZER();
  {
    ModelConfig c = Gemma3Toy();
    c.layer_types[2] = LayerType::kFull;
    const std::string dir = MakeModel(c, "gguf_export_bad_pattern", DType::kF32);
    EXPECT_NE(ExportGguf(dir, dir + "/x.gguf", GgufType::kF32).message().find("every 6th layer"), std::string::npos);
    EXPECT_FALSE(fs::exists(dir + "/x.gguf"));
  }
  {
    ModelConfig c = ToyConfig("gemma3-270m", 8);  // query_pre_attn_scalar 256 with head_dim 32
    const std::string dir = MakeModel(c, "gguf_export_bad_scale", DType::kF32);
    EXPECT_NE(ExportGguf(dir, dir + "/x.gguf", GgufType::kF32).message().find("query_pre_attn_scalar"), std::string::npos);
  }
  const ModelConfig c = ToyConfig("tiny", 16);
  {
    const std::string dir = MakeModel(c, "gguf_export_no_tok", DType::kF32);
    fs::remove(dir + "/tokenizer.json");
    EXPECT_NE(ExportGguf(dir, dir + "/x.gguf", GgufType::kF32).message().find("tokenizer.json not found"),
              std::string::npos);
  }
  {
    // Layers 4 and 5 full, so that the first five layers alone still end with a full one (the
    // last layer is always full attention, as transformers forces it).
    ModelConfig two_full = c;
    two_full.layer_types[4] = LayerType::kFull;
    const std::string dir = MakeModel(two_full, "gguf_export_extra", DType::kF32);
    json cfg = ReadJsonFile(dir + "/config.json");
    cfg["num_hidden_layers"] = 5;
    cfg["layer_types"].erase(cfg["layer_types"].size() - 1);
    ASSERT_TRUE(WriteFileAtomic(dir + "/config.json", cfg.dump()).ok());
    EXPECT_NE(ExportGguf(dir, dir + "/x.gguf", GgufType::kF32).message().find("model.layers.5."), std::string::npos);
  }
  {
    const std::string dir = MakeModel(c, "gguf_export_i8_src", DType::kBF16);
    const std::string q = TestTempDir("gguf_export_i8");
    ASSERT_TRUE(WriteQuantizedCheckpoint(dir, q, QuantType::kQ8_0).ok());
    EXPECT_NE(ExportGguf(q, q + "/x.gguf", GgufType::kQ8_0).message().find("is int8"), std::string::npos);
  }
  EXPECT_NE(ParseGgufType("q4_k").message().find("unknown GGUF type 'q4_k'"), std::string::npos);
}

TEST(GgufExportTest, NamesAndTypeRules) {
  EXPECT_EQ(GgufTensorName("embed_tokens.weight"), "token_embd.weight");
  EXPECT_EQ(GgufTensorName("layers.12.post_attention_layernorm.weight"), "blk.12.post_attention_norm.weight");
  EXPECT_EQ(GgufTensorName("layers.3.pre_feedforward_layernorm.weight"), "blk.3.ffn_norm.weight");
  EXPECT_EQ(GgufTensorName("layers.0.layer_scalar"), "blk.0.layer_output_scale.weight");
  EXPECT_EQ(GgufTensorName("layers.x.mlp.up_proj.weight"), "");
  EXPECT_EQ(GgufTensorName("vision_tower.foo"), "");
  EXPECT_EQ(GgufTensorType("blk.0.attn_q.weight", {128, 256}, GgufType::kQ8_0), GgmlType::kQ8_0);
  EXPECT_EQ(GgufTensorType("blk.0.proj.weight", {16, 128}, GgufType::kQ8_0), GgmlType::kF16);
  EXPECT_EQ(GgufTensorType("token_embd.weight", {128, 300}, GgufType::kBF16), GgmlType::kBF16);
  EXPECT_EQ(GgufTensorType("blk.0.attn_norm.weight", {128}, GgufType::kF16), GgmlType::kF32);
  EXPECT_EQ(GgufTensorType("blk.0.ffn_gate_inp.weight", {128, 8}, GgufType::kQ8_0), GgmlType::kF32);
  EXPECT_EQ(GgufTensorType("blk.0.ffn_gate_inp.scale", {128}, GgufType::kQ8_0), GgmlType::kF32);
}

}  // namespace
}  // namespace gk::bridge
