#include "tools/cost/hardware_catalog.h"

#include <unistd.h>

#include <toml++/toml.h>

#include "tensor/thread_pool.h"
#include "tools/bench/ceilings.h"
#include "tools/cost/hardware_catalog_data.h"
#include "util/atomic_file.h"
#include "util/guarded_parse.h"
#include "util/parse_toml.h"

namespace gk::cost {
namespace {

Status ReadNumber(const toml::table& t, const std::string& where, const char* key, bool required, double* out) {
  const toml::node* n = t.get(key);
  if (!n) return required ? Status::Error(StrCat(where, ": missing field '", key, "'")) : Status::Ok();
  if (auto v = n->value<double>()) {
    if (*v < 0) return Status::Error(StrCat(where, ".", key, ": must be >= 0, got ", *v));
    *out = *v;
    return Status::Ok();
  }
  return Status::Error(StrCat(where, ".", key, ": expected a number"));
}

Result<Chip> ParseChip(const std::string& name, const toml::table& t, const std::string& where) {
  Chip c;
  c.name = name;
  c.description = t["description"].value_or(name);
  GK_RETURN_IF_ERROR(ReadNumber(t, where, "memory_gib", true, &c.memory_gib));
  GK_RETURN_IF_ERROR(ReadNumber(t, where, "memory_bandwidth_gb_s", true, &c.memory_bandwidth_gb_s));
  GK_RETURN_IF_ERROR(ReadNumber(t, where, "bf16_tflops", true, &c.bf16_tflops));
  GK_RETURN_IF_ERROR(ReadNumber(t, where, "fp8_tflops", false, &c.fp8_tflops));
  GK_RETURN_IF_ERROR(ReadNumber(t, where, "interconnect_gb_s", false, &c.interconnect_gb_s));
  GK_RETURN_IF_ERROR(ReadNumber(t, where, "collective_latency_us", false, &c.collective_latency_us));
  if (c.memory_gib <= 0 || c.memory_bandwidth_gb_s <= 0 || c.bf16_tflops <= 0) {
    return Status::Error(StrCat(where, ": memory_gib, memory_bandwidth_gb_s and bf16_tflops must be > 0"));
  }
  return c;
}

}  // namespace

const char* HardwareCatalog::DefaultText() { return kDefaultHardwareToml; }

// A catalog given with --catalog is outside input: whatever parsing it throws is an error
// (util/guarded_parse.h).
Result<HardwareCatalog> HardwareCatalog::Parse(const std::string& text, const std::string& origin) {
  return GuardedParse(origin, [&] { return ParseUnguarded(text, origin); });
}

Result<HardwareCatalog> HardwareCatalog::ParseUnguarded(const std::string& text, const std::string& origin) {
  GK_ASSIGN_OR_RETURN(toml::table root, ParseToml(text, origin));
  HardwareCatalog cat;
  const toml::table* chips = root["chips"].as_table();
  if (!chips || chips->empty()) return Status::Error(StrCat(origin, ": no [chips.NAME] tables"));
  for (const auto& [k, v] : *chips) {
    const std::string name(k.str());
    const toml::table* t = v.as_table();
    const std::string where = StrCat(origin, ": chips.", name);
    if (!t) return Status::Error(StrCat(where, ": expected a table"));
    if (name == "cpu") return Status::Error(StrCat(where, ": the name 'cpu' is reserved for this machine"));
    GK_ASSIGN_OR_RETURN(cat.chips_[name], ParseChip(name, *t, where));
  }
  if (const toml::table* machines = root["machines"].as_table()) {
    for (const auto& [k, v] : *machines) {
      const std::string name(k.str());
      const toml::table* t = v.as_table();
      const std::string where = StrCat(origin, ": machines.", name);
      if (!t) return Status::Error(StrCat(where, ": expected a table"));
      if (name == "cpu") return Status::Error(StrCat(where, ": the name 'cpu' is reserved for this machine"));
      if (cat.chips_.count(name)) return Status::Error(StrCat(where, ": a chip has the same name"));
      Machine m;
      m.name = name;
      const std::string chip = (*t)["chip"].value_or(std::string());
      auto it = cat.chips_.find(chip);
      if (it == cat.chips_.end()) return Status::Error(StrCat(where, ".chip: '", chip, "' is not a [chips.NAME] entry"));
      m.chip = it->second;
      const auto chips_n = (*t)["chips"].value<int64_t>();
      if (!chips_n || *chips_n < 1) return Status::Error(StrCat(where, ".chips: expected an integer >= 1"));
      m.chips = int(*chips_n);
      GK_RETURN_IF_ERROR(ReadNumber(*t, where, "price_per_hour", true, &m.price_per_hour));
      cat.machines_[name] = m;
    }
  }
  return cat;
}

Result<HardwareCatalog> HardwareCatalog::Default() { return Parse(kDefaultHardwareToml, "built-in hardware.toml"); }

Result<HardwareCatalog> HardwareCatalog::Load(const std::string& path) {
  if (path.empty()) return Default();
  Result<std::string> text = ReadFile(path);
  if (!text.ok()) return Status::Error(StrCat("--catalog: ", text.message()));
  return Parse(*text, path);
}

std::vector<std::string> HardwareCatalog::Names() const {
  std::vector<std::string> names;
  for (const auto& [n, m] : machines_) names.push_back(n);
  for (const auto& [n, c] : chips_) names.push_back(n);
  names.push_back("cpu");
  return names;
}

Result<Machine> HardwareCatalog::Find(const std::string& name) const {
  if (auto it = machines_.find(name); it != machines_.end()) return it->second;
  if (auto it = chips_.find(name); it != chips_.end()) {
    Machine m;
    m.name = name;
    m.chip = it->second;
    return m;
  }
  if (name == "cpu") return MeasureCpuMachine();
  std::string known;
  for (const std::string& n : Names()) known += (known.empty() ? "" : ", ") + n;
  return Status::Error(StrCat("unknown hardware '", name, "' (known: ", known, ")"));
}

Machine MeasureCpuMachine() {
  ThreadPool pool(0);
  const Ceilings c = MeasureCeilings(pool, 1ull << 28, 3);
  Machine m;
  m.name = "cpu";
  m.measured = true;
  m.chip.name = "cpu";
  m.chip.description = StrCat("this machine, measured now (", pool.size(), " threads)");
  const double ram = double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGESIZE));
  m.chip.memory_gib = ram / 1073741824.0;
  m.chip.memory_bandwidth_gb_s = c.read_gbps;
  m.chip.bf16_tflops = (c.bf16_gflops > 0 ? c.bf16_gflops : c.fp32_gflops) / 1e3;
  return m;
}

}  // namespace gk::cost
