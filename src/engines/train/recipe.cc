#include "engines/train/recipe.h"

#include <algorithm>
#include <charconv>
#include <climits>
#include <cmath>
#include <filesystem>
#include <limits>
#include <regex>
#include <string_view>
#include <variant>

#include <toml++/toml.h>

#include "model/train/lora.h"
#include "util/atomic_file.h"
#include "util/guarded_parse.h"
#include "util/parse_toml.h"

namespace gk::train {

namespace {

// Every recipe key, by its TOML path, and the field it sets. One table drives parsing,
// --set, ToJson and the "did you mean" suggestions, so they cannot disagree.
using Member = std::variant<std::string TrainRecipe::*, int64_t TrainRecipe::*, int TrainRecipe::*,
                            uint64_t TrainRecipe::*, double TrainRecipe::*, bool TrainRecipe::*>;

struct Field {
  std::string_view path;  // "model", "lora.rank", ...
  Member member;
};

// The data path is "data.path": TOML cannot hold both a top-level `data = "..."` and a [data]
// table. A top-level string `data` and `--set data=...` are accepted as its shorthand.
const Field kFields[] = {
    {"model", &TrainRecipe::model},
    {"out", &TrainRecipe::out},
    {"seed", &TrainRecipe::seed},
    {"data.path", &TrainRecipe::data},
    {"data.max_seq_len", &TrainRecipe::max_seq_len},
    {"data.loss", &TrainRecipe::loss},
    {"data.max_rows", &TrainRecipe::max_rows},
    {"data.shuffle", &TrainRecipe::shuffle},
    {"data.batching", &TrainRecipe::batching},
    {"data.chat_template", &TrainRecipe::chat_template},
    {"lora.rank", &TrainRecipe::rank},
    {"lora.alpha", &TrainRecipe::alpha},
    {"lora.dropout", &TrainRecipe::dropout},
    {"lora.use_rslora", &TrainRecipe::use_rslora},
    {"lora.target_modules", &TrainRecipe::target_modules},
    {"lora.full_finetune", &TrainRecipe::full_finetune},
    {"lora.init_adapter", &TrainRecipe::init_adapter},
    {"optim.learning_rate", &TrainRecipe::learning_rate},
    {"optim.warmup_steps", &TrainRecipe::warmup_steps},
    {"optim.end_learning_rate", &TrainRecipe::end_learning_rate},
    {"optim.weight_decay", &TrainRecipe::weight_decay},
    {"optim.beta1", &TrainRecipe::beta1},
    {"optim.beta2", &TrainRecipe::beta2},
    {"optim.eps", &TrainRecipe::eps},
    {"optim.max_grad_norm", &TrainRecipe::max_grad_norm},
    {"batch.micro_batch", &TrainRecipe::micro_batch},
    {"batch.grad_accum", &TrainRecipe::grad_accum},
    {"batch.epochs", &TrainRecipe::epochs},
    {"batch.max_steps", &TrainRecipe::max_steps},
    {"train.precision", &TrainRecipe::precision},
    {"memory.remat", &TrainRecipe::remat},
    {"memory.max_bytes", &TrainRecipe::max_bytes},
    {"checkpoint.save_every", &TrainRecipe::save_every},
    {"checkpoint.keep_last", &TrainRecipe::keep_last},
    {"log.log_every", &TrainRecipe::log_every},
};

const std::string_view kTables[] = {"data", "lora", "optim", "batch", "train", "memory", "checkpoint", "log"};

const Field* FindField(std::string_view path) {
  if (path == "data") path = "data.path";
  for (const Field& f : kFields) {
    if (f.path == path) return &f;
  }
  return nullptr;
}

bool IsTable(std::string_view name) {
  return std::find(std::begin(kTables), std::end(kTables), name) != std::end(kTables);
}

size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

std::string_view LastSegment(std::string_view path) {
  const size_t dot = path.rfind('.');
  return dot == std::string_view::npos ? path : path.substr(dot + 1);
}

// "lr" for "learning_rate": the first letters of the words.
std::string Initials(std::string_view name) {
  std::string out;
  for (size_t i = 0; i < name.size(); ++i) {
    if (i == 0 || name[i - 1] == '_') out += name[i];
  }
  return out;
}

// The known key nearest to `key`; a key in the wrong table ("rank" for "lora.rank") or an
// abbreviation ("optim.lr") counts as one edit away.
std::string ClosestKey(std::string_view key) {
  std::string_view best;
  size_t best_d = SIZE_MAX;
  auto consider = [&](std::string_view cand) {
    const std::string_view last = LastSegment(cand);
    size_t d = std::min(EditDistance(key, cand), EditDistance(LastSegment(key), last) + 1);
    if (last.find('_') != std::string_view::npos && LastSegment(key) == Initials(last)) d = std::min<size_t>(d, 1);
    if (d < best_d) best_d = d, best = cand;
  };
  for (const Field& f : kFields) consider(f.path);
  for (std::string_view t : kTables) consider(t);
  return std::string(best);
}

std::string UnknownKey(std::string_view key) {
  return StrCat("unknown key \"", key, "\" (did you mean \"", ClosestKey(key), "\"?)");
}

// Invalid UTF-8 (a --set value) is written as U+FFFD rather than making dump() throw.
std::string Quoted(std::string_view s) {
  return nlohmann::json(std::string(s)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// How a value looked in the TOML, for "expected ..., got ..." messages.
std::string Describe(const toml::node& n) {
  if (const auto* s = n.as_string()) return Quoted(s->get());
  if (const auto* i = n.as_integer()) return std::to_string(i->get());
  if (const auto* f = n.as_floating_point()) return StrCat(f->get());
  if (const auto* b = n.as_boolean()) return b->get() ? "true" : "false";
  if (n.is_array()) return "an array";
  if (n.is_table()) return "a table";
  return "a date/time";
}

std::string Where(const toml::source_region& r) {
  std::string file = r.path ? *r.path : std::string("<recipe>");
  return StrCat(file, ":", r.begin.line, ":", r.begin.column);
}

const char* Expected(const Member& m) {
  switch (m.index()) {
    case 0: return "a string";
    case 1: case 2: return "an integer";
    case 3: return "a non-negative integer";
    case 4: return "a number";
    default: return "true or false";
  }
}

// Sets one field from a TOML value; the error (without location) names the key.
Status SetFromNode(TrainRecipe& r, const Field& f, const toml::node& n) {
  const std::string bad = StrCat(f.path, ": expected ", Expected(f.member), ", got ", Describe(n));
  return std::visit(
      [&](auto member) -> Status {
        using T = std::remove_reference_t<decltype(r.*member)>;
        if constexpr (std::is_same_v<T, std::string>) {
          if (!n.is_string()) return Status::Error(bad);
          r.*member = n.as_string()->get();
        } else if constexpr (std::is_same_v<T, bool>) {
          if (!n.is_boolean()) return Status::Error(bad);
          r.*member = n.as_boolean()->get();
        } else if constexpr (std::is_same_v<T, double>) {
          // An integer where a float is expected is fine: learning_rate = 1.
          if (const auto* i = n.as_integer()) {
            r.*member = double(i->get());
          } else if (const auto* d = n.as_floating_point()) {
            r.*member = d->get();
          } else {
            return Status::Error(bad);
          }
        } else {
          if (!n.is_integer()) return Status::Error(bad);
          const int64_t v = n.as_integer()->get();
          if constexpr (std::is_same_v<T, uint64_t>) {
            if (v < 0) return Status::Error(bad);
            r.*member = uint64_t(v);
          } else if constexpr (std::is_same_v<T, int>) {
            if (v < INT_MIN || v > INT_MAX) return Status::Error(StrCat(f.path, ": ", v, " is out of range"));
            r.*member = int(v);
          } else {
            r.*member = v;
          }
        }
        return Status::Ok();
      },
      f.member);
}

template <class T>
bool ParseWhole(std::string_view s, T& out) {
  const char* end = s.data() + s.size();
  const auto [ptr, ec] = std::from_chars(s.data(), end, out);
  return ec == std::errc() && ptr == end;
}

// Sets one field from a --set value, parsed by the field's type.
Status SetFromString(TrainRecipe& r, const Field& f, std::string_view value) {
  const std::string bad = StrCat(f.path, ": expected ", Expected(f.member), ", got ", Quoted(value));
  return std::visit(
      [&](auto member) -> Status {
        using T = std::remove_reference_t<decltype(r.*member)>;
        if constexpr (std::is_same_v<T, std::string>) {
          r.*member = std::string(value);
        } else if constexpr (std::is_same_v<T, bool>) {
          if (value == "true") {
            r.*member = true;
          } else if (value == "false") {
            r.*member = false;
          } else {
            return Status::Error(bad);
          }
        } else {
          T v{};
          if (!ParseWhole(value, v)) return Status::Error(bad);
          r.*member = v;
        }
        return Status::Ok();
      },
      f.member);
}

Status ParseTable(TrainRecipe& r, const toml::table& root) {
  for (const auto& [key, node] : root) {
    const std::string_view name = key.str();
    if (name == "data" && node.is_string()) {  // shorthand for data.path
      GK_RETURN_IF_ERROR(SetFromNode(r, *FindField("data.path"), node).Wrap(Where(node.source())));
      continue;
    }
    if (IsTable(name)) {
      const toml::table* t = node.as_table();
      if (t == nullptr) {
        return Status::Error(StrCat(Where(node.source()), ": ", name, ": expected a table ([", name, "]), got ",
                                    Describe(node)));
      }
      for (const auto& [sub_key, sub_node] : *t) {
        const std::string path = StrCat(name, ".", sub_key.str());
        const Field* f = FindField(path);
        if (f == nullptr) return Status::Error(StrCat(Where(sub_key.source()), ": ", UnknownKey(path)));
        GK_RETURN_IF_ERROR(SetFromNode(r, *f, sub_node).Wrap(Where(sub_node.source())));
      }
      continue;
    }
    const Field* f = FindField(name);
    if (f == nullptr) return Status::Error(StrCat(Where(key.source()), ": ", UnknownKey(name)));
    GK_RETURN_IF_ERROR(SetFromNode(r, *f, node).Wrap(Where(node.source())));
  }
  return Status::Ok();
}

// data.chat_template names a file (as ChatFormat reads a path: a '/' or a .jinja/.j2 name) or one
// of the checkpoint's named templates; "" when it does, else what is wrong. The template's own
// text pasted in is the likely mistake.
std::string ChatTemplateProblem(const std::string& t) {
  if (t.find("{{") != std::string::npos || t.find("{%") != std::string::npos || t.find('\n') != std::string::npos) {
    return "data.chat_template: give the template's file (or the name of one of the checkpoint's templates), "
           "not its text";
  }
  const bool path = t.find('/') != std::string::npos || t.ends_with(".jinja") || t.ends_with(".j2");
  std::error_code ec;
  if (path && !std::filesystem::is_regular_file(t, ec)) return StrCat("data.chat_template: no such file ", Quoted(t));
  return "";
}

}  // namespace

nlohmann::json TrainRecipe::ToJson() const {
  nlohmann::json j = nlohmann::json::object();
  for (const Field& f : kFields) {
    nlohmann::json value = std::visit([&](auto member) { return nlohmann::json(this->*member); }, f.member);
    const size_t dot = f.path.find('.');
    if (dot == std::string_view::npos) {
      j[std::string(f.path)] = std::move(value);
    } else {
      j[std::string(f.path.substr(0, dot))][std::string(f.path.substr(dot + 1))] = std::move(value);
    }
  }
  return j;
}

// A recipe is outside input: whatever parsing it throws is an error naming it (util/guarded_parse.h).
Result<TrainRecipe> ParseRecipe(const std::string& toml_text, const std::string& source) {
  return GuardedParse(source, [&]() -> Result<TrainRecipe> {
    GK_ASSIGN_OR_RETURN(toml::table root, ParseToml(toml_text, source));
    TrainRecipe r;
    GK_RETURN_IF_ERROR(ParseTable(r, root));
    return r;
  });
}

Result<TrainRecipe> LoadRecipe(const std::string& path) {
  Result<std::string> text = ReadFile(path);
  if (!text.ok()) return Result<TrainRecipe>::Error(StrCat("recipe: ", text.message()));
  return ParseRecipe(*text, path);
}

Status ApplyOverrides(TrainRecipe& recipe, const std::vector<std::string>& overrides) {
  TrainRecipe r = recipe;  // all or nothing: a failed --set leaves the recipe as it was
  for (const std::string& o : overrides) {
    const size_t eq = o.find('=');
    if (eq == std::string::npos || eq == 0) {
      return Status::Error(StrCat("--set ", Quoted(o), ": expected key=value (e.g. lora.rank=8)"));
    }
    const std::string_view key = std::string_view(o).substr(0, eq);
    const Field* f = FindField(key);
    if (f == nullptr) return Status::Error(StrCat("--set ", o, ": ", UnknownKey(key)));
    GK_RETURN_IF_ERROR(SetFromString(r, *f, std::string_view(o).substr(eq + 1)).Wrap("--set " + o));
  }
  recipe = std::move(r);
  return Status::Ok();
}

Status ValidateRecipe(const TrainRecipe& r) {
  std::vector<std::string> errors;
  // Written as !(ok) so that NaN fails every range.
  auto check = [&](bool ok, std::string message) {
    if (!ok) errors.push_back(std::move(message));
  };
  check(!r.model.empty(), "model: the base checkpoint directory is not set");
  check(!r.data.empty(), "data.path: the training data is not set");
  check(!r.out.empty(), "out: the run directory is not set");
  check(r.max_seq_len >= 2, StrCat("data.max_seq_len must be >= 2, got ", r.max_seq_len));
  check(r.loss == "assistant" || r.loss == "all",
        StrCat("data.loss must be \"assistant\" or \"all\", got ", Quoted(r.loss)));
  check(r.max_rows == -1 || r.max_rows >= 1, StrCat("data.max_rows must be -1 (all) or >= 1, got ", r.max_rows));
  check(r.precision == "bf16" || r.precision == "f32",
        StrCat("train.precision must be \"bf16\" or \"f32\", got ", Quoted(r.precision)));
  check(r.batching == "padded" || r.batching == "packed",
        StrCat("data.batching must be \"padded\" or \"packed\", got ", Quoted(r.batching)));
  if (std::string problem = ChatTemplateProblem(r.chat_template); !problem.empty()) errors.push_back(problem);
  check(r.rank >= 1, StrCat("lora.rank must be >= 1, got ", r.rank));
  check(r.alpha > 0, StrCat("lora.alpha must be > 0, got ", r.alpha));
  check(r.dropout >= 0 && r.dropout < 1, StrCat("lora.dropout must be in [0, 1), got ", r.dropout));
  if (!r.full_finetune && r.target_modules.empty()) {
    errors.push_back("lora.target_modules is empty: no module would get an adapter");
  }
  if (r.target_modules.size() > kMaxTargetRegexBytes) {
    errors.push_back(StrCat("lora.target_modules is ", r.target_modules.size(), " bytes, over the limit of ",
                            kMaxTargetRegexBytes));
  } else {
    try {
      std::regex re(r.target_modules, std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
      errors.push_back(StrCat("lora.target_modules: not a valid ECMAScript regex (", e.what(), "): ",
                              Quoted(r.target_modules)));
    }
  }
  check(r.learning_rate > 0 && std::isfinite(r.learning_rate),
        StrCat("optim.learning_rate must be > 0, got ", r.learning_rate));
  check(r.warmup_steps >= 0, StrCat("optim.warmup_steps must be >= 0, got ", r.warmup_steps));
  check(r.end_learning_rate >= 0 && std::isfinite(r.end_learning_rate),
        StrCat("optim.end_learning_rate must be >= 0, got ", r.end_learning_rate));
  check(r.weight_decay >= 0 && std::isfinite(r.weight_decay),
        StrCat("optim.weight_decay must be >= 0, got ", r.weight_decay));
  // torch.optim.AdamW's own argument checks.
  check(r.beta1 >= 0 && r.beta1 < 1, StrCat("optim.beta1 must be in [0, 1), got ", r.beta1));
  check(r.beta2 >= 0 && r.beta2 < 1, StrCat("optim.beta2 must be in [0, 1), got ", r.beta2));
  check(r.eps >= 0 && std::isfinite(r.eps), StrCat("optim.eps must be >= 0, got ", r.eps));
  check(r.max_grad_norm >= 0 && !std::isnan(r.max_grad_norm),
        StrCat("optim.max_grad_norm must be >= 0 (0: no clipping), got ", r.max_grad_norm));
  check(r.micro_batch >= 1, StrCat("batch.micro_batch must be >= 1, got ", r.micro_batch));
  check(r.grad_accum >= 1, StrCat("batch.grad_accum must be >= 1, got ", r.grad_accum));
  check(r.epochs >= 1, StrCat("batch.epochs must be >= 1, got ", r.epochs));
  check(r.max_steps == -1 || r.max_steps >= 1,
        StrCat("batch.max_steps must be -1 (the epochs decide) or >= 1, got ", r.max_steps));
  check(r.save_every >= 0, StrCat("checkpoint.save_every must be >= 0 (0: only at the end), got ", r.save_every));
  check(r.keep_last >= 0, StrCat("checkpoint.keep_last must be >= 0 (0: keep all), got ", r.keep_last));
  check(r.log_every >= 1, StrCat("log.log_every must be >= 1, got ", r.log_every));
  check(r.max_bytes >= 0, StrCat("memory.max_bytes must be >= 0 (0: the memory available), got ", r.max_bytes));
  check(!r.full_finetune || r.init_adapter.empty(),
        "lora.init_adapter starts a LoRA run; a full fine-tune (lora.full_finetune) trains the weights themselves");
  if (errors.empty()) return Status::Ok();
  std::string message = "invalid recipe: " + errors[0];
  for (size_t i = 1; i < errors.size(); ++i) message += "; " + errors[i];
  return Status::Error(message);
}

}  // namespace gk::train
