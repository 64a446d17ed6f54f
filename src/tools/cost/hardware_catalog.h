// The hardware catalog (data/hardware.toml, compiled in; --catalog FILE overrides): chips with
// their memory, bandwidth and FLOP peaks, and the machine types rented by the hour. `cpu` is
// this machine, measured when asked for (tools/bench/ceilings.h).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "util/result.h"

namespace gk::cost {

struct Chip {
  std::string name, description;
  double memory_gib = 0;
  double memory_bandwidth_gb_s = 0;
  double bf16_tflops = 0;
  double fp8_tflops = 0;  // 0: no fp8 units
  double interconnect_gb_s = 0;
  double collective_latency_us = 0;
  double MemoryBytes() const { return memory_gib * 1073741824.0; }
  double BandwidthBytesPerS() const { return memory_bandwidth_gb_s * 1e9; }
  double InterconnectBytesPerS() const { return interconnect_gb_s * 1e9; }
  double Flops(bool fp8) const { return (fp8 && fp8_tflops > 0 ? fp8_tflops : bf16_tflops) * 1e12; }
};

struct Machine {
  std::string name;
  Chip chip;
  int chips = 1;
  double price_per_hour = 0;  // 0: unknown (cost needs --price)
  bool measured = false;      // `cpu`: figures measured at run time
};

class HardwareCatalog {
 public:
  // Parses catalog TOML; errors name the file (`origin`), the entry and the field.
  static Result<HardwareCatalog> Parse(const std::string& toml_text, const std::string& origin);
  // The compiled-in data/hardware.toml.
  static Result<HardwareCatalog> Default();
  static Result<HardwareCatalog> Load(const std::string& path);  // "" = Default()
  static const char* DefaultText();

  // A machine type, or a chip name as a one-chip machine, or `cpu` (measured now).
  // Unknown names: one error line listing every known name.
  Result<Machine> Find(const std::string& name) const;
  std::vector<std::string> Names() const;  // machines, then chips, then "cpu"
  const std::map<std::string, Chip>& chips() const { return chips_; }
  const std::map<std::string, Machine>& machines() const { return machines_; }

 private:
  static Result<HardwareCatalog> ParseUnguarded(const std::string& toml_text, const std::string& origin);
  std::map<std::string, Chip> chips_;
  std::map<std::string, Machine> machines_;
};

// This machine as a catalog entry: threads, RAM, and measured read bandwidth and FLOP peak
// (bf16 peak when the CPU has AVX-512 BF16, else fp32). Takes a few seconds.
Machine MeasureCpuMachine();

}  // namespace gk::cost
