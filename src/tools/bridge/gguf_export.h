// `gemmakit convert --from hf --to gguf`: a Hugging Face Gemma 4 or Gemma 3 checkpoint as one
// GGUF file that llama.cpp and Ollama load, written the way llama.cpp's own converter
// (convert_hf_to_gguf.py, classes Gemma4Model and Gemma3Model) writes it: the same tensor
// names, shapes, element types, metadata keys and tokenizer fields. docs/BRIDGE.md "## GGUF"
// lists the mapping, its sources and the choices that are ours.
//
// Summary of the mapping:
//   * architecture "gemma4" or "gemma3"; tensors blk.N.attn_q.weight, ... (llama.cpp names);
//     GGUF dimensions are the PyTorch shape reversed (ne[0] innermost).
//   * Gemma 3 norms are stored as w - 1 in the checkpoint: 1 is added (as the converter does);
//     Gemma 4 norms are x·w and are copied. Gemma 4 gets rope_freqs.weight, the per-pair
//     frequency factors (1 for rotated pairs, 1e30 for the rest) that make llama.cpp's NeoX
//     RoPE do the partial "proportional" RoPE of the full-attention layers. K=V layers simply
//     have no attn_v (llama.cpp then uses the K projection as V).
//   * Element types: 1-D tensors, norms, names not ending in ".weight" and the MoE router stay
//     F32; every other tensor (token embedding included) takes the requested type; Q8_0 falls
//     back to F16 for a row length that is not a multiple of 32.
//   * Tokenizer: Gemma 4 as tokenizer.ggml.model "gemma4" (BPE: tokens, merges, token types),
//     Gemma 3 as "llama" (SentencePiece: tokens, scores, token types; from tokenizer.model
//     when the directory has one, else derived from tokenizer.json), special token ids,
//     add_bos_token, and the chat template.
// Streaming: each tensor is converted from a read-only mmap of the safetensors when the
// writer reaches it, so memory holds one output tensor; the file appears atomically.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "formats/gguf.h"
#include "formats/safetensors.h"
#include "util/result.h"

namespace gk::bridge {

// kAuto picks what the converter's --outtype auto picks: the dtype of the checkpoint's first
// matrix when it is bf16 or f16, else f16.
enum class GgufType { kAuto, kF32, kBF16, kF16, kQ8_0 };
Result<GgufType> ParseGgufType(std::string_view name);  // auto, f32, bf16, f16, q8_0
std::string_view GgufTypeName(GgufType t);
// general.file_type (llama.h llama_ftype): ALL_F32 0, MOSTLY_F16 1, MOSTLY_Q8_0 7, MOSTLY_BF16 32.
uint32_t GgufFileType(GgufType t);

// Everything an export will write, worked out before any tensor data is read.
struct GgufExportPlan {
  std::string arch;  // "gemma4" or "gemma3"
  GgufType type = GgufType::kAuto;  // resolved: never kAuto
  std::vector<GgufKv> kvs;
  std::vector<GgufTensorSpec> tensors;  // fill functions read the checkpoint
  std::vector<std::string> notes;       // adjustments worth telling the user, one line each
  std::shared_ptr<const SafetensorsSet> source;  // what the fill functions read from
};

// Reads config.json, the safetensors directory and the tokenizer files of hf_dir (tokenizer.json
// required; tokenizer_config.json, tokenizer.model, added_tokens.json, chat_template.jinja /
// chat_template.json optional). Errors name the file or tensor: an unsupported architecture, a
// missing, unexpected or mis-shaped tensor, a quantized (I8) checkpoint, or a Gemma 3 config
// that llama.cpp would run differently (its sliding-window pattern and attention scale are
// fixed in llama.cpp, not read from the file). hf_dir may also be one .safetensors file (config
// and tokenizer beside it). general.name is model_name, or else the directory's name.
Result<GgufExportPlan> PlanGgufExport(const std::string& hf_dir, GgufType type, const std::string& model_name = "");

// general.name of an export from a checkpoint directory: the directory's name ("model" if none).
std::string GgufModelName(const std::string& dir);

// PlanGgufExport, then WriteGguf to out_path.
Status ExportGguf(const std::string& hf_dir, const std::string& out_path, GgufType type);

// Parts of the plan, public for tests.
// The GGUF name of a checkpoint tensor (its name without the model prefix, e.g.
// "layers.3.self_attn.q_proj.weight" -> "blk.3.attn_q.weight"); empty when it has none.
std::string GgufTensorName(const std::string& hf_name);
// The element type the converter gives a tensor of this GGUF name and shape (ne order).
GgmlType GgufTensorType(const std::string& gguf_name, const std::vector<int64_t>& ne, GgufType type);

}  // namespace gk::bridge
