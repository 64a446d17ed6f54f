// Building values: the constructors, the shared containers and the depth-checked builders.
#include "formats/jinja/value.h"

#include <algorithm>

namespace gk::jinja {
namespace {

int DepthOf(const Value& v) {
  if (v.kind() == Kind::kList) return v.list().depth;
  if (v.kind() == Kind::kDict) return v.dict().depth;
  return 0;
}

}  // namespace

Value Value::Undefined(std::string hint) {
  Value v;
  v.ptr_ = std::make_shared<const std::string>(std::move(hint));
  return v;
}

Value Value::Bool(bool b, bool from_template) {
  Value v(Kind::kBool, from_template);
  v.u_.b = b;
  return v;
}

Value Value::Int(int64_t i, bool from_template) {
  Value v(Kind::kInt, from_template);
  v.u_.i = i;
  return v;
}

Value Value::Float(double f, bool from_template) {
  Value v(Kind::kFloat, from_template);
  v.u_.f = f;
  return v;
}

Value Value::String(Text text) {
  Value v(Kind::kString, true);
  v.ptr_ = std::make_shared<const Text>(std::move(text));
  return v;
}

Value Value::String(std::string bytes, bool from_template) {
  return String(Text(std::move(bytes), from_template));
}

Value Value::List(std::shared_ptr<const ListData> list) {
  Value v(Kind::kList, true);
  v.ptr_ = std::move(list);
  return v;
}

Value Value::Dict(std::shared_ptr<const DictData> dict) {
  Value v(Kind::kDict, true);
  v.ptr_ = std::move(dict);
  return v;
}

Value Value::Namespace(NamespaceData* ns) {
  Value v(Kind::kNamespace, false);
  v.u_.ns = ns;
  return v;
}

Value Value::Loop(std::shared_ptr<LoopData> loop) {
  Value v(Kind::kLoop, false);
  v.ptr_ = std::move(loop);
  return v;
}

Value Value::Callable(std::shared_ptr<const CallableData> callable) {
  Value v(Kind::kCallable, true);
  v.ptr_ = std::move(callable);
  return v;
}

bool Value::from_template() const {
  switch (kind_) {
    case Kind::kString: return text().AllTemplate();
    case Kind::kList: return list().all_template;
    case Kind::kDict: return dict().all_template;
    default: return from_template_;
  }
}

const Text& Value::text() const { return *static_cast<const Text*>(ptr_.get()); }
const ListData& Value::list() const { return *static_cast<const ListData*>(ptr_.get()); }
std::shared_ptr<const ListData> Value::shared_list() const {
  return std::static_pointer_cast<const ListData>(ptr_);
}
const DictData& Value::dict() const { return *static_cast<const DictData*>(ptr_.get()); }
LoopData& Value::loop() const { return *const_cast<LoopData*>(static_cast<const LoopData*>(ptr_.get())); }
const CallableData& Value::callable() const { return *static_cast<const CallableData*>(ptr_.get()); }

std::string Value::undefined_hint() const {
  return ptr_ ? *static_cast<const std::string*>(ptr_.get()) : "value is undefined";
}

const Value* DictData::Find(const Value& key) const {
  Result<std::string> hash = HashKey(key);
  if (!hash.ok()) return nullptr;
  auto it = index.find(*hash);
  return it == index.end() ? nullptr : &items[it->second].second;
}

const Value* NamespaceData::Find(std::string_view name) const {
  for (const auto& [key, value] : attrs) {
    if (key == name) return &value;
  }
  return nullptr;
}

void NamespaceData::Set(std::string_view name, Value value) {
  for (auto& [key, old] : attrs) {
    if (key == name) {
      old = std::move(value);
      return;
    }
  }
  attrs.emplace_back(std::string(name), std::move(value));
}

NamespaceData* NamespaceArena::New() {
  namespaces_.push_back(std::make_unique<NamespaceData>());
  return namespaces_.back().get();
}

Result<Value> MakeList(std::vector<Value> items, ListKind kind) {
  auto list = std::make_shared<ListData>();
  list->kind = kind;
  for (const Value& item : items) {
    list->depth = std::max(list->depth, DepthOf(item) + 1);
    list->all_template = list->all_template && item.from_template();
  }
  if (list->depth > kMaxValueDepth) {
    return Result<Value>::Error(StrCat("values nested deeper than ", kMaxValueDepth, " levels"));
  }
  list->items = std::move(items);
  return Value::List(std::move(list));
}

Result<Value> MakeDict(std::vector<std::pair<Value, Value>> items) {
  auto dict = std::make_shared<DictData>();
  for (auto& [key, value] : items) {
    GK_ASSIGN_OR_RETURN(std::string hash, HashKey(key));
    dict->depth = std::max({dict->depth, DepthOf(key) + 1, DepthOf(value) + 1});
    dict->all_template = dict->all_template && key.from_template() && value.from_template();
    auto [it, inserted] = dict->index.emplace(std::move(hash), dict->items.size());
    if (inserted) {
      dict->items.emplace_back(std::move(key), std::move(value));
    } else {
      dict->items[it->second].second = std::move(value);
    }
  }
  if (dict->depth > kMaxValueDepth) {
    return Result<Value>::Error(StrCat("values nested deeper than ", kMaxValueDepth, " levels"));
  }
  return Value::Dict(std::move(dict));
}

Value MakeMethod(const Value& self, std::string name) {
  auto c = std::make_shared<CallableData>();
  c->kind = CallableKind::kMethod;
  c->name = std::move(name);
  c->self = self;
  return Value::Callable(std::move(c));
}

}  // namespace gk::jinja
