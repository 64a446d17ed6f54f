// The files of a Hugging Face checkpoint besides its tensors (config.json, tokenizer,
// generation_config.json, chat template...), copied along when a converter writes a new one.
#pragma once

#include <string>

#include "util/result.h"

namespace gk {

// from: a checkpoint directory (every regular file that is not a .safetensors, and the shard
// index only when keep_index: the output is sharded like the input) or one .safetensors file
// (then only the known config and tokenizer names beside it: its directory may hold anything).
Status CopyCheckpointSideFiles(const std::string& from, const std::string& to_dir, bool keep_index);

}  // namespace gk
