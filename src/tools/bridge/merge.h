// `gemmakit merge`: W += scaling · B·A for every module of a LoRA, into a copy of a Hugging Face
// checkpoint. The product and the sum are float32 and the result is rounded once to the base
// tensor's dtype (bf16: round to nearest even), as PEFT's merge_and_unload and the reference
// case's orbax_to_peft.py do. Streaming: output shard files mirror the input's (same tensors in
// the same files and order, the index file copied), each tensor is read, merged in blocks of
// rows and written before the next one is read, so peak memory is about the largest tensor,
// not the model. The output directory appears atomically (written as OUT.tmp-<pid>, then
// renamed); config, tokenizer and other files are copied.
#pragma once

#include <cstdint>
#include <string>

#include "model/lora_source.h"
#include "util/progress.h"
#include "util/result.h"

namespace gk::bridge {

struct MergeReport {
  int64_t tensors = 0, merged_tensors = 0, files = 0;
  uint64_t bytes_written = 0;
  double seconds = 0;
  uint64_t peak_rss_bytes = 0;
  uint64_t largest_tensor_bytes = 0;
};

// Errors: a module of the adapter with no base tensor (or a shape mismatch), an existing
// out_dir (not overwritten), unreadable input.
// progress, when given, is told the work and each tensor and file as they are written.
Result<MergeReport> MergeLora(const std::string& base_dir, const LoraSource& lora, const std::string& out_dir,
                              ConversionProgress* progress = nullptr);

}  // namespace gk::bridge
