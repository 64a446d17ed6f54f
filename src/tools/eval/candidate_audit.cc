#include "tools/eval/candidate_audit.h"


#include "util/result.h"

namespace gk::eval {

namespace {

// Pure system tasks and functions: output to the terminal, arithmetic, sizes, time, strings.
// Printing is safe because the harness tags the testbench's result line with a nonce.
constexpr std::string_view kAllowed[] = {
    "$display", "$displayb", "$displayh", "$displayo", "$write", "$writeb", "$writeh", "$writeo",
    "$strobe", "$strobeb", "$strobeh", "$strobeo", "$monitor", "$monitorb", "$monitorh", "$monitoro",
    "$info", "$warning", "$error",
    "$time", "$stime", "$realtime",
    "$signed", "$unsigned", "$clog2", "$bits", "$size", "$left", "$right", "$low", "$high",
    "$increment", "$dimensions", "$unpacked_dimensions", "$countones", "$countbits", "$onehot",
    "$onehot0", "$isunknown",
    "$rtoi", "$itor", "$realtobits", "$bitstoreal", "$shortrealtobits", "$bitstoshortreal",
    "$ln", "$log10", "$exp", "$sqrt", "$pow", "$floor", "$ceil", "$sin", "$cos", "$tan", "$asin",
    "$acos", "$atan", "$atan2", "$hypot", "$sinh", "$cosh", "$tanh", "$asinh", "$acosh", "$atanh",
    "$sformat", "$sformatf", "$swrite", "$swriteb", "$swriteh", "$swriteo",
};

// iverilog's own helpers behind SystemVerilog methods (s.next(), str.len(), q.size(), ...).
constexpr std::string_view kAllowedPrefixes[] = {
    "$ivl_enum_method$", "$ivl_string_method$", "$ivl_darray_method$", "$ivl_queue_method$", "$ivl_method$"};

std::string Why(std::string_view name) {
  for (std::string_view end : {"$finish", "$stop", "$fatal", "$exit"}) {
    if (name == end) return "ends the simulation";
  }
  if (name.starts_with("$random") || name.starts_with("$urandom") || name.starts_with("$dist_")) {
    return "draws from the random sequence the testbench's stimulus uses";
  }
  if (name.starts_with("$f") || name.starts_with("$readmem") || name.starts_with("$writemem") ||
      name.starts_with("$sreadmem") || name.starts_with("$dump")) {
    return "touches files";
  }
  return "is not a system task or function a design may call";
}

std::string Place(const VvpLocated& at) {
  if (!at.file.empty() && at.line > 0) return StrCat(at.file, ":", at.line, ": ");
  if (!at.scope.empty()) return StrCat("in ", at.scope, ": ");
  return "";
}

}  // namespace

bool SystemCallAllowed(std::string_view name) {
  for (std::string_view a : kAllowed) {
    if (name == a) return true;
  }
  for (std::string_view p : kAllowedPrefixes) {
    if (name.starts_with(p)) return true;
  }
  return false;
}

std::string AuditCandidate(const VvpDesign& d) {
  for (const VvpLocated& call : d.system_calls) {
    if (!SystemCallAllowed(call.what)) return StrCat(Place(call), call.what, " ", Why(call.what));
  }
  for (const VvpLocated& f : d.forces) {
    return StrCat(Place(f), "force/release overrides nets the module shares with the testbench");
  }
  for (const VvpLocated& island : d.switch_islands) {
    return StrCat(Place(island), "a bidirectional switch (tran, rtran, tranif0/1, rtranif0/1) can drive its input ports");
  }
  for (const VvpLocated& v : d.unit_variables) {
    return StrCat("'", v.what, "' is declared outside any module, where the testbench can see it");
  }
  return "";
}

}  // namespace gk::eval
