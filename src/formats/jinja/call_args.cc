// Argument binding and coercion shared by filters, tests, methods and globals (builtins.h).
#include <algorithm>

#include "formats/jinja/builtins.h"

namespace gk::jinja {

Result<std::vector<std::optional<Value>>> BindArgs(const CallArgs& args, std::string_view function,
                                                   std::initializer_list<std::string_view> params,
                                                   size_t required) {
  using Bound = std::vector<std::optional<Value>>;
  const std::vector<std::string_view> names(params);
  Bound bound(names.size());
  if (args.positional.size() > names.size()) {
    return Result<Bound>::Error(StrCat(function, "() takes at most ", names.size(), " argument(s) (",
                                       args.positional.size(), " given)"));
  }
  for (size_t i = 0; i < args.positional.size(); ++i) bound[i] = args.positional[i];
  for (const auto& [key, value] : args.keyword) {
    const auto it = std::find(names.begin(), names.end(), key);
    if (it == names.end()) {
      return Result<Bound>::Error(StrCat(function, "() got an unexpected keyword argument '", key, "'"));
    }
    std::optional<Value>& slot = bound[it - names.begin()];
    if (slot) return Result<Bound>::Error(StrCat(function, "() got multiple values for argument '", key, "'"));
    slot = value;
  }
  for (size_t i = 0; i < required; ++i) {
    if (!bound[i]) {
      return Result<Bound>::Error(StrCat(function, "() missing required argument '", names[i], "'"));
    }
  }
  return bound;
}

Result<int64_t> ToInt(const Value& v, std::string_view what) {
  if (v.is_undefined()) return Result<int64_t>::Error(v.undefined_hint());
  if (v.kind() == Kind::kInt || v.kind() == Kind::kBool) return v.int_value();
  return Result<int64_t>::Error(StrCat(what, ": '", TypeName(v), "' object cannot be interpreted as an integer"));
}

Result<std::string> ToStr(const Value& v, std::string_view what) {
  if (v.is_undefined()) return Result<std::string>::Error(v.undefined_hint());
  if (v.is_string()) return v.text().bytes();
  return Result<std::string>::Error(StrCat(what, " must be str, not ", TypeName(v)));
}

}  // namespace gk::jinja
