#include "tools/eval/verilog_problems.h"

#include <algorithm>
#include <filesystem>

#include "util/atomic_file.h"

namespace gk::eval {

namespace fs = std::filesystem;

Result<std::vector<VerilogProblem>> LoadVerilogProblems(const std::string& dir, const std::vector<std::string>& only) {
  std::error_code ec;
  fs::path base = dir;
  if (fs::is_directory(base / "dataset_spec-to-rtl", ec)) base /= "dataset_spec-to-rtl";
  if (!fs::is_directory(base, ec)) {
    return Result<std::vector<VerilogProblem>>::Error(StrCat("--dataset ", dir, ": not a directory"));
  }
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(base, ec)) {
    const std::string file = entry.path().filename().string();
    const std::string suffix = "_prompt.txt";
    if (!file.starts_with("Prob") || !file.ends_with(suffix)) continue;
    const std::string name = file.substr(0, file.size() - suffix.size());
    if (fs::exists(base / (name + "_ref.sv"), ec) && fs::exists(base / (name + "_test.sv"), ec)) names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  if (names.empty()) {
    return Result<std::vector<VerilogProblem>>::Error(
        StrCat("--dataset ", dir, ": no ProbNNN_*_prompt.txt with _ref.sv and _test.sv (point it at a checkout of "
               "NVlabs/verilog-eval or its dataset_spec-to-rtl directory)"));
  }
  std::vector<VerilogProblem> out;
  std::vector<char> used(only.size(), 0);
  for (const std::string& name : names) {
    bool keep = only.empty();
    for (size_t i = 0; i < only.size(); ++i) {
      // "Prob001" selects Prob001_zero; a full name selects itself.
      if (name == only[i] || name.starts_with(only[i] + "_")) {
        keep = true;
        used[i] = 1;
      }
    }
    if (!keep) continue;
    VerilogProblem p;
    p.name = name;
    GK_ASSIGN_OR_RETURN(p.prompt, ReadFile((base / (name + "_prompt.txt")).string()));
    GK_ASSIGN_OR_RETURN(p.ref, ReadFile((base / (name + "_ref.sv")).string()));
    GK_ASSIGN_OR_RETURN(p.test, ReadFile((base / (name + "_test.sv")).string()));
    out.push_back(std::move(p));
  }
  for (size_t i = 0; i < only.size(); ++i) {
    if (!used[i]) return Result<std::vector<VerilogProblem>>::Error(StrCat("--problems: no problem ", only[i], " in ", dir));
  }
  return out;
}

}  // namespace gk::eval
