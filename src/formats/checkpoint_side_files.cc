#include "formats/checkpoint_side_files.h"

#include <filesystem>
#include <set>

namespace gk {

namespace fs = std::filesystem;

Status CopyCheckpointSideFiles(const std::string& from, const std::string& to_dir, bool keep_index) {
  static const std::set<std::string> kKnown = {
      "config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json", "tokenizer.model",
      "special_tokens_map.json", "chat_template.jinja", "chat_template.json", "preprocessor_config.json",
      "processor_config.json"};
  std::error_code ec;
  const bool one_file = fs::is_regular_file(from, ec);
  fs::path dir = one_file ? fs::path(from).parent_path() : fs::path(from);
  if (dir.empty()) dir = ".";
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (!e.is_regular_file() || e.path().extension() == ".safetensors") continue;
    if (name == "model.safetensors.index.json" && !keep_index) continue;
    if (one_file && !kKnown.count(name)) continue;
    std::error_code cec;
    fs::copy_file(e.path(), fs::path(to_dir) / name, fs::copy_options::overwrite_existing, cec);
    if (cec) return Status::Error(StrCat("copying ", e.path().string(), ": ", cec.message()));
  }
  if (ec) return Status::Error(StrCat("listing ", dir.string(), ": ", ec.message()));
  return Status::Ok();
}

}  // namespace gk
