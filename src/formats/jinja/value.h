// The values a template computes with, modelled on the Python objects jinja2 would hold: None,
// bool, int (64-bit here), float, str (a Text, so every byte keeps its origin), list, tuple,
// dict (insertion ordered), jinja2's Undefined, namespace(), the loop object and callables
// (macros, globals, bound methods). Values are cheap to copy: containers are shared and
// immutable, as in jinja2's ImmutableSandboxedEnvironment; only namespaces change, and those
// live in the render's NamespaceArena.
//
// Scalars carry one origin flag (a number typed in the template prints as template text, one
// from the context as data); containers remember whether everything in them is template.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "formats/jinja/text.h"
#include "util/result.h"

namespace gk::jinja {

class Scope;
struct MacroNode;
struct ListData;
struct DictData;
struct NamespaceData;
struct LoopData;
struct CallableData;

// Deeper values are refused when built, so printing, comparing and freeing them stays shallow.
inline constexpr int kMaxValueDepth = 256;

enum class Kind : uint8_t {
  kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kNamespace, kLoop, kCallable
};

class Value {
 public:
  Value() = default;  // Undefined without a hint
  static Value Undefined(std::string hint);
  static Value None(bool from_template) { return Value(Kind::kNone, from_template); }
  static Value Bool(bool b, bool from_template);
  static Value Int(int64_t i, bool from_template);
  static Value Float(double f, bool from_template);
  static Value String(Text text);
  static Value String(std::string bytes, bool from_template);
  static Value List(std::shared_ptr<const ListData> list);
  static Value Dict(std::shared_ptr<const DictData> dict);
  static Value Namespace(NamespaceData* ns);
  static Value Loop(std::shared_ptr<LoopData> loop);
  static Value Callable(std::shared_ptr<const CallableData> callable);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_number() const { return kind_ == Kind::kInt || kind_ == Kind::kFloat || kind_ == Kind::kBool; }
  // Whether every byte this value prints as comes from the template.
  bool from_template() const;

  bool bool_value() const { return u_.b; }
  int64_t int_value() const { return kind_ == Kind::kBool ? u_.b : u_.i; }  // bool is an int
  double float_value() const { return kind_ == Kind::kFloat ? u_.f : static_cast<double>(int_value()); }
  const Text& text() const;
  const ListData& list() const;
  std::shared_ptr<const ListData> shared_list() const;  // kList: the shared items
  const DictData& dict() const;
  NamespaceData* ns() const { return u_.ns; }
  LoopData& loop() const;
  const CallableData& callable() const;
  // Undefined only: the message jinja2's UndefinedError would carry when the value is used.
  std::string undefined_hint() const;

 private:
  Value(Kind kind, bool from_template) : kind_(kind), from_template_(from_template) {}

  Kind kind_ = Kind::kUndefined;
  bool from_template_ = true;
  union {
    bool b;
    int64_t i;
    double f;
    NamespaceData* ns;
  } u_{};
  std::shared_ptr<const void> ptr_;  // Text, ListData, DictData, LoopData, CallableData or hint
};

// How a list-like value behaves where the Python types behind it differ.
enum class ListKind : uint8_t {
  kList,
  kTuple,
  kIterator,    // a generator or reversed(): always true, no len(), no indexing
  kDictKeys,    // dict.keys()/values()/items() views: no indexing, repr "dict_keys([...])"
  kDictValues,
  kDictItems,
  kRange,       // range(): repr "range(a, b)"
};

struct ListData {
  std::vector<Value> items;
  ListKind kind = ListKind::kList;
  int64_t range_start = 0, range_stop = 0, range_step = 1;  // kRange only, for its repr
  int depth = 1;
  bool all_template = true;
};

struct DictData {
  std::vector<std::pair<Value, Value>> items;
  std::unordered_map<std::string, size_t> index;  // HashKey(key) -> position in items
  int depth = 1;
  bool all_template = true;
  const Value* Find(const Value& key) const;  // nullptr when absent or unhashable
};

struct NamespaceData {
  std::vector<std::pair<std::string, Value>> attrs;
  const Value* Find(std::string_view name) const;
  void Set(std::string_view name, Value value);
};

// Owns the render's namespaces; values point at them (namespaces are the one mutable object).
class NamespaceArena {
 public:
  NamespaceData* New();

 private:
  std::vector<std::unique_ptr<NamespaceData>> namespaces_;
};

// jinja2's LoopContext for one iteration: the (filtered) items and where we are.
struct LoopData {
  std::shared_ptr<const ListData> items;
  size_t index0 = 0;
  mutable std::vector<Value> last_changed;  // loop.changed(...) state
  mutable bool changed_called = false;
};

enum class CallableKind : uint8_t { kMacro, kGlobal, kMethod };

struct CallableData {
  CallableKind kind;
  std::string name;                // macro, global or method name
  const MacroNode* macro = nullptr;  // kMacro
  std::shared_ptr<Scope> scope;    // kMacro: the scope the macro was defined in
  Value self;                      // kMethod: the object the method is bound to
};

// Builders: compute depth and origin, refuse values nested deeper than kMaxValueDepth.
Result<Value> MakeList(std::vector<Value> items, ListKind kind = ListKind::kList);
Result<Value> MakeDict(std::vector<std::pair<Value, Value>> items);  // later duplicates win
Value MakeMethod(const Value& self, std::string name);

// Python semantics.
bool Truthy(const Value& v);
Text ToText(const Value& v);        // str(v)
std::string Repr(const Value& v);   // repr(v)
bool Equals(const Value& a, const Value& b);
enum class CompareOp : uint8_t { kLt, kLe, kGt, kGe };
// Python's a < b (<=, >, >=); an error where Python raises TypeError or an operand is Undefined.
Result<bool> Compare(const Value& a, const Value& b, CompareOp op);
// A string equal for Python-equal hashable values (1, 1.0, True); an error for list/dict.
Result<std::string> HashKey(const Value& v);
std::string TypeName(const Value& v);        // 'int', 'str', 'NoneType', ...
std::string ObjectTypeRepr(const Value& v);  // jinja2's object_type_repr: "dict object", "None"
// The items a for loop sees: list items, dict keys, string characters; Undefined is empty.
Result<std::vector<Value>> Iterate(const Value& v);
// len(v) for strings and containers; an error otherwise.
Result<int64_t> Length(const Value& v);

}  // namespace gk::jinja
