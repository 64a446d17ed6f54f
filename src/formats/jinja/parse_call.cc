// Calls, filters and tests in expressions: f(a, k=v), x | f(...), x is t(...). Filter and test
// names are resolved here, so an unknown one fails at load time.
#include <algorithm>

#include "formats/jinja/parser.h"

namespace gk::jinja {
namespace {

const Expr* LiteralString(const Expr& filter, size_t index) {
  if (filter.args.size() <= index || !filter.args[index]) return nullptr;
  const Expr& e = *filter.args[index];
  return e.kind == ExprKind::kLiteral && e.literal.is_string() ? &e : nullptr;
}

}  // namespace

Result<ExprPtr> Parser::ParseCall(ExprPtr node) {
  ExprPtr call = MakeExpr(ExprKind::kCall, Current().line);
  if (node->kind == ExprKind::kName || node->kind == ExprKind::kGetAttr) call->name = node->name;
  call->args.push_back(std::move(node));
  GK_RETURN_IF_ERROR(ParseCallArgs(*call));
  return Finish(std::move(call));
}

Status Parser::ParseCallArgs(Expr& call) {
  GK_RETURN_IF_ERROR(ExpectOp("("));
  bool require_comma = false;
  while (!AtOp(")")) {
    if (require_comma) {
      GK_RETURN_IF_ERROR(ExpectOp(","));
      if (AtOp(")")) break;  // trailing comma
    }
    if (AtOp("*") || AtOp("**")) return Fail("*args and **kwargs in calls are not supported");
    if (Current().type == TokenType::kName && Look().type == TokenType::kOperator && Look().value == "=") {
      std::string key = Next().value;
      Next();
      GK_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression());
      call.kwargs.emplace_back(std::move(key), std::move(value));
    } else {
      if (!call.kwargs.empty()) return Fail("positional argument follows keyword argument");
      GK_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression());
      call.args.push_back(std::move(value));
    }
    require_comma = true;
  }
  Next();
  return Status::Ok();
}

Result<ExprPtr> Parser::ParseFilter(ExprPtr node, bool start_inline) {
  while (AtOp("|") || start_inline) {
    if (!start_inline) Next();
    start_inline = false;
    const int line = Current().line;
    GK_ASSIGN_OR_RETURN(std::string name, ExpectName());
    while (SkipOp(".")) {
      GK_ASSIGN_OR_RETURN(std::string part, ExpectName());
      name += "." + part;
    }
    const FilterFn fn = FindFilter(name);
    if (!fn) {
      return FailAt(line, IsJinjaFilter(name) ? StrCat("filter '", name, "' is not supported")
                                              : StrCat("unknown filter '", name, "'"));
    }
    ExprPtr filter = MakeExpr(ExprKind::kFilter, line);
    filter->name = std::move(name);
    filter->filter = fn;
    filter->args.push_back(std::move(node));
    if (AtOp("(")) GK_RETURN_IF_ERROR(ParseCallArgs(*filter));
    GK_RETURN_IF_ERROR(CheckNamedArgument(*filter));
    GK_ASSIGN_OR_RETURN(node, Finish(std::move(filter)));
  }
  return node;
}

// map('upper'), select('odd'), selectattr('x', 'defined'): a literal filter or test name is
// checked now, like the filter itself.
Status Parser::CheckNamedArgument(const Expr& filter) const {
  const bool by_attribute = std::any_of(filter.kwargs.begin(), filter.kwargs.end(),
                                        [](const auto& kw) { return kw.first == "attribute"; });
  if (filter.name == "map" && !by_attribute) {
    if (const Expr* arg = LiteralString(filter, 1); arg && !FindFilter(arg->literal.text().bytes())) {
      return FailAt(arg->line, StrCat("unknown filter '", arg->literal.text().bytes(), "' in map()"));
    }
  }
  const size_t test_index = filter.name == "select" || filter.name == "reject" ? 1
                            : filter.name == "selectattr" || filter.name == "rejectattr" ? 2
                                                                                         : 0;
  if (test_index == 0) return Status::Ok();
  if (const Expr* arg = LiteralString(filter, test_index); arg && !FindTest(arg->literal.text().bytes())) {
    return FailAt(arg->line, StrCat("unknown test '", arg->literal.text().bytes(), "' in ", filter.name, "()"));
  }
  return Status::Ok();
}

Result<ExprPtr> Parser::ParseTest(ExprPtr node) {
  const int line = Next().line;
  const bool negated = SkipName("not");
  GK_ASSIGN_OR_RETURN(std::string name, ExpectName());
  while (SkipOp(".")) {
    GK_ASSIGN_OR_RETURN(std::string part, ExpectName());
    name += "." + part;
  }
  const TestFn fn = FindTest(name);
  if (!fn) {
    return FailAt(line, IsJinjaTest(name) ? StrCat("test '", name, "' is not supported")
                                          : StrCat("unknown test '", name, "'"));
  }
  ExprPtr test = MakeExpr(ExprKind::kTest, line);
  test->name = std::move(name);
  test->test = fn;
  test->args.push_back(std::move(node));
  const TokenType t = Current().type;
  const bool bare_argument =
      (t == TokenType::kName || t == TokenType::kString || t == TokenType::kInteger || t == TokenType::kFloat ||
       AtOp("[") || AtOp("{")) &&
      !AtName("else") && !AtName("or") && !AtName("and");
  if (AtOp("(")) {
    GK_RETURN_IF_ERROR(ParseCallArgs(*test));
  } else if (bare_argument) {  // x is divisibleby 3, x is sameas none
    if (AtName("is")) return Fail("you cannot chain multiple tests with 'is'");
    GK_ASSIGN_OR_RETURN(ExprPtr arg, ParsePrimary());
    GK_ASSIGN_OR_RETURN(arg, ParsePostfix(std::move(arg)));
    test->args.push_back(std::move(arg));
  }
  GK_ASSIGN_OR_RETURN(test, Finish(std::move(test)));
  if (!negated) return test;
  ExprPtr negation = MakeExpr(ExprKind::kNot, line);
  negation->args.push_back(std::move(test));
  return Finish(std::move(negation));
}

}  // namespace gk::jinja
