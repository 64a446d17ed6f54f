// Weight quantization: at load (`--quantize q8_0`) and as a saved checkpoint (`gemmakit
// quantize`). Q8_0 keeps int8 codes with one f16 scale per block of 32 weights (layout above
// MatrixView in tensor/matrix.h): 1.0625 bytes per weight, so decode, which streams every
// weight once per token, moves about half the bytes of bf16.
//
// Checkpoint form: each quantized tensor NAME keeps its name and shape as I8 codes, beside
// NAME_scale (F16, the same shape with the last dimension divided by 32), and the file's
// __metadata__ has "gemmakit.quantization": "q8_0". Every other tensor is copied unchanged.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "formats/safetensors.h"
#include "model/weights.h"
#include "util/progress.h"
#include "util/result.h"

namespace gk {

enum class QuantType { kNone, kQ8_0 };

// "none" or "q8_0".
Result<QuantType> ParseQuantType(std::string_view name);
std::string_view QuantTypeName(QuantType type);

// Quantizes every matrix whose width is a whole number of blocks of 32 (in Gemma, all of them)
// except the MoE routers, which are tiny and whose top-k choice is sensitive to rounding:
// embedding and tied output head, per-layer projections and tables, experts.
// Every matrix, quantized or kept, moves into one new allocation that becomes w->storage (the
// old storage, or the mmap, is released); matrix_bytes is recomputed. kNone does nothing.
Status QuantizeWeights(ModelWeights* w, QuantType type);

// Writes model_dir quantized to out_dir (a different directory): model.safetensors (sharded
// past 5 GiB) in the checkpoint form above, plus every other file of model_dir (config.json,
// tokenizer files) copied.
Status WriteQuantizedCheckpoint(const std::string& model_dir, const std::string& out_dir, QuantType type,
                                ConversionProgress* progress = nullptr);

// --- Reading the checkpoint form (used by LoadWeights) ---

std::string Q8ScaleName(const std::string& tensor_name);  // NAME + "_scale"
// The scale tensor of an I8 tensor exists with the right shape and dtype (F16 or F32), and
// the matrix width is a whole number of blocks.
Status CheckQ8Tensor(const SafetensorsSet& set, const TensorInfo& codes, const std::string& dir);
// Bytes of memory an I8 tensor of this shape (rows, cols) or (E, rows, cols) takes as Q8_0.
uint64_t Q8TensorBytes(const std::vector<int64_t>& shape);
// Reads the codes and scales of slot x into dst (Q8TensorBytes, 64-byte aligned) and points
// x's matrix (or experts) at it.
Status ReadQ8Tensor(const SafetensorsSet& set, const TensorInfo& codes, const WeightSlot& x, uint8_t* dst);

}  // namespace gk
