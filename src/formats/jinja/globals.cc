// The globals a chat template can call: jinja2's range (sandboxed: at most 100000 items),
// namespace and dict, and the two transformers adds, raise_exception(message) and
// strftime_now(format).
#include <ctime>

#include "formats/jinja/builtins.h"

namespace gk::jinja {
namespace {

constexpr int64_t kMaxRange = 100000;  // jinja2.sandbox.MAX_RANGE

Result<Value> Range(const CallArgs& args) {
  if (!args.keyword.empty()) return Result<Value>::Error("range() takes no keyword arguments");
  if (args.positional.empty() || args.positional.size() > 3) {
    return Result<Value>::Error(StrCat("range expected 1 to 3 arguments, got ", args.positional.size()));
  }
  int64_t bounds[3] = {0, 0, 1};
  bool from_template = true;
  for (size_t i = 0; i < args.positional.size(); ++i) {
    GK_ASSIGN_OR_RETURN(bounds[args.positional.size() == 1 ? 1 : i], ToInt(args.positional[i], "range()"));
    from_template = from_template && args.positional[i].from_template();
  }
  const auto [start, stop, step] = bounds;
  if (step == 0) return Result<Value>::Error("range() arg 3 must not be zero");
  // Count in unsigned arithmetic: stop - start may not fit an int64.
  uint64_t count = 0;
  if (step > 0 && start < stop) count = (static_cast<uint64_t>(stop) - static_cast<uint64_t>(start) - 1) / step + 1;
  if (step < 0 && start > stop) {
    count = (static_cast<uint64_t>(start) - static_cast<uint64_t>(stop) - 1) / (0 - static_cast<uint64_t>(step)) + 1;
  }
  if (count > static_cast<uint64_t>(kMaxRange)) {
    return Result<Value>::Error("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
  }
  std::vector<Value> items;
  items.reserve(count);
  for (uint64_t i = 0; i < count; ++i) items.push_back(Value::Int(start + static_cast<int64_t>(i) * step, from_template));
  auto list = std::make_shared<ListData>();
  list->items = std::move(items);
  list->kind = ListKind::kRange;
  list->range_start = start;
  list->range_stop = stop;
  list->range_step = step;
  list->all_template = from_template;
  return Value::List(std::move(list));
}

// Python's dict(*args, **kwargs) with at most one positional mapping or iterable of pairs.
Result<std::vector<std::pair<Value, Value>>> DictItems(const CallArgs& args, std::string_view function) {
  std::vector<std::pair<Value, Value>> items;
  if (args.positional.size() > 1) {
    return Result<std::vector<std::pair<Value, Value>>>::Error(
        StrCat(function, " expected at most 1 positional argument, got ", args.positional.size()));
  }
  if (!args.positional.empty()) {
    const Value& source = args.positional[0];
    // Python's dict() looks up .keys on its argument, and jinja2's Undefined raises there.
    if (source.is_undefined()) return Result<std::vector<std::pair<Value, Value>>>::Error(source.undefined_hint());
    if (source.kind() == Kind::kDict) {
      items = source.dict().items;
    } else {
      GK_ASSIGN_OR_RETURN(std::vector<Value> pairs, Iterate(source));
      for (const Value& pair : pairs) {
        GK_ASSIGN_OR_RETURN(std::vector<Value> kv, Iterate(pair));
        if (kv.size() != 2) {
          return Result<std::vector<std::pair<Value, Value>>>::Error(
              StrCat("dictionary update sequence element has length ", kv.size(), "; 2 is required"));
        }
        items.emplace_back(kv[0], kv[1]);
      }
    }
  }
  for (const auto& [key, value] : args.keyword) items.emplace_back(Value::String(key, true), value);
  return items;
}

Result<Value> Namespace(const CallArgs& args, BuiltinContext& ctx) {
  GK_ASSIGN_OR_RETURN(auto items, DictItems(args, "namespace"));
  NamespaceData* ns = ctx.arena->New();
  for (auto& [key, value] : items) {
    if (!key.is_string()) return Result<Value>::Error("namespace() keys must be strings");
    ns->Set(key.text().bytes(), std::move(value));
  }
  return Value::Namespace(ns);
}

Result<Value> StrftimeNow(const CallArgs& args) {
  GK_ASSIGN_OR_RETURN(auto b, BindArgs(args, "strftime_now", {"format"}, 1));
  GK_ASSIGN_OR_RETURN(std::string format, ToStr(*b[0], "strftime_now() format"));
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  std::string out(256 + format.size() * 8, '\0');
  const size_t n = format.empty() ? 0 : std::strftime(out.data(), out.size(), format.c_str(), &local);
  out.resize(n);
  return Value::String(std::move(out), b[0]->from_template());
}

}  // namespace

bool IsGlobal(std::string_view name) {
  return name == "range" || name == "namespace" || name == "dict" || name == "raise_exception" ||
         name == "strftime_now";
}

Result<Value> CallGlobal(std::string_view name, const CallArgs& args, BuiltinContext& ctx) {
  if (name == "range") return Range(args);
  if (name == "namespace") return Namespace(args, ctx);
  if (name == "dict") {
    GK_ASSIGN_OR_RETURN(auto items, DictItems(args, "dict"));
    return MakeDict(std::move(items));
  }
  if (name == "raise_exception") {
    GK_ASSIGN_OR_RETURN(auto b, BindArgs(args, "raise_exception", {"message"}, 1));
    return Result<Value>::Error(ToText(*b[0]).bytes());
  }
  if (name == "strftime_now") return StrftimeNow(args);
  return Result<Value>::Error(StrCat("'", name, "' is undefined"));
}

}  // namespace gk::jinja
