// The parsed template: expression and statement nodes mirroring jinja2's nodes.py for the subset
// chat templates use. Built once by the parser (with filters and tests already resolved, so an
// unknown one fails at load time) and then only read, so one tree serves concurrent renders.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "formats/jinja/builtins.h"
#include "formats/jinja/operators.h"
#include "formats/jinja/value.h"

namespace gk::jinja {

enum class ExprKind : uint8_t {
  kLiteral,   // literal
  kName,      // name
  kList,      // [args...]
  kTuple,     // (args...)
  kDict,      // {args[0]: args[1], args[2]: args[3], ...}
  kGetAttr,   // args[0].name
  kGetItem,   // args[0][args[1]]
  kSlice,     // start:stop:step as args[0..2], each possibly null; only inside kGetItem
  kCall,      // args[0](args[1..], kwargs)
  kFilter,    // args[0] | name(args[1..], kwargs); args[0] is null in {% set x | f %}
  kTest,      // args[0] is [not] name(args[1..], kwargs)
  kNeg,       // -args[0]
  kPos,       // +args[0]
  kNot,       // not args[0]
  kBinary,    // args[0] op args[1]
  kConcat,    // args[0] ~ args[1] ~ ...
  kCompare,   // args[0] ops[0] args[1] ops[1] args[2] ... (chained like Python)
  kAnd,       // args[0] and args[1]
  kOr,        // args[0] or args[1]
  kCondExpr,  // args[0] if args[1] else args[2] (args[2] may be null)
};

struct Expr {
  ExprKind kind = ExprKind::kLiteral;
  int line = 0;
  int depth = 1;      // height of this subtree, bounded by the parser
  std::string name;   // kName, kGetAttr, kFilter, kTest, kCall (the callee's name, for messages)
  Value literal;      // kLiteral
  Op op = Op::kAdd;   // kBinary
  std::vector<Op> ops;  // kCompare
  std::vector<std::unique_ptr<Expr>> args;
  std::vector<std::pair<std::string, std::unique_ptr<Expr>>> kwargs;
  FilterFn filter = nullptr;  // kFilter
  TestFn test = nullptr;      // kTest
};
using ExprPtr = std::unique_ptr<Expr>;

struct Stmt;
using Body = std::vector<std::unique_ptr<Stmt>>;

// The left side of set/for/with: one name, a tuple of names, or namespace.attribute.
struct AssignTarget {
  std::vector<std::string> names;
  bool is_tuple = false;
  std::string ns_attribute;  // set ns.attribute = ... (names[0] is the namespace)
};

struct TextStmt {
  Value text;  // template text, as a string value from the template
};
struct OutputStmt {
  ExprPtr expr;
};
struct IfStmt {
  std::vector<std::pair<ExprPtr, Body>> branches;  // if, elif, elif, ...
  Body else_body;
};
struct ForStmt {
  AssignTarget target;
  ExprPtr iterable;
  ExprPtr condition;  // for x in xs if condition; may be null
  Body body;
  Body else_body;     // when nothing was iterated
};
struct SetStmt {
  AssignTarget target;
  ExprPtr value;
};
struct SetBlockStmt {
  AssignTarget target;
  ExprPtr filter;  // {% set x | f %}: a kFilter chain whose innermost input is null; may be null
  Body body;
};
struct MacroNode {
  std::string name;
  std::vector<std::string> params;
  std::vector<ExprPtr> defaults;  // for the last defaults.size() params
  bool takes_varargs = false;     // the body mentions `varargs` / `kwargs`
  bool takes_kwargs = false;
  Body body;
};
struct WithStmt {
  std::vector<std::pair<AssignTarget, ExprPtr>> assignments;
  Body body;
};
struct BreakStmt {};
struct ContinueStmt {};
struct GenerationStmt {  // transformers' {% generation %} marks assistant text; renders its body
  Body body;
};

struct Stmt {
  int line = 0;
  std::variant<TextStmt, OutputStmt, IfStmt, ForStmt, SetStmt, SetBlockStmt, MacroNode, WithStmt,
               BreakStmt, ContinueStmt, GenerationStmt>
      node;
};

struct TemplateAst {
  Body body;
};

}  // namespace gk::jinja
