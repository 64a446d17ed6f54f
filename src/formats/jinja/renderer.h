// Runs a parsed template against one context: statements in renderer.cc, expressions in
// evaluator.cc. Scoping follows jinja2: each for-loop iteration, macro call, {% with %} and
// block set gets a fresh scope (assignments there do not leak out); `if` does not; a macro sees
// the scope it was defined in (live, as a closure) plus its arguments, never its caller's locals.
//
// One Renderer serves one Render call on one thread; it owns everything mutable (namespaces,
// scopes, the output), so a parsed template is shared read-only between threads.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "formats/jinja/ast.h"
#include "formats/jinja/jinja.h"
#include "formats/jinja/text.h"

namespace gk::jinja {

class Scope {
 public:
  explicit Scope(std::shared_ptr<Scope> parent) : parent_(std::move(parent)) {}
  const Value* Find(std::string_view name) const;  // here or in an enclosing scope
  void Set(std::string_view name, Value value);
  void Clear() { vars_.clear(); }

 private:
  std::shared_ptr<Scope> parent_;
  std::vector<std::pair<std::string, Value>> vars_;
};
using ScopePtr = std::shared_ptr<Scope>;

class Renderer {
 public:
  explicit Renderer(const RenderLimits& limits);
  ~Renderer();
  Renderer(const Renderer&) = delete;
  Renderer& operator=(const Renderer&) = delete;

  // Errors read "line N: ...".
  Result<Text> Render(const TemplateAst& ast, const ScopePtr& globals);

 private:
  enum class Flow { kNormal, kBreak, kContinue };

  // Statements (renderer.cc).
  Result<Flow> Exec(const Body& body, const ScopePtr& scope);
  Result<Flow> ExecStmt(const Stmt& stmt, const ScopePtr& scope);
  Result<Flow> ExecIf(const IfStmt& node, const ScopePtr& scope);
  Result<Flow> ExecFor(const ForStmt& node, int line, const ScopePtr& scope);
  Result<std::shared_ptr<const ListData>> LoopItems(const ForStmt& node, const Value& iterable, int line,
                                                    const ScopePtr& scope);
  Status ExecSet(const SetStmt& node, int line, const ScopePtr& scope);
  Status ExecSetBlock(const SetBlockStmt& node, int line, const ScopePtr& scope);
  Status ExecMacro(const MacroNode& node, const ScopePtr& scope);
  Result<Flow> ExecWith(const WithStmt& node, int line, const ScopePtr& scope);
  Status Assign(const AssignTarget& target, const Value& value, int line, const ScopePtr& scope);
  Status Emit(const Text& text, int line);
  // Renders `body` into a string of its own (macro calls, block sets).
  Result<Text> Capture(const Body& body, const ScopePtr& scope);

  // Expressions (evaluator.cc).
  Result<Value> Eval(const Expr& e, const ScopePtr& scope);
  Result<Value> EvalName(const Expr& e, const ScopePtr& scope);
  Result<Value> EvalCollection(const Expr& e, const ScopePtr& scope);
  Result<Value> EvalGetItem(const Expr& e, const ScopePtr& scope);
  Result<Value> EvalConcat(const Expr& e, const ScopePtr& scope);
  Result<Value> EvalCompare(const Expr& e, const ScopePtr& scope);
  Result<Value> EvalCondExpr(const Expr& e, const ScopePtr& scope);
  Result<Value> EvalCall(const Expr& e, const ScopePtr& scope);
  Result<Value> EvalFilter(const Expr& e, const ScopePtr& scope, const Value* input);
  Result<Value> EvalTest(const Expr& e, const ScopePtr& scope);
  Result<CallArgs> EvalArgs(const Expr& e, size_t first, const ScopePtr& scope);
  Result<Value> CallValue(const Value& callee, CallArgs args, int line);
  Result<Value> CallMacro(const CallableData& macro, CallArgs args, int line);
  Status BindMacroArgs(const MacroNode& macro, CallArgs args, int line, const ScopePtr& scope);

  // Count work (and nesting); fail past the limits. Every Enter is paired with a Leave.
  Status CountStep(int line);
  Status Enter(int line);
  void Leave() { --depth_; }
  BuiltinContext& builtins() { return builtins_; }

  RenderLimits limits_;
  NamespaceArena arena_;
  std::string deadline_error_;
  BuiltinContext builtins_;
  Text* out_ = nullptr;
  uint64_t steps_ = 0;
  int depth_ = 0;
  int call_depth_ = 0;
  std::vector<ScopePtr> macro_scopes_;  // scopes macros were defined in; cleared at the end
  std::unordered_map<std::string, Value> global_functions_;
};

// Prefixes a builtin's error (which has no line) with "line N: ".
template <class T>
Result<T> AtLine(int line, Result<T> result) {
  if (result.ok()) return result;
  return Result<T>::Error(StrCat("line ", line, ": ", result.message()));
}
inline Status AtLine(int line, Status status) {
  return status.ok() ? status : Status::Error(StrCat("line ", line, ": ", status.message()));
}

}  // namespace gk::jinja
