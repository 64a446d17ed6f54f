// Statements: output, if, for (filter, else, loop object, break/continue), set (plain, tuple,
// namespace attribute, block), macro definitions, with, generation.
#include "formats/jinja/renderer.h"

#include <algorithm>

namespace gk::jinja {
namespace {

// Nested statements plus expressions, all macro levels together: a bound on stack use (about
// 1 KB per level; 1000 levels fit a 1 MB stack, legitimate templates need a few hundred).
constexpr int kMaxRenderDepth = 1000;

}  // namespace

const Value* Scope::Find(std::string_view name) const {
  for (const Scope* s = this; s; s = s->parent_.get()) {
    for (const auto& [key, value] : s->vars_) {
      if (key == name) return &value;
    }
  }
  return nullptr;
}

void Scope::Set(std::string_view name, Value value) {
  for (auto& [key, old] : vars_) {
    if (key == name) {
      old = std::move(value);
      return;
    }
  }
  vars_.emplace_back(std::string(name), std::move(value));
}

Renderer::Renderer(const RenderLimits& limits)
    : limits_(limits),
      deadline_error_(StrCat("the template ran for more than ", limits.max_seconds, " s")),
      builtins_{limits.max_output_bytes, &arena_,
                std::chrono::steady_clock::now() +
                    std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                        std::chrono::duration<double>(std::min(limits.max_seconds, 1e9))),
                deadline_error_} {}

// A macro holds the scope it was defined in, and that scope holds the macro: clearing the scopes
// breaks those cycles so the render frees everything.
Renderer::~Renderer() {
  for (const ScopePtr& scope : macro_scopes_) scope->Clear();
}

Result<Text> Renderer::Render(const TemplateAst& ast, const ScopePtr& globals) {
  Text out;
  out_ = &out;
  const ScopePtr top = std::make_shared<Scope>(globals);
  Result<Flow> flow = Exec(ast.body, top);
  out_ = nullptr;
  if (!flow.ok()) return flow.status();
  return out;
}

Status Renderer::CountStep(int line) {
  if (++steps_ > limits_.max_steps) {
    return Status::Error(StrCat("line ", line, ": the template ran for more than ", limits_.max_steps,
                                " steps (an endless loop?)"));
  }
  if (steps_ % 64 == 0) {  // (not at every step: the clock would cost the cheapest steps a share)
    if (Status late = builtins_.CheckDeadline(); !late.ok()) return Status::Error(StrCat("line ", line, ": ", late.message()));
  }
  return Status::Ok();
}

Status Renderer::Enter(int line) {
  ++depth_;  // the caller calls Leave() whatever this returns
  GK_RETURN_IF_ERROR(CountStep(line));
  if (depth_ > kMaxRenderDepth) {
    return Status::Error(StrCat("line ", line, ": the template nests deeper than ", kMaxRenderDepth, " levels"));
  }
  return Status::Ok();
}

Status Renderer::Emit(const Text& text, int line) {
  if (out_->size() + text.size() > limits_.max_output_bytes) {
    return Status::Error(StrCat("line ", line, ": the output exceeds the render limit of ",
                                limits_.max_output_bytes, " bytes"));
  }
  out_->Append(text);
  return Status::Ok();
}

Result<Text> Renderer::Capture(const Body& body, const ScopePtr& scope) {
  Text captured;
  Text* const outer = out_;
  out_ = &captured;
  Result<Flow> flow = Exec(body, scope);
  out_ = outer;
  if (!flow.ok()) return flow.status();
  return captured;
}

Result<Renderer::Flow> Renderer::Exec(const Body& body, const ScopePtr& scope) {
  for (const auto& stmt : body) {
    GK_ASSIGN_OR_RETURN(Flow flow, ExecStmt(*stmt, scope));
    if (flow != Flow::kNormal) return flow;
  }
  return Flow::kNormal;
}

Result<Renderer::Flow> Renderer::ExecStmt(const Stmt& stmt, const ScopePtr& scope) {
  Status entered = Enter(stmt.line);
  if (!entered.ok()) {
    Leave();
    return entered;
  }
  const int line = stmt.line;
  const auto done = [](Status s) -> Result<Flow> {
    if (!s.ok()) return s;
    return Flow::kNormal;
  };
  Result<Flow> result = std::visit(
      [&](const auto& node) -> Result<Flow> {
        using Node = std::decay_t<decltype(node)>;
        if constexpr (std::is_same_v<Node, TextStmt>) {
          return done(Emit(node.text.text(), line));
        } else if constexpr (std::is_same_v<Node, OutputStmt>) {
          GK_ASSIGN_OR_RETURN(Value value, Eval(*node.expr, scope));
          return done(Emit(ToText(value), line));
        } else if constexpr (std::is_same_v<Node, IfStmt>) {
          return ExecIf(node, scope);
        } else if constexpr (std::is_same_v<Node, ForStmt>) {
          return ExecFor(node, line, scope);
        } else if constexpr (std::is_same_v<Node, SetStmt>) {
          return done(ExecSet(node, line, scope));
        } else if constexpr (std::is_same_v<Node, SetBlockStmt>) {
          return done(ExecSetBlock(node, line, scope));
        } else if constexpr (std::is_same_v<Node, MacroNode>) {
          return done(ExecMacro(node, scope));
        } else if constexpr (std::is_same_v<Node, WithStmt>) {
          return ExecWith(node, line, scope);
        } else if constexpr (std::is_same_v<Node, BreakStmt>) {
          return Flow::kBreak;
        } else if constexpr (std::is_same_v<Node, ContinueStmt>) {
          return Flow::kContinue;
        } else {
          static_assert(std::is_same_v<Node, GenerationStmt>);
          return Exec(node.body, scope);
        }
      },
      stmt.node);
  Leave();
  return result;
}

Result<Renderer::Flow> Renderer::ExecIf(const IfStmt& node, const ScopePtr& scope) {
  for (const auto& [test, body] : node.branches) {
    GK_ASSIGN_OR_RETURN(Value value, Eval(*test, scope));
    if (Truthy(value)) return Exec(body, scope);
  }
  return Exec(node.else_body, scope);
}

Result<Renderer::Flow> Renderer::ExecFor(const ForStmt& node, int line, const ScopePtr& scope) {
  GK_ASSIGN_OR_RETURN(Value iterable, Eval(*node.iterable, scope));
  GK_ASSIGN_OR_RETURN(std::shared_ptr<const ListData> items, LoopItems(node, iterable, line, scope));
  if (items->items.empty()) {
    GK_ASSIGN_OR_RETURN(Flow flow, Exec(node.else_body, std::make_shared<Scope>(scope)));
    return flow;
  }
  auto loop = std::make_shared<LoopData>();
  loop->items = items;
  const Value loop_value = Value::Loop(loop);
  for (size_t i = 0; i < items->items.size(); ++i) {
    GK_RETURN_IF_ERROR(CountStep(line));  // an empty body must still count toward the limit
    loop->index0 = i;
    const ScopePtr iteration = std::make_shared<Scope>(scope);
    GK_RETURN_IF_ERROR(Assign(node.target, items->items[i], line, iteration));
    iteration->Set("loop", loop_value);
    GK_ASSIGN_OR_RETURN(Flow flow, Exec(node.body, iteration));
    if (flow == Flow::kBreak) break;
  }
  return Flow::kNormal;
}

// What a for loop walks: the iterable's items, filtered first by `if` (so loop.length and
// loop.last count only what is kept). A plain list is walked in place, without a copy.
Result<std::shared_ptr<const ListData>> Renderer::LoopItems(const ForStmt& node, const Value& iterable, int line,
                                                            const ScopePtr& scope) {
  if (iterable.kind() == Kind::kList && !node.condition) return iterable.shared_list();
  GK_ASSIGN_OR_RETURN(std::vector<Value> items, AtLine(line, Iterate(iterable)));
  auto kept = std::make_shared<ListData>();
  for (Value& item : items) {
    if (node.condition) {
      GK_RETURN_IF_ERROR(CountStep(line));
      const ScopePtr probe = std::make_shared<Scope>(scope);
      GK_RETURN_IF_ERROR(Assign(node.target, item, line, probe));
      GK_ASSIGN_OR_RETURN(Value keep, Eval(*node.condition, probe));
      if (!Truthy(keep)) continue;
    }
    kept->items.push_back(std::move(item));
  }
  return std::shared_ptr<const ListData>(std::move(kept));
}

Status Renderer::Assign(const AssignTarget& target, const Value& value, int line, const ScopePtr& scope) {
  if (!target.is_tuple) {
    scope->Set(target.names[0], value);
    return Status::Ok();
  }
  Result<std::vector<Value>> items = Iterate(value);
  if (!items.ok() || value.is_undefined()) {
    if (value.is_undefined()) return AtLine(line, Status::Error(value.undefined_hint()));
    return AtLine(line, Status::Error(StrCat("cannot unpack non-iterable ", TypeName(value), " object")));
  }
  const size_t want = target.names.size();
  if (items->size() > want) {
    return AtLine(line, Status::Error(StrCat("too many values to unpack (expected ", want, ")")));
  }
  if (items->size() < want) {
    return AtLine(line, Status::Error(StrCat("not enough values to unpack (expected ", want, ", got ", items->size(), ")")));
  }
  for (size_t i = 0; i < want; ++i) scope->Set(target.names[i], (*items)[i]);
  return Status::Ok();
}

Status Renderer::ExecSet(const SetStmt& node, int line, const ScopePtr& scope) {
  GK_ASSIGN_OR_RETURN(Value value, Eval(*node.value, scope));
  if (node.target.ns_attribute.empty()) return Assign(node.target, value, line, scope);
  const Value* ns = scope->Find(node.target.names[0]);
  if (!ns || ns->kind() != Kind::kNamespace) {
    return AtLine(line, Status::Error("cannot assign attribute on non-namespace object"));
  }
  ns->ns()->Set(node.target.ns_attribute, std::move(value));
  return Status::Ok();
}

Status Renderer::ExecSetBlock(const SetBlockStmt& node, int line, const ScopePtr& scope) {
  GK_ASSIGN_OR_RETURN(Text captured, Capture(node.body, std::make_shared<Scope>(scope)));
  Value value = Value::String(std::move(captured));
  if (node.filter) {
    GK_ASSIGN_OR_RETURN(value, EvalFilter(*node.filter, scope, &value));
  }
  return Assign(node.target, value, line, scope);
}

Status Renderer::ExecMacro(const MacroNode& node, const ScopePtr& scope) {
  auto macro = std::make_shared<CallableData>();
  macro->kind = CallableKind::kMacro;
  macro->name = node.name;
  macro->macro = &node;
  macro->scope = scope;
  scope->Set(node.name, Value::Callable(std::move(macro)));
  if (macro_scopes_.empty() || macro_scopes_.back() != scope) macro_scopes_.push_back(scope);
  return Status::Ok();
}

Result<Renderer::Flow> Renderer::ExecWith(const WithStmt& node, int line, const ScopePtr& scope) {
  const ScopePtr inner = std::make_shared<Scope>(scope);
  for (const auto& [target, expr] : node.assignments) {
    GK_ASSIGN_OR_RETURN(Value value, Eval(*expr, scope));
    GK_RETURN_IF_ERROR(Assign(target, value, line, inner));
  }
  return Exec(node.body, inner);
}

}  // namespace gk::jinja
