#include "tools/data/verilog_synth.h"

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <set>
#include <system_error>

#include "tools/data/verilog_design.h"
#include "tools/data/verilog_templates.h"
#include "util/atomic_file.h"

namespace gk::data {

const char kVerilogSftSystem[] =
    "You are a helpful assistant and an expert Verilog RTL designer. Think about the problem first and put your "
    "reasoning inside <think> </think> tags, then give the final answer inside <answer> </answer> tags. The answer "
    "must contain the complete Verilog code in a ```verilog ``` block, with the module named TopModule and exactly the "
    "ports the question lists.";

namespace {

namespace fs = std::filesystem;

const std::vector<Design>& Catalogue() {
  static const std::vector<Design> catalogue = [] {
    std::vector<Design> all = CombinationalDesigns();
    std::vector<Design> seq = SequentialDesigns();
    all.insert(all.end(), std::make_move_iterator(seq.begin()), std::make_move_iterator(seq.end()));
    std::set<std::string> slugs;
    for (const Design& d : all) GK_ASSERT(slugs.insert(d.slug).second);  // a template bug, not bad input
    return all;
  }();
  return catalogue;
}

template <class T>
void Shuffle(std::vector<T>& v, std::mt19937_64& rng) {
  for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[Below(rng, i)]);
}

// The seed's order of the catalogue: each family shuffled, then the families dealt round-robin
// (in a shuffled order) so that every window mixes all families until the small ones run out.
std::vector<size_t> Order(uint64_t seed) {
  const auto& cat = Catalogue();
  std::vector<std::string> families;
  std::vector<std::vector<size_t>> members;
  for (size_t i = 0; i < cat.size(); ++i) {
    auto it = std::find(families.begin(), families.end(), cat[i].family);
    if (it == families.end()) {
      families.push_back(cat[i].family);
      members.emplace_back();
      it = families.end() - 1;
    }
    members[size_t(it - families.begin())].push_back(i);
  }
  std::mt19937_64 rng(seed);
  for (auto& m : members) Shuffle(m, rng);
  std::vector<size_t> family_order(families.size());
  std::iota(family_order.begin(), family_order.end(), size_t(0));
  Shuffle(family_order, rng);
  std::vector<size_t> order;
  order.reserve(cat.size());
  for (size_t round = 0; order.size() < cat.size(); ++round) {
    for (size_t f : family_order) {
      if (round < members[f].size()) order.push_back(members[f][round]);
    }
  }
  return order;
}

// FNV-1a: the testbench's $random seed, fixed per task whatever its position.
uint32_t StimSeed(const std::string& slug) {
  uint32_t h = 2166136261u;
  for (unsigned char c : slug) h = (h ^ c) * 16777619u;
  return h & 0x7fffffffu;
}

std::string ProbNumber(int64_t number) {
  const size_t width = std::max<size_t>(3, std::to_string(VerilogSynthCatalogueSize()).size());
  std::string digits = std::to_string(number);
  return "Prob" + std::string(digits.size() < width ? width - digits.size() : 0, '0') + digits;
}

std::string Strip(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

// The ProbNNN names already in a dataset directory.
Result<std::vector<std::string>> ExistingProblems(const fs::path& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  const std::string suffix = "_prompt.txt";
  for (auto it = fs::directory_iterator(dir, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
    const std::string file = it->path().filename().string();
    if (file.starts_with("Prob") && file.ends_with(suffix))
      names.push_back(file.substr(0, file.size() - suffix.size()));
  }
  if (ec) return Result<std::vector<std::string>>::Error(StrCat("cannot list ", dir.string(), ": ", ec.message()));
  return names;
}

Status MakeDirectory(const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir)) {
    return Status::Error(StrCat("cannot create directory ", dir.string(), ": ",
                                ec ? ec.message() : std::string("a file of that name is in the way")));
  }
  return Status::Ok();
}

}  // namespace

size_t VerilogSynthCatalogueSize() { return Catalogue().size(); }

std::vector<std::pair<std::string, size_t>> VerilogSynthFamilies() {
  std::vector<std::pair<std::string, size_t>> out;
  for (const Design& d : Catalogue()) {
    auto it = std::find_if(out.begin(), out.end(), [&](const auto& f) { return f.first == d.family; });
    if (it == out.end()) it = out.insert(out.end(), {d.family, 0});
    ++it->second;
  }
  return out;
}

Result<std::vector<VerilogTask>> SynthesizeVerilogTasks(const VerilogSynthOptions& o) {
  using R = Result<std::vector<VerilogTask>>;
  const int64_t size = int64_t(VerilogSynthCatalogueSize());
  if (o.n < 1) return R::Error(StrCat("--n ", o.n, ": need at least 1 task"));
  if (o.first < 0) return R::Error(StrCat("--first ", o.first, ": must be 0 or more"));
  if (o.n > size || o.first > size - o.n) {
    return R::Error(StrCat("--first ", o.first, " --n ", o.n, " asks for tasks up to position ", o.first + o.n - 1,
                           ", but the templates make only ", size, " distinct tasks (positions 0..", size - 1, ")"));
  }
  const auto& cat = Catalogue();
  const std::vector<size_t> order = Order(o.seed);
  std::vector<VerilogTask> tasks;
  tasks.reserve(size_t(o.n));
  for (int64_t j = 0; j < o.n; ++j) {
    const Design& d = cat[order[size_t(o.first + j)]];
    VerilogTask t;
    t.name = ProbNumber(o.first + j + 1) + "_" + d.slug;
    t.family = d.family;
    t.prompt = RenderPrompt(d);
    t.ref = RenderRef(d);
    t.test = RenderTestbench(d, StimSeed(d.slug));
    t.think = d.think;
    tasks.push_back(std::move(t));
  }
  return tasks;
}

std::string RenameToTopModule(const std::string& ref) {
  static const std::string kFrom = "module RefModule", kTo = "module TopModule";
  std::string out = ref;
  const size_t pos = out.find(kFrom);
  if (pos != std::string::npos) out.replace(pos, kFrom.size(), kTo);
  return out;
}

std::string VerilogSftRow(const VerilogTask& t) {
  nlohmann::ordered_json row;
  row["system"] = kVerilogSftSystem;
  row["prompt"] = Strip(t.prompt);
  row["response"] =
      "<think>\n" + t.think + "\n</think>\n<answer>\n```verilog\n" + RenameToTopModule(t.ref) + "```\n</answer>";
  return row.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

Status WriteVerilogTasks(const std::vector<VerilogTask>& tasks, const std::string& out_dir) {
  if (tasks.empty()) return Status::Error("no tasks to write");
  const fs::path data = fs::path(out_dir) / "dataset_spec-to-rtl";
  GK_RETURN_IF_ERROR(MakeDirectory(data).Wrap(StrCat("--out ", out_dir)));
  std::set<std::string> names;
  for (const VerilogTask& t : tasks) names.insert(t.name);
  GK_ASSIGN_OR_RETURN(std::vector<std::string> existing, ExistingProblems(data));
  for (const std::string& name : existing) {
    if (!names.count(name)) {
      return Status::Error(StrCat("--out ", out_dir, ": ", data.string(), " already holds ", name,
                                  ", which is not one of the tasks being written; a reader of the directory would mix "
                                  "the two sets. Use a new or empty --out directory"));
    }
  }
  std::string problems, sft;
  for (const VerilogTask& t : tasks) {
    const std::string base = (data / t.name).string();
    GK_RETURN_IF_ERROR(WriteFileAtomic(base + "_prompt.txt", t.prompt));
    GK_RETURN_IF_ERROR(WriteFileAtomic(base + "_ref.sv", t.ref));
    GK_RETURN_IF_ERROR(WriteFileAtomic(base + "_test.sv", t.test));
    problems += t.name + "\n";
    sft += VerilogSftRow(t) + "\n";
  }
  GK_RETURN_IF_ERROR(WriteFileAtomic((data / "problems.txt").string(), problems));
  return WriteFileAtomic((fs::path(out_dir) / "sft.jsonl").string(), sft);
}

}  // namespace gk::data
