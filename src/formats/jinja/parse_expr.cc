// Expression half of the parser: jinja2's precedence climbing, function for function
// (parse_condexpr > or > and > not > compare > math1 (+ -) > concat (~) > math2 (* / // %) >
// pow > unary > primary with postfix, filters and tests).
#include <algorithm>

#include "formats/jinja/parser.h"

namespace gk::jinja {
namespace {

ExprPtr MakeBinary(ExprKind kind, int line, ExprPtr left, ExprPtr right) {
  ExprPtr e = MakeExpr(kind, line);
  e->args.push_back(std::move(left));
  e->args.push_back(std::move(right));
  return e;
}

// Counts nested parser calls; the tree depth alone misses `((((x))))`.
class RecursionGuard {
 public:
  explicit RecursionGuard(int& depth) : depth_(++depth) {}
  ~RecursionGuard() { --depth_; }
  bool TooDeep() const { return depth_ > kMaxExprDepth; }

 private:
  int& depth_;
};


}  // namespace

Result<ExprPtr> Parser::Finish(ExprPtr node) const {
  int depth = 0;
  for (const ExprPtr& child : node->args) depth = std::max(depth, child ? child->depth : 0);
  for (const auto& [name, child] : node->kwargs) depth = std::max(depth, child->depth);
  node->depth = depth + 1;
  if (node->depth > kMaxExprDepth) {
    return FailAt(node->line, StrCat("expression nested deeper than ", kMaxExprDepth, " levels"));
  }
  return node;
}

Result<ExprPtr> Parser::ParseTuple(bool with_condexpr, std::string_view extra_end, bool explicit_parens) {
  int line = Current().line;
  std::vector<ExprPtr> items;
  bool is_tuple = false;
  while (true) {
    if (!items.empty()) GK_RETURN_IF_ERROR(ExpectOp(","));
    if (IsTupleEnd(extra_end)) break;
    GK_ASSIGN_OR_RETURN(ExprPtr item, ParseExpression(with_condexpr));
    items.push_back(std::move(item));
    if (!AtOp(",")) break;
    is_tuple = true;
    line = Current().line;
  }
  if (!is_tuple) {
    if (!items.empty()) return std::move(items[0]);
    if (!explicit_parens) return Fail(StrCat("expected an expression, got ", Describe(Current())));
  }
  ExprPtr tuple = MakeExpr(ExprKind::kTuple, line);
  tuple->args = std::move(items);
  return Finish(std::move(tuple));
}

Result<ExprPtr> Parser::ParseExpression(bool with_condexpr) {
  RecursionGuard guard(recursion_);
  if (guard.TooDeep()) return Fail(StrCat("expression nested deeper than ", kMaxExprDepth, " levels"));
  return with_condexpr ? ParseCondExpr() : ParseOr();
}

Result<ExprPtr> Parser::ParseCondExpr() {
  RecursionGuard guard(recursion_);
  if (guard.TooDeep()) return Fail(StrCat("expression nested deeper than ", kMaxExprDepth, " levels"));
  int line = Current().line;
  GK_ASSIGN_OR_RETURN(ExprPtr expr, ParseOr());
  while (SkipName("if")) {
    ExprPtr cond = MakeExpr(ExprKind::kCondExpr, line);
    cond->args.push_back(std::move(expr));
    GK_ASSIGN_OR_RETURN(ExprPtr test, ParseOr());
    cond->args.push_back(std::move(test));
    ExprPtr otherwise;
    if (SkipName("else")) {
      GK_ASSIGN_OR_RETURN(otherwise, ParseCondExpr());
    }
    cond->args.push_back(std::move(otherwise));
    GK_ASSIGN_OR_RETURN(expr, Finish(std::move(cond)));
    line = Current().line;
  }
  return expr;
}

Result<ExprPtr> Parser::ParseOr() {
  int line = Current().line;
  GK_ASSIGN_OR_RETURN(ExprPtr left, ParseAnd());
  while (SkipName("or")) {
    GK_ASSIGN_OR_RETURN(ExprPtr right, ParseAnd());
    GK_ASSIGN_OR_RETURN(left, Finish(MakeBinary(ExprKind::kOr, line, std::move(left), std::move(right))));
    line = Current().line;
  }
  return left;
}

Result<ExprPtr> Parser::ParseAnd() {
  int line = Current().line;
  GK_ASSIGN_OR_RETURN(ExprPtr left, ParseNot());
  while (SkipName("and")) {
    GK_ASSIGN_OR_RETURN(ExprPtr right, ParseNot());
    GK_ASSIGN_OR_RETURN(left, Finish(MakeBinary(ExprKind::kAnd, line, std::move(left), std::move(right))));
    line = Current().line;
  }
  return left;
}

Result<ExprPtr> Parser::ParseNot() {
  if (!AtName("not")) return ParseCompare();
  RecursionGuard guard(recursion_);
  if (guard.TooDeep()) return Fail(StrCat("expression nested deeper than ", kMaxExprDepth, " levels"));
  ExprPtr node = MakeExpr(ExprKind::kNot, Next().line);
  GK_ASSIGN_OR_RETURN(ExprPtr operand, ParseNot());
  node->args.push_back(std::move(operand));
  return Finish(std::move(node));
}

Result<ExprPtr> Parser::ParseCompare() {
  const int line = Current().line;
  GK_ASSIGN_OR_RETURN(ExprPtr first, ParseMath1());
  ExprPtr compare = MakeExpr(ExprKind::kCompare, line);
  compare->args.push_back(std::move(first));
  static const std::pair<std::string_view, Op> kOps[] = {{"==", Op::kEq}, {"!=", Op::kNe}, {"<", Op::kLt},
                                                         {"<=", Op::kLe}, {">", Op::kGt},  {">=", Op::kGe}};
  while (true) {
    const auto symbol = std::find_if(std::begin(kOps), std::end(kOps), [&](const auto& op) { return AtOp(op.first); });
    if (symbol != std::end(kOps)) {
      Next();
      compare->ops.push_back(symbol->second);
    } else if (SkipName("in")) {
      compare->ops.push_back(Op::kIn);
    } else if (AtName("not") && Look().type == TokenType::kName && Look().value == "in") {
      Next();
      Next();
      compare->ops.push_back(Op::kNotIn);
    } else {
      break;
    }
    GK_ASSIGN_OR_RETURN(ExprPtr operand, ParseMath1());
    compare->args.push_back(std::move(operand));
  }
  if (compare->ops.empty()) return std::move(compare->args[0]);
  return Finish(std::move(compare));
}

Result<ExprPtr> Parser::ParseMath1() {
  int line = Current().line;
  GK_ASSIGN_OR_RETURN(ExprPtr left, ParseConcat());
  while (AtOp("+") || AtOp("-")) {
    const Op op = Next().value == "+" ? Op::kAdd : Op::kSub;
    GK_ASSIGN_OR_RETURN(ExprPtr right, ParseConcat());
    ExprPtr node = MakeBinary(ExprKind::kBinary, line, std::move(left), std::move(right));
    node->op = op;
    GK_ASSIGN_OR_RETURN(left, Finish(std::move(node)));
    line = Current().line;
  }
  return left;
}

Result<ExprPtr> Parser::ParseConcat() {
  const int line = Current().line;
  GK_ASSIGN_OR_RETURN(ExprPtr first, ParseMath2());
  if (!AtOp("~")) return first;
  ExprPtr concat = MakeExpr(ExprKind::kConcat, line);
  concat->args.push_back(std::move(first));
  while (SkipOp("~")) {
    GK_ASSIGN_OR_RETURN(ExprPtr next, ParseMath2());
    concat->args.push_back(std::move(next));
  }
  return Finish(std::move(concat));
}

Result<ExprPtr> Parser::ParseMath2() {
  int line = Current().line;
  GK_ASSIGN_OR_RETURN(ExprPtr left, ParsePow());
  while (AtOp("*") || AtOp("/") || AtOp("//") || AtOp("%")) {
    const std::string symbol = Next().value;
    const Op op = symbol == "*" ? Op::kMul : symbol == "/" ? Op::kDiv : symbol == "//" ? Op::kFloorDiv : Op::kMod;
    GK_ASSIGN_OR_RETURN(ExprPtr right, ParsePow());
    ExprPtr node = MakeBinary(ExprKind::kBinary, line, std::move(left), std::move(right));
    node->op = op;
    GK_ASSIGN_OR_RETURN(left, Finish(std::move(node)));
    line = Current().line;
  }
  return left;
}

Result<ExprPtr> Parser::ParsePow() {
  int line = Current().line;
  GK_ASSIGN_OR_RETURN(ExprPtr left, ParseUnary(true));
  while (SkipOp("**")) {
    GK_ASSIGN_OR_RETURN(ExprPtr right, ParseUnary(true));
    ExprPtr node = MakeBinary(ExprKind::kBinary, line, std::move(left), std::move(right));
    node->op = Op::kPow;
    GK_ASSIGN_OR_RETURN(left, Finish(std::move(node)));
    line = Current().line;
  }
  return left;
}

Result<ExprPtr> Parser::ParseUnary(bool with_filter) {
  RecursionGuard guard(recursion_);
  if (guard.TooDeep()) return Fail(StrCat("expression nested deeper than ", kMaxExprDepth, " levels"));
  ExprPtr node;
  if (AtOp("-") || AtOp("+")) {
    const Token& sign = Next();
    node = MakeExpr(sign.value == "-" ? ExprKind::kNeg : ExprKind::kPos, sign.line);
    GK_ASSIGN_OR_RETURN(ExprPtr operand, ParseUnary(false));
    node->args.push_back(std::move(operand));
    GK_ASSIGN_OR_RETURN(node, Finish(std::move(node)));
  } else {
    GK_ASSIGN_OR_RETURN(node, ParsePrimary());
  }
  GK_ASSIGN_OR_RETURN(node, ParsePostfix(std::move(node)));
  if (with_filter) return ParseFilterExpr(std::move(node));
  return node;
}

Result<ExprPtr> Parser::ParsePrimary() {
  const Token& token = Current();
  ExprPtr node = MakeExpr(ExprKind::kLiteral, token.line);
  switch (token.type) {
    case TokenType::kName:
      if (token.value == "true" || token.value == "True" || token.value == "false" || token.value == "False") {
        node->literal = Value::Bool(token.value[0] == 't' || token.value[0] == 'T', true);
      } else if (token.value == "none" || token.value == "None") {
        node->literal = Value::None(true);
      } else {
        node->kind = ExprKind::kName;
        node->name = token.value;
        if (!macros_.empty() && token.value == "varargs") macros_.back()->takes_varargs = true;
        if (!macros_.empty() && token.value == "kwargs") macros_.back()->takes_kwargs = true;
      }
      Next();
      return node;
    case TokenType::kString: {
      std::string value;
      while (Current().type == TokenType::kString) value += Next().value;  // "a" "b" is "ab"
      node->literal = Value::String(std::move(value), true);
      return node;
    }
    case TokenType::kInteger:
      node->literal = Value::Int(Next().int_value, true);
      return node;
    case TokenType::kFloat:
      node->literal = Value::Float(Next().float_value, true);
      return node;
    default: break;
  }
  if (SkipOp("(")) {
    GK_ASSIGN_OR_RETURN(ExprPtr inner, ParseTuple(true, "", true));
    GK_RETURN_IF_ERROR(ExpectOp(")"));
    return inner;
  }
  if (AtOp("[")) return ParseList();
  if (AtOp("{")) return ParseDict();
  return Fail(StrCat("unexpected ", Describe(token)));
}

Result<ExprPtr> Parser::ParseList() {
  ExprPtr list = MakeExpr(ExprKind::kList, Next().line);
  while (!AtOp("]")) {
    if (!list->args.empty()) GK_RETURN_IF_ERROR(ExpectOp(","));
    if (AtOp("]")) break;
    GK_ASSIGN_OR_RETURN(ExprPtr item, ParseExpression());
    list->args.push_back(std::move(item));
  }
  GK_RETURN_IF_ERROR(ExpectOp("]"));
  return Finish(std::move(list));
}

Result<ExprPtr> Parser::ParseDict() {
  ExprPtr dict = MakeExpr(ExprKind::kDict, Next().line);
  while (!AtOp("}")) {
    if (!dict->args.empty()) GK_RETURN_IF_ERROR(ExpectOp(","));
    if (AtOp("}")) break;
    GK_ASSIGN_OR_RETURN(ExprPtr key, ParseExpression());
    GK_RETURN_IF_ERROR(ExpectOp(":"));
    GK_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression());
    dict->args.push_back(std::move(key));
    dict->args.push_back(std::move(value));
  }
  GK_RETURN_IF_ERROR(ExpectOp("}"));
  return Finish(std::move(dict));
}

Result<ExprPtr> Parser::ParsePostfix(ExprPtr node) {
  while (true) {
    if (AtOp(".") || AtOp("[")) {
      GK_ASSIGN_OR_RETURN(node, ParseSubscript(std::move(node)));
    } else if (AtOp("(")) {
      GK_ASSIGN_OR_RETURN(node, ParseCall(std::move(node)));
    } else {
      return node;
    }
  }
}

Result<ExprPtr> Parser::ParseFilterExpr(ExprPtr node) {
  while (true) {
    if (AtOp("|")) {
      GK_ASSIGN_OR_RETURN(node, ParseFilter(std::move(node), false));
    } else if (AtName("is")) {
      GK_ASSIGN_OR_RETURN(node, ParseTest(std::move(node)));
    } else if (AtOp("(")) {
      GK_ASSIGN_OR_RETURN(node, ParseCall(std::move(node)));
    } else {
      return node;
    }
  }
}

Result<ExprPtr> Parser::ParseSubscript(ExprPtr node) {
  const Token& token = Next();
  if (token.value == ".") {
    const Token& attribute = Next();
    ExprPtr access = MakeExpr(attribute.type == TokenType::kName ? ExprKind::kGetAttr : ExprKind::kGetItem, token.line);
    access->args.push_back(std::move(node));
    if (attribute.type == TokenType::kName) {
      access->name = attribute.value;
    } else if (attribute.type == TokenType::kInteger) {
      ExprPtr index = MakeExpr(ExprKind::kLiteral, attribute.line);
      index->literal = Value::Int(attribute.int_value, true);
      access->args.push_back(std::move(index));
    } else {
      return FailAt(attribute.line, StrCat("expected a name or number after '.', got ", Describe(attribute)));
    }
    return Finish(std::move(access));
  }
  std::vector<ExprPtr> keys;
  while (!AtOp("]")) {
    if (!keys.empty()) GK_RETURN_IF_ERROR(ExpectOp(","));
    GK_ASSIGN_OR_RETURN(ExprPtr key, ParseSubscribed());
    keys.push_back(std::move(key));
  }
  GK_RETURN_IF_ERROR(ExpectOp("]"));
  ExprPtr access = MakeExpr(ExprKind::kGetItem, token.line);
  access->args.push_back(std::move(node));
  if (keys.size() == 1) {
    access->args.push_back(std::move(keys[0]));
  } else {
    ExprPtr tuple = MakeExpr(ExprKind::kTuple, token.line);
    tuple->args = std::move(keys);
    GK_ASSIGN_OR_RETURN(tuple, Finish(std::move(tuple)));
    access->args.push_back(std::move(tuple));
  }
  return Finish(std::move(access));
}

// One subscript: an expression, or a slice start:stop:step with any part left out.
Result<ExprPtr> Parser::ParseSubscribed() {
  ExprPtr slice = MakeExpr(ExprKind::kSlice, Current().line);
  if (SkipOp(":")) {
    slice->args.push_back(nullptr);
  } else {
    GK_ASSIGN_OR_RETURN(ExprPtr start, ParseExpression());
    if (!SkipOp(":")) return start;
    slice->args.push_back(std::move(start));
  }
  const auto at_end = [&] { return AtOp("]") || AtOp(","); };
  if (AtOp(":") || at_end()) {
    slice->args.push_back(nullptr);
  } else {
    GK_ASSIGN_OR_RETURN(ExprPtr stop, ParseExpression());
    slice->args.push_back(std::move(stop));
  }
  ExprPtr step;
  if (SkipOp(":") && !at_end()) {
    GK_ASSIGN_OR_RETURN(step, ParseExpression());
  }
  slice->args.push_back(std::move(step));
  return Finish(std::move(slice));
}

}  // namespace gk::jinja
