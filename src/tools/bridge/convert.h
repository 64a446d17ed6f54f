// Checkpoint conversions between Hugging Face safetensors, Tunix-layout Orbax items, PEFT
// adapters and Tunix/Qwix LoRA items (model/tunix_layout.h gives every name, shape and
// transform; all of them move elements only, so every conversion is exact). Each converter
// streams: one array (two for kv_einsum) in memory at a time.
//
// Orbax items carry no config.json: converters from Orbax take the Hugging Face config (and
// tokenizer files) from `config_dir`. A Tunix tree is written with NNX's trailing "value" key
// (layers.0.attn.q_einsum.w.value), as Tunix saves its state; readers accept it with or without.
#pragma once

#include <string>

#include "util/progress.h"
#include "util/result.h"

namespace gk::bridge {

struct ConvertReport {
  int64_t arrays = 0;
  uint64_t bytes = 0;
  std::string layout;  // what was written, for the message ("Tunix Gemma tree", "plain dump", ...)
};

// A Hugging Face checkpoint -> ROOT/<step>/model_params (WriteStep's commit protocol).
// progress (optional, here and in OrbaxToHf) is told the work and each array and file written.
Result<ConvertReport> HfToTunixOrbax(const std::string& hf_dir, const std::string& root, int64_t step,
                                     ConversionProgress* progress = nullptr);
// An Orbax item (or a step directory holding model_params) -> a Hugging Face directory.
// A Gemma Tunix tree needs config_dir (its config.json; tokenizer files are copied along); any
// other tree, or no config_dir, is dumped as is: one safetensors tensor per array, named by
// its tree path.
Result<ConvertReport> OrbaxToHf(const std::string& item_or_step, const std::string& out_dir,
                                const std::string& config_dir, ConversionProgress* progress = nullptr);
// A PEFT adapter -> a Qwix LoRA item (ROOT/<step>/model_params); the base's config_dir gives the shapes.
Result<ConvertReport> PeftToQwixOrbax(const std::string& peft_dir, const std::string& config_dir,
                                      const std::string& root, int64_t step);
// A Qwix LoRA item -> a PEFT adapter (alpha: the Tunix run's; 0 = rank).
Result<ConvertReport> QwixOrbaxToPeft(const std::string& item_or_step, const std::string& config_dir,
                                      const std::string& out_dir, double alpha);

// STEP/model_params when given a step directory, else the directory itself.
std::string OrbaxItemDir(const std::string& item_or_step);

}  // namespace gk::bridge
