#include "tools/bridge/gguf_export.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>
#include <utility>

#include <nlohmann/json.hpp>

#include "formats/sentencepiece_model.h"
#include "model/config.h"
#include "model/weights.h"
#include "tensor/dtype.h"
#include "util/atomic_file.h"
#include "util/guarded_parse.h"

namespace gk::bridge {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// gguf-py TokenType (= llama.cpp llama_token_type).
constexpr int32_t kTokNormal = 1, kTokUnknown = 2, kTokControl = 3, kTokUserDefined = 4, kTokUnused = 5,
                  kTokByte = 6;

bool StartsWith(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }
bool EndsWith(std::string_view s, std::string_view p) { return s.size() >= p.size() && s.substr(s.size() - p.size()) == p; }

std::string ShapeStr(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += StrCat(i ? ", " : "", s[i]);
  return r + "]";
}

std::string Join(const std::string& dir, const char* name) { return (fs::path(dir) / name).string(); }

Result<json> ReadJson(const std::string& path) {
  GK_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  return ParseJson(text, path);
}

// A file that may be absent: nullopt when it is, an error when it is present but unreadable.
Result<std::optional<json>> ReadOptionalJson(const std::string& path) {
  if (!fs::exists(path)) return std::optional<json>();
  GK_ASSIGN_OR_RETURN(json j, ReadJson(path));
  return std::optional<json>(std::move(j));
}

// "<0x0A>": a SentencePiece byte-fallback piece (gguf-py LlamaHfVocab.get_token_type).
bool IsBytePiece(std::string_view s) {
  auto hex = [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); };
  return s.size() == 6 && StartsWith(s, "<0x") && s[5] == '>' && hex(s[3]) && hex(s[4]);
}

// convert_hf_to_gguf.py TextModel.does_token_look_special.
bool LooksSpecial(std::string_view t) {
  if (t == "<pad>" || t == "<mask>" || t == "<2mass>" || t == "[@BOS@]") return true;
  if (StartsWith(t, "<|") && EndsWith(t, "|>")) return true;
  if (StartsWith(t, "<\xEF\xBD\x9C") && EndsWith(t, "\xEF\xBD\x9C>")) return true;  // <｜ ... ｜>
  return StartsWith(t, "<unused") && EndsWith(t, ">");
}

std::string ReplaceAll(std::string s, std::string_view from, std::string_view to) {
  for (size_t p = s.find(from); p != std::string::npos; p = s.find(from, p + to.size())) s.replace(p, from.size(), to);
  return s;
}

// ---------------------------------------------------------------------------------------------
// Tokenizer
// ---------------------------------------------------------------------------------------------

struct AddedToken {
  int32_t id;
  std::string content;
  bool special;
};

struct TokenizerFiles {
  json tokenizer;                        // tokenizer.json
  std::optional<json> config;            // tokenizer_config.json
  std::optional<json> model_config;      // config.json
  std::vector<AddedToken> added;         // tokenizer.json added_tokens, in file order
  std::unordered_map<std::string, int32_t> vocab;  // model.vocab
  int32_t vocab_end = 0;                 // max vocab id + 1
};

struct Vocab {
  std::string model, pre;
  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<int32_t> types;
  std::vector<std::string> merges;
  std::vector<std::pair<std::string, int64_t>> special_ids;  // ("bos", 2), in SpecialVocab order
  std::vector<std::pair<std::string, bool>> add_special;     // ("bos", true)
  std::string chat_template;
  std::vector<std::pair<std::string, std::string>> named_templates;
};

Result<TokenizerFiles> ReadTokenizerFiles(const std::string& dir) {
  using R = Result<TokenizerFiles>;
  TokenizerFiles f;
  const std::string tok_path = Join(dir, "tokenizer.json");
  if (!fs::exists(tok_path)) {
    return R::Error(StrCat(tok_path, " not found; a GGUF carries its tokenizer, so the checkpoint directory needs tokenizer.json"));
  }
  GK_ASSIGN_OR_RETURN(f.tokenizer, ReadJson(tok_path));
  GK_ASSIGN_OR_RETURN(f.config, ReadOptionalJson(Join(dir, "tokenizer_config.json")));
  GK_ASSIGN_OR_RETURN(f.model_config, ReadOptionalJson(Join(dir, "config.json")));
  const json& t = f.tokenizer;
  if (!t.is_object() || !t.contains("model") || !t["model"].is_object()) {
    return R::Error(StrCat(tok_path, ": no \"model\" object"));
  }
  const json& m = t["model"];
  const std::string mtype = m.value("type", "");
  if (mtype != "BPE") {
    return R::Error(StrCat(tok_path, ": model type \"", mtype, "\"; the Gemma tokenizer is BPE (with byte fallback)"));
  }
  if (!m.contains("vocab") || !m["vocab"].is_object()) return R::Error(StrCat(tok_path, ": model.vocab is not an object"));
  for (const auto& [piece, id] : m["vocab"].items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX) {
      return R::Error(StrCat(tok_path, ": model.vocab[\"", piece, "\"] is not a token id"));
    }
    f.vocab.emplace(piece, id.get<int32_t>());
    f.vocab_end = std::max(f.vocab_end, id.get<int32_t>() + 1);
  }
  if (t.contains("added_tokens") && t["added_tokens"].is_array()) {
    for (const json& a : t["added_tokens"]) {
      if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() || !a.contains("content") ||
          !a["content"].is_string()) {
        return R::Error(StrCat(tok_path, ": an added_tokens entry has no integer id or string content"));
      }
      f.added.push_back({a["id"].get<int32_t>(), a["content"].get<std::string>(), a.value("special", false)});
    }
  }
  return f;
}

// tokenizer.json model.merges as llama.cpp wants them: "left right", a space inside a part
// written as U+0120 (gguf-py SpecialVocab._try_load_from_tokenizer_json).
Result<std::vector<std::pair<std::string, std::string>>> ReadMerges(const json& model, const std::string& origin) {
  std::vector<std::pair<std::string, std::string>> out;
  if (!model.contains("merges") || !model["merges"].is_array()) return out;
  out.reserve(model["merges"].size());
  for (const json& m : model["merges"]) {
    if (m.is_string()) {
      const std::string s = m.get<std::string>();
      const size_t sp = s.find(' ', 1);
      if (sp == std::string::npos) return Result<std::vector<std::pair<std::string, std::string>>>::Error(StrCat(origin, ": merge \"", s, "\" has no space"));
      out.emplace_back(s.substr(0, sp), s.substr(sp + 1));
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      out.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    } else {
      return Result<std::vector<std::pair<std::string, std::string>>>::Error(StrCat(origin, ": unknown merges format (", m.dump().substr(0, 60), ")"));
    }
  }
  return out;
}

std::string MergeString(const std::string& a, const std::string& b) {
  return ReplaceAll(a, " ", "\xC4\xA0") + " " + ReplaceAll(b, " ", "\xC4\xA0");
}

// gguf-py SpecialVocab: special token ids, add_*_token and the chat template, read as it reads
// them (tokenizer.json post_processor, tokenizer_config.json, then config.json). One deliberate
// difference: chat_template.jinja is used even when tokenizer_config.json is absent.
void ReadSpecialVocab(const std::string& dir, const TokenizerFiles& f, Vocab* v) {
  static const char* kTypes[] = {"bos", "eos", "unk", "sep", "pad", "cls", "mask"};
  std::map<std::string, int64_t> ids;
  std::map<std::string, bool> add;
  auto set_id = [&](const std::string& typ, int64_t id) {
    if (id < 0 || ids.count(typ)) return;
    ids[typ] = id;
  };
  auto token_content = [](const json& e) -> std::optional<std::string> {
    if (e.is_string()) return e.get<std::string>();
    if (e.is_object() && e.contains("content") && e["content"].is_string()) return e["content"].get<std::string>();
    return std::nullopt;
  };
  const json* tc = f.config && f.config->is_object() ? &*f.config : nullptr;
  std::optional<std::string> special_bos, special_eos, special_cls;
  if (tc) {
    if (tc->contains("bos_token")) special_bos = token_content((*tc)["bos_token"]);
    if (tc->contains("eos_token")) special_eos = token_content((*tc)["eos_token"]);
    if (tc->contains("cls_token")) special_cls = token_content((*tc)["cls_token"]);
  }
  // post_processor TemplateProcessing: whether BOS / EOS are added around a single sequence.
  if (f.tokenizer.contains("post_processor") && f.tokenizer["post_processor"].is_object()) {
    const json& pp = f.tokenizer["post_processor"];
    std::vector<const json*> procs;
    if (pp.contains("processors") && pp["processors"].is_array()) {
      for (const json& p : pp["processors"]) procs.push_back(&p);
    } else {
      procs.push_back(&pp);
    }
    for (const json* p : procs) {
      if (!p->is_object() || p->value("type", "") != "TemplateProcessing") continue;
      if (!p->contains("single") || !(*p)["single"].is_array() || (*p)["single"].size() <= 1) continue;
      const json& single = (*p)["single"];
      auto special_of = [](const json& e) -> std::optional<std::string> {
        if (e.is_object() && e.contains("SpecialToken") && e["SpecialToken"].contains("id") &&
            e["SpecialToken"]["id"].is_string()) {
          return e["SpecialToken"]["id"].get<std::string>();
        }
        return std::nullopt;
      };
      if (auto first = special_of(single.front())) {
        if (!tc) special_bos = first;
        add["bos"] = (first == special_bos || first == special_cls);
      }
      if (auto last = special_of(single.back())) {
        if (!tc) special_eos = last;
        add["eos"] = last == special_eos;
      }
    }
  }
  // The chat template: tokenizer_config.json's, else chat_template.jinja, else chat_template.json.
  std::optional<json> tmpl;
  if (tc && tc->contains("chat_template") && !(*tc)["chat_template"].is_null()) tmpl = (*tc)["chat_template"];
  if (!tmpl) {
    if (auto text = ReadFile(Join(dir, "chat_template.jinja")); text.ok()) {
      tmpl = json(*text);
    } else if (auto j = ReadOptionalJson(Join(dir, "chat_template.json")); j.ok() && *j && (*j)->is_object() &&
               (*j)->contains("chat_template")) {
      tmpl = (**j)["chat_template"];
    }
  }
  if (tmpl && tmpl->is_string()) {
    v->chat_template = tmpl->get<std::string>();
  } else if (tmpl && tmpl->is_array()) {  // [{"name": "default", "template": ...}, ...]
    for (const json& c : *tmpl) {
      if (!c.is_object() || !c.contains("template") || !c["template"].is_string()) continue;
      std::string name;
      for (char ch : c.value("name", std::string())) name += std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
      if (name == "default") v->chat_template = c["template"].get<std::string>();
      else if (!name.empty()) v->named_templates.emplace_back(name, c["template"].get<std::string>());
    }
  }
  if (tc) {
    for (const char* typ : kTypes) {
      const std::string k = typ;
      if (tc->contains("add_" + k + "_token") && (*tc)["add_" + k + "_token"].is_boolean()) {
        add[k] = (*tc)["add_" + k + "_token"].get<bool>();
      }
      if (!tc->contains(k + "_token")) continue;
      const auto content = token_content((*tc)[k + "_token"]);
      if (!content) continue;
      for (const AddedToken& a : f.added) {
        if (a.content == *content) {
          set_id(k, a.id);
          break;
        }
      }
    }
  }
  if (f.model_config && f.model_config->is_object()) {
    const json& c = *f.model_config;
    for (const char* typ : kTypes) {
      const std::string key = std::string(typ) + "_token_id";
      const json* e = c.contains(key) ? &c[key] : nullptr;
      if ((!e || e->is_null()) && c.contains("text_config") && c["text_config"].is_object() && c["text_config"].contains(key)) {
        e = &c["text_config"][key];
      }
      if (e && e->is_number_integer()) set_id(typ, e->get<int64_t>());
    }
  }
  // Only these have add_*_token_id writers in gguf-py (cls does not).
  for (const char* typ : {"bos", "eos", "unk", "sep", "pad", "mask"}) {
    if (ids.count(typ)) v->special_ids.emplace_back(typ, ids[typ]);
  }
  for (const char* typ : {"bos", "eos", "sep"}) {
    if (add.count(typ)) v->add_special.emplace_back(typ, add[typ]);
  }
}

// Makes the vocabulary exactly n_tokens long (llama.cpp takes the vocabulary size from the
// token list and requires token_embd to have as many rows): extra tokens are dropped, missing
// ones become "[PADi]" (UNUSED). Merges that need a dropped token are dropped with it.
void FitVocab(Vocab* v, int64_t n_tokens, float pad_score, std::vector<std::string>* notes) {
  const int64_t have = int64_t(v->tokens.size());
  if (have == n_tokens) return;
  if (have > n_tokens) {
    notes->push_back(StrCat("the tokenizer has ", have, " tokens but the embedding has ", n_tokens,
                            " rows: kept the first ", n_tokens, " tokens (the model cannot produce the others)"));
    std::set<std::string> kept(v->tokens.begin(), v->tokens.begin() + n_tokens);
    v->tokens.resize(size_t(n_tokens));
    v->scores.resize(size_t(n_tokens));
    v->types.resize(size_t(n_tokens));
    std::vector<std::string> merges;
    for (const std::string& m : v->merges) {
      const size_t sp = m.find(' ', 1);
      const std::string a = ReplaceAll(m.substr(0, sp), "\xC4\xA0", " "), b = ReplaceAll(m.substr(sp + 1), "\xC4\xA0", " ");
      if (kept.count(a) && kept.count(b) && kept.count(a + b)) merges.push_back(m);
    }
    v->merges = std::move(merges);
    std::vector<std::pair<std::string, int64_t>> ids;
    for (const auto& [typ, id] : v->special_ids) {
      if (id < n_tokens) ids.emplace_back(typ, id);
    }
    v->special_ids = std::move(ids);
    return;
  }
  notes->push_back(StrCat("the tokenizer has ", have, " tokens but the embedding has ", n_tokens,
                          " rows: added ", n_tokens - have, " unused [PAD] tokens"));
  for (int64_t i = have; i < n_tokens; ++i) {
    v->tokens.push_back(StrCat("[PAD", i, "]"));
    v->scores.push_back(pad_score);
    v->types.push_back(kTokUnused);
  }
}

// llama.cpp keys tokens by text (llama-vocab.cpp: "duplicate token in vocabulary"): two ids
// with one text would make the file unloadable.
Status CheckUniqueTokens(const Vocab& v, const std::string& dir) {
  std::unordered_map<std::string_view, size_t> seen;
  for (size_t i = 0; i < v.tokens.size(); ++i) {
    auto [it, fresh] = seen.emplace(v.tokens[i], i);
    if (!fresh) {
      return Status::Error(StrCat(dir, ": tokens ", it->second, " and ", i, " are both \"", v.tokens[i],
                                  "\"; llama.cpp needs every token text to be unique"));
    }
  }
  return Status::Ok();
}

// Gemma 4: convert_hf_to_gguf.py Gemma4Model.set_vocab (gguf-py LlamaHfVocab + SpecialVocab
// with merges): tokenizer.ggml.model "gemma4", every score -1000, BYTE for <0xNN>, CONTROL for
// special added tokens, USER_DEFINED for the seven tokens llama.cpp's chat parser must see.
Result<Vocab> Gemma4Vocab(const std::string& dir, const TokenizerFiles& f, int64_t n_tokens, std::vector<std::string>* notes) {
  using R = Result<Vocab>;
  const std::string origin = Join(dir, "tokenizer.json");
  Vocab v;
  v.model = "gemma4";
  const int32_t base = int32_t(f.vocab.size());
  if (f.vocab_end != base) {
    return R::Error(StrCat(origin, ": model.vocab has ", base, " entries but ids up to ", f.vocab_end - 1));
  }
  std::vector<const std::string*> piece(size_t(base), nullptr);
  for (const auto& [p, id] : f.vocab) piece[size_t(id)] = &p;
  std::map<int32_t, const AddedToken*> added;
  for (const AddedToken& a : f.added) added.emplace(a.id, &a);
  static const std::set<std::string> kVisible = {"<|channel>", "<channel|>", "<|tool_call>", "<tool_call|>",
                                                 "<|tool_response>", "<tool_response|>", "<|\"|>"};
  auto type_of = [&](int32_t id, const std::string& text, bool beyond_base) {
    int32_t t = kTokNormal;
    auto it = added.find(id);
    const bool special = it != added.end() && it->second->special;
    if (IsBytePiece(text)) t = kTokByte;
    else if (special) t = kTokControl;
    else if (beyond_base) t = kTokUserDefined;
    if (kVisible.count(text)) t = kTokUserDefined;
    return t;
  };
  for (int32_t id = 0; id < base; ++id) {
    v.tokens.push_back(*piece[size_t(id)]);
    v.types.push_back(type_of(id, v.tokens.back(), false));
  }
  for (const auto& [id, a] : added) {  // added tokens past the model vocabulary, in id order
    if (id < base) continue;
    if (id != int32_t(v.tokens.size())) {
      return R::Error(StrCat(origin, ": added token ", a->content, " has id ", id, " but the next free id is ",
                             v.tokens.size(), " (added tokens must follow the vocabulary without gaps)"));
    }
    v.tokens.push_back(a->content);
    v.types.push_back(type_of(id, a->content, true));
  }
  v.scores.assign(v.tokens.size(), -1000.f);
  GK_ASSIGN_OR_RETURN(auto merges, ReadMerges(f.tokenizer["model"], origin));
  v.merges.reserve(merges.size());
  for (const auto& [a, b] : merges) v.merges.push_back(MergeString(a, b));
  if (v.merges.empty()) return R::Error(StrCat(origin, ": no merges; llama.cpp's gemma4 tokenizer needs them"));
  ReadSpecialVocab(dir, f, &v);
  FitVocab(&v, n_tokens, -1000.f, notes);
  v.add_special.erase(std::remove_if(v.add_special.begin(), v.add_special.end(),
                                     [](const auto& p) { return p.first == "bos"; }),
                      v.add_special.end());
  v.add_special.insert(v.add_special.begin(), {"bos", true});  // Gemma4Model.set_vocab: add_bos_token True
  GK_RETURN_IF_ERROR(CheckUniqueTokens(v, dir));
  return v;
}

// Gemma 3: convert_hf_to_gguf.py Gemma3Model.set_vocab -> _set_vocab_sentencepiece:
// tokenizer.ggml.model "llama" (SentencePiece), pieces, scores and types from tokenizer.model,
// then every tokenizer_config.json added_tokens_decoder entry as CONTROL (special, or looks
// special) or USER_DEFINED (▁ written as a space), score -1000. Without tokenizer.model (the
// converter would refuse: it needs one) the pieces come from tokenizer.json and each score is
// minus the rank of the first merge that makes the piece, which gives llama.cpp's SentencePiece
// merge loop the order of the BPE merges.
Result<Vocab> Gemma3Vocab(const std::string& dir, const TokenizerFiles& f, int64_t n_tokens, std::vector<std::string>* notes) {
  const std::string origin = Join(dir, "tokenizer.json");
  Vocab v;
  v.model = "llama";
  v.pre = "default";
  v.tokens.resize(size_t(n_tokens));
  v.scores.assign(size_t(n_tokens), -10000.f);
  v.types.assign(size_t(n_tokens), kTokUnused);
  for (int64_t i = 0; i < n_tokens; ++i) v.tokens[size_t(i)] = StrCat("[PAD", i, "]");
  int64_t source_size = 0;
  const std::string spm_path = Join(dir, "tokenizer.model");
  if (fs::exists(spm_path)) {
    GK_ASSIGN_OR_RETURN(std::string bytes, ReadFile(spm_path));
    GK_ASSIGN_OR_RETURN(std::vector<SpmPiece> pieces, ParseSentencePieceModel(bytes, spm_path));
    source_size = int64_t(pieces.size());
    for (int64_t id = 0; id < std::min<int64_t>(n_tokens, source_size); ++id) {
      const SpmPiece& p = pieces[size_t(id)];
      int32_t t = kTokNormal;  // USER_DEFINED pieces stay NORMAL here, as in the converter
      if (p.type == 2) t = kTokUnknown;
      else if (p.type == 3) t = kTokControl;
      else if (p.type == 5) t = kTokUnused;
      else if (p.type == 6) t = kTokByte;
      v.tokens[size_t(id)] = p.piece;
      v.scores[size_t(id)] = p.score;
      v.types[size_t(id)] = t;
    }
  } else {
    notes->push_back("no tokenizer.model: SentencePiece scores derived from the merge ranks of tokenizer.json");
    GK_ASSIGN_OR_RETURN(auto merges, ReadMerges(f.tokenizer["model"], origin));
    std::vector<int64_t> first_rank(size_t(f.vocab_end), -1);
    for (size_t r = 0; r < merges.size(); ++r) {
      auto it = f.vocab.find(merges[r].first + merges[r].second);
      if (it != f.vocab.end() && first_rank[size_t(it->second)] < 0) first_rank[size_t(it->second)] = int64_t(r);
    }
    const std::string unk = f.tokenizer["model"].value("unk_token", std::string());
    source_size = f.vocab_end;
    for (const auto& [piece, id] : f.vocab) {
      if (id >= n_tokens) continue;
      v.tokens[size_t(id)] = piece;
      v.scores[size_t(id)] = first_rank[size_t(id)] >= 0 ? -float(first_rank[size_t(id)]) : 0.f;
      v.types[size_t(id)] = IsBytePiece(piece) ? kTokByte : (piece == unk ? kTokUnknown : kTokNormal);
    }
  }
  // added_tokens.json (USER_DEFINED), then tokenizer_config.json added_tokens_decoder (or, with
  // no tokenizer_config.json, tokenizer.json's added_tokens, which hold the same entries).
  GK_ASSIGN_OR_RETURN(std::optional<json> added_json, ReadOptionalJson(Join(dir, "added_tokens.json")));
  if (added_json && added_json->is_object()) {
    for (const auto& [content, id] : added_json->items()) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= n_tokens) continue;
      v.tokens[id.get<size_t>()] = content;
      v.scores[id.get<size_t>()] = -1000.f;
      v.types[id.get<size_t>()] = kTokUserDefined;
    }
  }
  std::vector<AddedToken> decoder;
  if (f.config && f.config->is_object() && f.config->contains("added_tokens_decoder") &&
      (*f.config)["added_tokens_decoder"].is_object()) {
    for (const auto& [key, e] : (*f.config)["added_tokens_decoder"].items()) {
      if (!e.is_object() || !e.contains("content") || !e["content"].is_string()) continue;
      char* end = nullptr;
      const long id = std::strtol(key.c_str(), &end, 10);
      if (end == key.c_str() || *end != '\0') continue;
      decoder.push_back({int32_t(id), e["content"].get<std::string>(), e.value("special", false)});
    }
  } else {
    decoder = f.added;
  }
  for (const AddedToken& a : decoder) {
    if (a.id < 0 || a.id >= n_tokens) continue;
    std::string text = a.content;
    if (a.special || LooksSpecial(text)) {
      v.types[size_t(a.id)] = kTokControl;
    } else {
      text = ReplaceAll(text, "\xE2\x96\x81", " ");  // pre-normalize user-defined spaces
      v.types[size_t(a.id)] = kTokUserDefined;
    }
    v.scores[size_t(a.id)] = -1000.f;
    v.tokens[size_t(a.id)] = text;
  }
  if (source_size > n_tokens) {
    notes->push_back(StrCat("the tokenizer has ", source_size, " tokens but the embedding has ", n_tokens,
                            " rows: kept the first ", n_tokens, " tokens (the model cannot produce the others)"));
  } else if (source_size < n_tokens) {
    notes->push_back(StrCat("the tokenizer has ", source_size, " tokens but the embedding has ", n_tokens,
                            " rows: added ", n_tokens - source_size, " unused [PAD] tokens"));
  }
  ReadSpecialVocab(dir, f, &v);
  std::vector<std::pair<std::string, int64_t>> ids;
  for (const auto& [typ, id] : v.special_ids) {
    if (id < n_tokens) ids.emplace_back(typ, id);
  }
  v.special_ids = std::move(ids);
  GK_RETURN_IF_ERROR(CheckUniqueTokens(v, dir));
  return v;
}

// ---------------------------------------------------------------------------------------------
// Tensors
// ---------------------------------------------------------------------------------------------

bool IsSkippedTensor(const std::string& name) {
  static const char* kSkip[] = {"model.vision_tower.", "model.embed_vision.", "model.audio_tower.", "model.embed_audio.",
                                "vision_tower.",       "multi_modal_projector.", "model.multi_modal_projector.",
                                "lm_head.weight",      "vision_model."};
  for (const char* p : kSkip) {
    if (StartsWith(name, p)) return true;
  }
  return false;
}


// Writes `rows` rows of `row` floats each (produced by `get_row`) as `out` into dst.
template <class GetRow>
void EncodeRows(GgmlType out, int64_t rows, int64_t row, GetRow get_row, uint8_t* dst) {
  std::vector<float> buf(static_cast<size_t>(row));
  for (int64_t r = 0; r < rows; ++r) {
    get_row(r, buf.data());
    switch (out) {
      case GgmlType::kF32:
        std::memcpy(dst + r * row * 4, buf.data(), size_t(row) * 4);
        break;
      case GgmlType::kF16:
        for (int64_t i = 0; i < row; ++i) {
          const uint16_t h = F32ToF16(buf[size_t(i)]);
          std::memcpy(dst + (r * row + i) * 2, &h, 2);
        }
        break;
      case GgmlType::kBF16:
        for (int64_t i = 0; i < row; ++i) {
          const uint16_t h = F32ToBf16(buf[size_t(i)]);
          std::memcpy(dst + (r * row + i) * 2, &h, 2);
        }
        break;
      case GgmlType::kQ8_0:
        QuantizeQ8_0(buf.data(), row, dst + r * (row / 32) * 34);
        break;
    }
  }
}

void PutU32(std::vector<GgufKv>* kvs, std::string key, uint32_t v) { kvs->push_back({std::move(key), GgufValue::U32(v)}); }
void PutF32(std::vector<GgufKv>* kvs, std::string key, float v) { kvs->push_back({std::move(key), GgufValue::F32(v)}); }

// llama.cpp reads these per layer (get_key_or_arr): one number when every layer agrees, else an
// i32 array, as the converter writes them.
void PutPerLayer(std::vector<GgufKv>* kvs, const std::string& key, const std::vector<int32_t>& v) {
  if (std::all_of(v.begin(), v.end(), [&](int32_t x) { return x == v.front(); })) {
    PutU32(kvs, key, uint32_t(v.front()));
  } else {
    kvs->push_back({key, GgufValue::I32Array(v)});
  }
}

// Gemma 3 details llama.cpp does not read from the file (llama-model.cpp LLM_ARCH_GEMMA3):
// every 6th layer is full attention, sliding layers use RoPE base 10000, and q·k is scaled by
// 1/sqrt(head_dim) (1/sqrt(hidden/heads) for the 62-layer 27B). A config that differs would
// load and run wrong, so it is refused.
Status CheckGemma3ForLlamaCpp(const ModelConfig& c, const std::string& dir) {
  for (int l = 0; l < c.num_layers; ++l) {
    const bool swa = l % 6 < 5;
    if (swa != !c.IsFull(l)) {
      return Status::Error(StrCat(dir, "/config.json: layer ", l, " is ", c.IsFull(l) ? "full" : "sliding",
                                  " attention, but llama.cpp's gemma3 makes every 6th layer (5, 11, ...) full and the "
                                  "rest sliding; this layer pattern cannot be expressed in a gemma3 GGUF"));
    }
  }
  if (c.rope_sliding.theta != 10000.f) {
    return Status::Error(StrCat(dir, "/config.json: sliding-layer RoPE base is ", c.rope_sliding.theta,
                                "; llama.cpp's gemma3 always uses 10000"));
  }
  const float expect = c.num_layers == 62 ? float(c.hidden_size) / float(c.num_heads) : float(c.head_dim);
  if (std::fabs(c.query_pre_attn_scalar - expect) > 1e-3f * expect) {
    return Status::Error(StrCat(dir, "/config.json: query_pre_attn_scalar is ", c.query_pre_attn_scalar,
                                "; llama.cpp's gemma3 scales attention by 1/sqrt(", expect, ")"));
  }
  return Status::Ok();
}


}  // namespace

// ---------------------------------------------------------------------------------------------

Result<GgufType> ParseGgufType(std::string_view name) {
  if (name == "auto") return GgufType::kAuto;
  if (name == "f32") return GgufType::kF32;
  if (name == "bf16") return GgufType::kBF16;
  if (name == "f16") return GgufType::kF16;
  if (name == "q8_0") return GgufType::kQ8_0;
  return Result<GgufType>::Error(StrCat("unknown GGUF type '", name, "' (auto, f32, bf16, f16 or q8_0)"));
}

std::string_view GgufTypeName(GgufType t) {
  switch (t) {
    case GgufType::kAuto: return "auto";
    case GgufType::kF32: return "f32";
    case GgufType::kBF16: return "bf16";
    case GgufType::kF16: return "f16";
    case GgufType::kQ8_0: return "q8_0";
  }
  return "?";
}

uint32_t GgufFileType(GgufType t) {
  switch (t) {
    case GgufType::kF32: return 0;
    case GgufType::kF16: return 1;
    case GgufType::kQ8_0: return 7;
    case GgufType::kBF16: return 32;
    case GgufType::kAuto: break;
  }
  return 1;
}

std::string GgufTensorName(const std::string& n) {
  static const std::map<std::string, std::string> kTop = {
      {"embed_tokens.weight", "token_embd.weight"},
      {"norm.weight", "output_norm.weight"},
      {"embed_tokens_per_layer.weight", "per_layer_token_embd.weight"},
      {"per_layer_model_projection.weight", "per_layer_model_proj.weight"},
      {"per_layer_projection_norm.weight", "per_layer_proj_norm.weight"},
  };
  static const std::map<std::string, std::string> kLayer = {
      {"input_layernorm.weight", "attn_norm.weight"},
      {"post_attention_layernorm.weight", "post_attention_norm.weight"},
      {"pre_feedforward_layernorm.weight", "ffn_norm.weight"},
      {"post_feedforward_layernorm.weight", "post_ffw_norm.weight"},
      {"self_attn.q_proj.weight", "attn_q.weight"},
      {"self_attn.k_proj.weight", "attn_k.weight"},
      {"self_attn.v_proj.weight", "attn_v.weight"},
      {"self_attn.o_proj.weight", "attn_output.weight"},
      {"self_attn.q_norm.weight", "attn_q_norm.weight"},
      {"self_attn.k_norm.weight", "attn_k_norm.weight"},
      {"mlp.gate_proj.weight", "ffn_gate.weight"},
      {"mlp.up_proj.weight", "ffn_up.weight"},
      {"mlp.down_proj.weight", "ffn_down.weight"},
      {"layer_scalar", "layer_output_scale.weight"},
      {"per_layer_input_gate.weight", "inp_gate.weight"},
      {"per_layer_projection.weight", "proj.weight"},
      {"post_per_layer_input_norm.weight", "post_norm.weight"},
      {"router.proj.weight", "ffn_gate_inp.weight"},
      {"router.scale", "ffn_gate_inp.scale"},
      {"router.per_expert_scale", "ffn_down_exps.scale"},
      {"experts.gate_up_proj", "ffn_gate_up_exps.weight"},
      {"experts.down_proj", "ffn_down_exps.weight"},
      {"pre_feedforward_layernorm_2.weight", "pre_ffw_norm_2.weight"},
      {"post_feedforward_layernorm_1.weight", "post_ffw_norm_1.weight"},
      {"post_feedforward_layernorm_2.weight", "post_ffw_norm_2.weight"},
  };
  if (auto it = kTop.find(n); it != kTop.end()) return it->second;
  if (!StartsWith(n, "layers.")) return "";
  const size_t dot = n.find('.', 7);
  if (dot == std::string::npos || dot == 7) return "";
  const std::string idx = n.substr(7, dot - 7);
  if (!std::all_of(idx.begin(), idx.end(), [](char ch) { return ch >= '0' && ch <= '9'; })) return "";
  auto it = kLayer.find(n.substr(dot + 1));
  if (it == kLayer.end()) return "";
  return "blk." + idx + "." + it->second;
}

GgmlType GgufTensorType(const std::string& name, const std::vector<int64_t>& ne, GgufType type) {
  // convert_hf_to_gguf.py ModelBase.prepare_tensors: 1-D tensors and norms are F32, and so
  // are names that do not end in ".weight" and the MoE router (FFN_GATE_INP).
  if (ne.size() <= 1 || EndsWith(name, "_norm.weight") || !EndsWith(name, ".weight") ||
      EndsWith(name, ".ffn_gate_inp.weight")) {
    return GgmlType::kF32;
  }
  switch (type) {
    case GgufType::kF32: return GgmlType::kF32;
    case GgufType::kBF16: return GgmlType::kBF16;
    case GgufType::kQ8_0: return ne[0] % 32 == 0 ? GgmlType::kQ8_0 : GgmlType::kF16;  // QuantError -> F16
    case GgufType::kF16:
    case GgufType::kAuto: break;
  }
  return GgmlType::kF16;
}

namespace {

Result<GgufExportPlan> PlanGgufExportUnguarded(const std::string& path, GgufType type, const std::string& model_name) {
  using R = Result<GgufExportPlan>;
  GgufExportPlan plan;
  // path: the checkpoint directory or one .safetensors file; config and tokenizer sit in `dir`.
  const std::string dir = CheckpointDirOf(path);
  GK_ASSIGN_OR_RETURN(ModelConfig c, LoadModelConfig(path));
  const bool g4 = c.arch == Arch::kGemma4;
  plan.arch = g4 ? "gemma4" : "gemma3";
  if (!g4) GK_RETURN_IF_ERROR(CheckGemma3ForLlamaCpp(c, dir));
  for (int l = 0; l < c.num_layers; ++l) {
    // GGUF has one key length per layer type (key_length, key_length_swa); kv heads may vary.
    if (c.HeadDim(l) != (c.IsFull(l) ? c.global_head_dim : c.head_dim)) {
      return R::Error(StrCat(dir, "/config.json: layer ", l, " has head dim ", c.HeadDim(l), ", other ",
                             c.IsFull(l) ? "full" : "sliding", "-attention layers ",
                             c.IsFull(l) ? c.global_head_dim : c.head_dim,
                             "; a GGUF file has one head dim per layer type"));
    }
  }

  GK_ASSIGN_OR_RETURN(SafetensorsSet set_value, SafetensorsSet::Open(path));
  auto set = std::make_shared<const SafetensorsSet>(std::move(set_value));
  plan.source = set;
  GK_ASSIGN_OR_RETURN(std::string prefix, DetectWeightPrefix(*set, path));
  std::set<std::string> ignored;
  const std::vector<WeightSlot> slots = WeightSlots(c, prefix, nullptr, &ignored);

  // Every checkpoint tensor is one the config calls for, an unused one, or a vision/audio one.
  std::set<std::string> wanted;
  for (const WeightSlot& s : slots) {
    wanted.insert(s.name);
    const TensorInfo* t = set->Find(s.name);
    if (!t) return R::Error(StrCat(dir, ": tensor ", s.name, " is missing (config.json calls for it)"));
    if (t->shape != s.shape) {
      return R::Error(StrCat(dir, ": tensor ", s.name, " has shape ", ShapeStr(t->shape), ", config.json implies ",
                             ShapeStr(s.shape)));
    }
    if (t->dtype == DType::kI8) {
      return R::Error(StrCat(dir, ": tensor ", s.name, " is int8 (a gemmakit quantize checkpoint); export the bf16 or "
                             "f32 checkpoint it came from, with --gguf-type q8_0 for a quantized GGUF"));
    }
    if (t->dtype != DType::kF32 && t->dtype != DType::kBF16 && t->dtype != DType::kF16) {
      return R::Error(StrCat(dir, ": tensor ", s.name, " has dtype ", DTypeName(t->dtype), "; expected F32, BF16 or F16"));
    }
  }
  for (const std::string& n : set->Names()) {
    if (!wanted.count(n) && !ignored.count(n) && !IsSkippedTensor(n) &&
        !(StartsWith(n, prefix) && n.substr(prefix.size()) == "lm_head.weight")) {
      return R::Error(StrCat(dir, ": tensor ", n, " is not part of the architecture config.json describes"));
    }
  }
  if (type == GgufType::kAuto) {
    type = GgufType::kF16;
    for (const WeightSlot& s : slots) {
      if (s.shape.size() < 2) continue;
      const DType dt = set->Find(s.name)->dtype;
      if (dt == DType::kBF16) type = GgufType::kBF16;
      break;
    }
  }
  plan.type = type;

  // ---- tensors ----
  bool any_full = false;
  for (int l = 0; l < c.num_layers; ++l) any_full = any_full || c.IsFull(l);
  if (g4 && any_full) {
    // Gemma4Model.generate_extra_tensors: NeoX RoPE over the full head dim with frequency
    // factors 1 for the rotated pairs and 1e30 (no rotation) for the rest.
    const int64_t half = c.global_head_dim / 2;
    const int64_t rotated = int64_t(float(c.global_head_dim) * c.rope_full.partial_rotary_factor / 2.f);
    GgufTensorSpec t{"rope_freqs.weight", GgmlType::kF32, {half}, nullptr};
    t.fill = [half, rotated](uint8_t* dst, size_t) {
      for (int64_t i = 0; i < half; ++i) {
        const float v = i < rotated ? 1.f : 1e30f;
        std::memcpy(dst + 4 * i, &v, 4);
      }
      return Status::Ok();
    };
    plan.tensors.push_back(std::move(t));
  }
  for (const WeightSlot& s : slots) {
    const std::string hf = s.name.substr(prefix.size());
    const std::string name = GgufTensorName(hf);
    if (name.empty()) return R::Error(StrCat(dir, ": tensor ", s.name, " has no GGUF name (gemmakit bug)"));
    std::vector<int64_t> ne(s.shape.rbegin(), s.shape.rend());
    const GgmlType out = GgufTensorType(name, ne, type);
    const TensorInfo info = *set->Find(s.name);
    const float add = s.add;  // Gemma 3 norms: w - 1 in the checkpoint, w in GGUF
    const int64_t row = ne[0];
    GgufTensorSpec t{name, out, ne, nullptr};
    t.fill = [set, info, out, add, row](uint8_t* dst, size_t) -> Status {
      GK_ASSIGN_OR_RETURN(const uint8_t* src, set->Map(info));
      const size_t es = DTypeSize(info.dtype);
      EncodeRows(out, info.numel() / row, row,
                 [&](int64_t r, float* buf) {
                   WidenToF32(info.dtype, src + size_t(r * row) * es, row, buf);
                   if (add != 0.f) {
                     for (int64_t i = 0; i < row; ++i) buf[i] += add;
                   }
                 },
                 dst);
      return Status::Ok();
    };
    plan.tensors.push_back(std::move(t));
  }

  // ---- metadata ----
  std::vector<GgufKv>& kv = plan.kvs;
  const std::string a = plan.arch + ".";
  kv.push_back({"general.architecture", GgufValue::String(plan.arch)});
  kv.push_back({"general.type", GgufValue::String("model")});
  kv.push_back({"general.name", GgufValue::String(model_name.empty() ? GgufModelName(dir) : model_name)});
  PutU32(&kv, a + "block_count", uint32_t(c.num_layers));
  int64_t n_ctx = c.max_position_embeddings;
  if (n_ctx <= 0) {
    n_ctx = 131072;
    plan.notes.push_back("config.json has no max_position_embeddings: context_length 131072 (the Hugging Face default)");
  }
  PutU32(&kv, a + "context_length", uint32_t(n_ctx));
  PutU32(&kv, a + "embedding_length", uint32_t(c.hidden_size));
  std::vector<int32_t> ff, kv_heads;
  std::vector<bool> swa;
  for (int l = 0; l < c.num_layers; ++l) {
    ff.push_back(c.MlpWidth(l));
    kv_heads.push_back(c.KvHeads(l));
    swa.push_back(!c.IsFull(l));
  }
  PutPerLayer(&kv, a + "feed_forward_length", ff);
  PutU32(&kv, a + "attention.head_count", uint32_t(c.num_heads));
  PutPerLayer(&kv, a + "attention.head_count_kv", kv_heads);
  PutF32(&kv, a + "rope.freq_base", c.rope_full.theta);
  PutF32(&kv, a + "rope.freq_base_swa", c.rope_sliding.theta);
  PutF32(&kv, a + "attention.layer_norm_rms_epsilon", c.rms_norm_eps);
  if (g4 && c.enable_moe_block) {
    PutU32(&kv, a + "expert_count", uint32_t(c.num_experts));
    PutU32(&kv, a + "expert_used_count", uint32_t(c.top_k_experts));
  }
  PutU32(&kv, a + "attention.key_length", uint32_t(c.global_head_dim));
  PutU32(&kv, a + "attention.value_length", uint32_t(c.global_head_dim));
  if (c.final_logit_softcap > 0.f) PutF32(&kv, a + "final_logit_softcapping", c.final_logit_softcap);
  PutU32(&kv, a + "attention.sliding_window", uint32_t(c.sliding_window));
  if (!g4 && c.rope_full.scaling_factor != 1.f) {
    kv.push_back({a + "rope.scaling.type", GgufValue::String("linear")});
    PutF32(&kv, a + "rope.scaling.factor", c.rope_full.scaling_factor);
  }
  if (g4) {
    PutU32(&kv, a + "attention.shared_kv_layers", uint32_t(c.num_kv_shared_layers));
    PutU32(&kv, a + "embedding_length_per_layer_input", uint32_t(c.hidden_size_per_layer_input));
    kv.push_back({a + "attention.sliding_window_pattern", GgufValue::BoolArray(swa)});
    PutU32(&kv, a + "attention.key_length_swa", uint32_t(c.head_dim));
    PutU32(&kv, a + "attention.value_length_swa", uint32_t(c.head_dim));
    if (c.enable_moe_block) PutU32(&kv, a + "expert_feed_forward_length", uint32_t(c.moe_intermediate_size));
    PutU32(&kv, a + "rope.dimension_count", uint32_t(c.global_head_dim));
    PutU32(&kv, a + "rope.dimension_count_swa", uint32_t(float(c.head_dim) * c.rope_sliding.partial_rotary_factor));
  }
  PutU32(&kv, "general.file_type", GgufFileType(type));
  PutU32(&kv, "general.quantization_version", 2);

  // ---- tokenizer ----
  GK_ASSIGN_OR_RETURN(TokenizerFiles files, ReadTokenizerFiles(dir));
  Vocab v;
  if (g4) {
    GK_ASSIGN_OR_RETURN(v, Gemma4Vocab(dir, files, c.vocab_size, &plan.notes));
  } else {
    GK_ASSIGN_OR_RETURN(v, Gemma3Vocab(dir, files, c.vocab_size, &plan.notes));
  }
  kv.push_back({"tokenizer.ggml.model", GgufValue::String(v.model)});
  if (!v.pre.empty()) kv.push_back({"tokenizer.ggml.pre", GgufValue::String(v.pre)});
  kv.push_back({"tokenizer.ggml.tokens", GgufValue::StringArray(std::move(v.tokens))});
  kv.push_back({"tokenizer.ggml.scores", GgufValue::F32Array(v.scores)});
  kv.push_back({"tokenizer.ggml.token_type", GgufValue::I32Array(v.types)});
  if (!v.merges.empty()) kv.push_back({"tokenizer.ggml.merges", GgufValue::StringArray(std::move(v.merges))});
  static const std::map<std::string, std::string> kIdKey = {
      {"bos", "tokenizer.ggml.bos_token_id"}, {"eos", "tokenizer.ggml.eos_token_id"},
      {"unk", "tokenizer.ggml.unknown_token_id"}, {"sep", "tokenizer.ggml.seperator_token_id"},
      {"pad", "tokenizer.ggml.padding_token_id"}, {"mask", "tokenizer.ggml.mask_token_id"}};
  for (const auto& [typ, id] : v.special_ids) PutU32(&kv, kIdKey.at(typ), uint32_t(id));
  for (const auto& [typ, on] : v.add_special) kv.push_back({"tokenizer.ggml.add_" + typ + "_token", GgufValue::Bool(on)});
  if (!v.named_templates.empty()) {
    std::vector<std::string> names;
    for (const auto& [name, text] : v.named_templates) {
      kv.push_back({"tokenizer.chat_template." + name, GgufValue::String(text)});
      names.push_back(name);
    }
    kv.push_back({"tokenizer.chat_templates", GgufValue::StringArray(names)});
  }
  if (!v.chat_template.empty()) kv.push_back({"tokenizer.chat_template", GgufValue::String(v.chat_template)});
  kv.push_back({"tokenizer.ggml.add_space_prefix", GgufValue::Bool(false)});
  return plan;
}

}  // namespace

// The config and tokenizer files are outside input: whatever parsing them throws is an error
// naming them (util/guarded_parse.h).
Result<GgufExportPlan> PlanGgufExport(const std::string& path, GgufType type, const std::string& model_name) {
  return GuardedParse(path, [&] { return PlanGgufExportUnguarded(path, type, model_name); });
}

std::string GgufModelName(const std::string& dir) {
  fs::path p = fs::path(dir).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();
  std::string name = p.filename().string();
  return name.empty() || name == "." ? "model" : name;
}

Status ExportGguf(const std::string& hf_dir, const std::string& out_path, GgufType type) {
  GK_ASSIGN_OR_RETURN(GgufExportPlan plan, PlanGgufExport(hf_dir, type));
  return WriteGguf(out_path, plan.kvs, plan.tensors);
}

}  // namespace gk::bridge
