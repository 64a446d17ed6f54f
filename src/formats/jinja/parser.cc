// Statement half of the parser (expressions: parse_expr.cc).
#include "formats/jinja/parser.h"

#include <algorithm>

namespace gk::jinja {
namespace {

// jinja2 tags we deliberately do not render; named in the load-time error.
constexpr std::string_view kUnsupportedTags[] = {"include", "import", "from", "extends", "block",
                                                 "call", "filter", "autoescape", "do"};

constexpr std::string_view kEndTags[] = {"endfor", "endif", "else", "elif", "endmacro", "endset",
                                         "endwith", "endgeneration", "endraw", "endblock",
                                         "endcall", "endfilter", "endautoescape"};

bool Contains(const std::vector<std::string_view>& names, std::string_view name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

}  // namespace

Result<std::unique_ptr<const TemplateAst>> ParseTemplate(std::string_view source) {
  GK_ASSIGN_OR_RETURN(std::vector<Token> tokens, Tokenize(source));
  return Parser(std::move(tokens)).Parse();
}

Result<std::unique_ptr<const TemplateAst>> Parser::Parse() {
  auto ast = std::make_unique<TemplateAst>();
  GK_ASSIGN_OR_RETURN(ast->body, Subparse({}));
  return std::unique_ptr<const TemplateAst>(std::move(ast));
}

bool Parser::AtName(std::string_view name) const {
  return Current().type == TokenType::kName && Current().value == name;
}

bool Parser::AtOp(std::string_view op) const {
  return Current().type == TokenType::kOperator && Current().value == op;
}

bool Parser::SkipName(std::string_view name) {
  if (!AtName(name)) return false;
  Next();
  return true;
}

bool Parser::SkipOp(std::string_view op) {
  if (!AtOp(op)) return false;
  Next();
  return true;
}

Status Parser::FailAt(int line, std::string_view message) {
  return Status::Error(StrCat("line ", line, ": ", message));
}

std::string Parser::Describe(const Token& token) const {
  switch (token.type) {
    case TokenType::kData: return "template text";
    case TokenType::kVariableBegin: return "'{{'";
    case TokenType::kVariableEnd: return "end of print statement '}}'";
    case TokenType::kBlockBegin: return "'{%'";
    case TokenType::kBlockEnd: return "end of statement block '%}'";
    case TokenType::kString: return "a string";
    case TokenType::kInteger:
    case TokenType::kFloat: return "a number";
    case TokenType::kEof: return "end of template";
    default: return "'" + token.value + "'";
  }
}

Status Parser::Expect(TokenType type, std::string_view what) {
  if (Current().type != type) return Fail(StrCat("expected ", what, ", got ", Describe(Current())));
  Next();
  return Status::Ok();
}

Status Parser::ExpectOp(std::string_view op) {
  if (!AtOp(op)) return Fail(StrCat("expected '", op, "', got ", Describe(Current())));
  Next();
  return Status::Ok();
}

Result<std::string> Parser::ExpectName() {
  if (Current().type != TokenType::kName) return Fail(StrCat("expected a name, got ", Describe(Current())));
  return Next().value;
}

Status Parser::ExpectNamed(std::string_view name) {
  if (!AtName(name)) return Fail(StrCat("expected '", name, "', got ", Describe(Current())));
  Next();
  return Status::Ok();
}

Result<Body> Parser::Subparse(const std::vector<std::string_view>& end_tags) {
  Body body;
  while (true) {
    const Token& token = Current();
    if (token.type == TokenType::kData) {
      body.push_back(std::make_unique<Stmt>(Stmt{token.line, TextStmt{Value::String(token.value, true)}}));
      Next();
    } else if (token.type == TokenType::kVariableBegin) {
      const int line = Next().line;
      GK_ASSIGN_OR_RETURN(ExprPtr expr, ParseTuple(true, "", false));
      GK_RETURN_IF_ERROR(Expect(TokenType::kVariableEnd, "'}}'"));
      body.push_back(std::make_unique<Stmt>(Stmt{line, OutputStmt{std::move(expr)}}));
    } else if (token.type == TokenType::kBlockBegin) {
      Next();
      if (Current().type == TokenType::kName && Contains(end_tags, Current().value)) return body;
      GK_RETURN_IF_ERROR(ParseStatement(body));
      GK_RETURN_IF_ERROR(Expect(TokenType::kBlockEnd, "end of tag '%}'"));
    } else if (token.type == TokenType::kEof) {
      if (end_tags.empty()) return body;
      const OpenBlock& open = open_blocks_.back();
      return FailAt(open.line, StrCat("{% ", open.tag, " %} is never closed (expected {% ", end_tags.back(),
                                      " %} before the end of the template)"));
    } else {
      return Fail(StrCat("unexpected ", Describe(token)));
    }
  }
}

// jinja2's parse_statements: an optional ':', the tag's '%}', then the body up to an end tag,
// which stays current unless drop_end_tag.
Result<Body> Parser::ParseStatements(const std::vector<std::string_view>& end_tags, bool drop_end_tag) {
  SkipOp(":");
  GK_RETURN_IF_ERROR(Expect(TokenType::kBlockEnd, "end of tag '%}'"));
  GK_ASSIGN_OR_RETURN(Body body, Subparse(end_tags));
  if (drop_end_tag) Next();
  return body;
}

Status Parser::FailUnexpectedTag(const std::string& name) const {
  std::string context = open_blocks_.empty()
                            ? std::string("no block is open")
                            : StrCat("the innermost open block is {% ", open_blocks_.back().tag,
                                     " %} from line ", open_blocks_.back().line);
  return Fail(StrCat("unexpected {% ", name, " %} (", context, ")"));
}

Status Parser::ParseStatement(Body& body) {
  if (Current().type != TokenType::kName) return Fail(StrCat("expected a tag name, got ", Describe(Current())));
  const std::string tag = Current().value;
  const int line = Current().line;
  if (std::find(std::begin(kUnsupportedTags), std::end(kUnsupportedTags), tag) != std::end(kUnsupportedTags)) {
    return Fail(StrCat("{% ", tag, " %} is not supported"));
  }
  if (std::find(std::begin(kEndTags), std::end(kEndTags), tag) != std::end(kEndTags)) return FailUnexpectedTag(tag);
  if (tag == "break" || tag == "continue") {
    if (loop_depth_ == 0) return Fail(StrCat("{% ", tag, " %} outside a for loop"));
    Next();
    body.push_back(std::make_unique<Stmt>(
        tag == "break" ? Stmt{line, BreakStmt{}} : Stmt{line, ContinueStmt{}}));
    return Status::Ok();
  }
  if (tag == "print") {
    Next();
    for (bool first = true; Current().type != TokenType::kBlockEnd; first = false) {
      if (!first) GK_RETURN_IF_ERROR(ExpectOp(","));
      GK_ASSIGN_OR_RETURN(ExprPtr expr, ParseExpression());
      body.push_back(std::make_unique<Stmt>(Stmt{line, OutputStmt{std::move(expr)}}));
    }
    return Status::Ok();
  }
  using BlockParser = Result<Stmt> (Parser::*)();
  BlockParser parse = tag == "for"     ? &Parser::ParseFor
                      : tag == "if"    ? &Parser::ParseIf
                      : tag == "set"   ? &Parser::ParseSet
                      : tag == "macro" ? &Parser::ParseMacro
                      : tag == "with"  ? &Parser::ParseWith
                                       : nullptr;
  if (tag == "generation") {
    Next();
    open_blocks_.push_back({tag, line});
    GK_ASSIGN_OR_RETURN(Body inner, ParseStatements({"endgeneration"}, true));
    open_blocks_.pop_back();
    body.push_back(std::make_unique<Stmt>(Stmt{line, GenerationStmt{std::move(inner)}}));
    return Status::Ok();
  }
  if (!parse) return Fail(StrCat("unknown tag '", tag, "'"));
  if (static_cast<int>(open_blocks_.size()) >= kMaxBlockNesting) {
    return Fail(StrCat("blocks nested deeper than ", kMaxBlockNesting, " levels"));
  }
  open_blocks_.push_back({tag, line});
  GK_ASSIGN_OR_RETURN(Stmt stmt, (this->*parse)());
  open_blocks_.pop_back();
  body.push_back(std::make_unique<Stmt>(std::move(stmt)));
  return Status::Ok();
}

Result<Stmt> Parser::ParseFor() {
  const int line = Next().line;
  ForStmt node;
  GK_ASSIGN_OR_RETURN(node.target, ParseAssignTarget(false, "in"));
  GK_RETURN_IF_ERROR(ExpectNamed("in"));
  GK_ASSIGN_OR_RETURN(node.iterable, ParseTuple(false, "recursive", false));
  if (SkipName("if")) {
    GK_ASSIGN_OR_RETURN(node.condition, ParseExpression());
  }
  if (AtName("recursive")) return Fail("recursive for loops are not supported");
  ++loop_depth_;
  Result<Body> body = ParseStatements({"endfor", "else"}, false);
  --loop_depth_;
  if (!body.ok()) return body.status();
  node.body = std::move(body).value();
  if (Next().value == "else") {
    GK_ASSIGN_OR_RETURN(node.else_body, ParseStatements({"endfor"}, true));
  }
  return Stmt{line, std::move(node)};
}

Result<Stmt> Parser::ParseIf() {
  const int line = Next().line;
  IfStmt node;
  while (true) {
    GK_ASSIGN_OR_RETURN(ExprPtr test, ParseTuple(false, "", false));
    GK_ASSIGN_OR_RETURN(Body body, ParseStatements({"elif", "else", "endif"}, false));
    node.branches.emplace_back(std::move(test), std::move(body));
    const std::string tag = Next().value;
    if (tag == "elif") continue;
    if (tag == "else") {
      GK_ASSIGN_OR_RETURN(node.else_body, ParseStatements({"endif"}, true));
    }
    break;
  }
  return Stmt{line, std::move(node)};
}

Result<Stmt> Parser::ParseSet() {
  const int line = Next().line;
  GK_ASSIGN_OR_RETURN(AssignTarget target, ParseAssignTarget(true, ""));
  if (SkipOp("=")) {
    GK_ASSIGN_OR_RETURN(ExprPtr value, ParseTuple(true, "", false));
    return Stmt{line, SetStmt{std::move(target), std::move(value)}};
  }
  SetBlockStmt node;
  node.target = std::move(target);
  if (AtOp("|")) {
    GK_ASSIGN_OR_RETURN(node.filter, ParseFilter(nullptr, false));
  }
  GK_ASSIGN_OR_RETURN(node.body, ParseStatements({"endset"}, true));
  return Stmt{line, std::move(node)};
}

Result<Stmt> Parser::ParseMacro() {
  const int line = Next().line;
  MacroNode node;
  GK_ASSIGN_OR_RETURN(node.name, ExpectName());
  GK_RETURN_IF_ERROR(ExpectOp("("));
  while (!AtOp(")")) {
    if (!node.params.empty()) GK_RETURN_IF_ERROR(ExpectOp(","));
    GK_ASSIGN_OR_RETURN(std::string param, ExpectName());
    node.params.push_back(std::move(param));
    if (SkipOp("=")) {
      GK_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression());
      node.defaults.push_back(std::move(value));
    } else if (!node.defaults.empty()) {
      return Fail("non-default argument follows default argument");
    }
  }
  Next();
  const int saved_loop_depth = loop_depth_;
  loop_depth_ = 0;  // a macro body is a new function: break/continue cannot leave it
  macros_.push_back(&node);
  Result<Body> body = ParseStatements({"endmacro"}, true);
  macros_.pop_back();
  loop_depth_ = saved_loop_depth;
  if (!body.ok()) return body.status();
  node.body = std::move(body).value();
  return Stmt{line, std::move(node)};
}

Result<Stmt> Parser::ParseWith() {
  const int line = Next().line;
  WithStmt node;
  while (Current().type != TokenType::kBlockEnd) {
    if (!node.assignments.empty()) GK_RETURN_IF_ERROR(ExpectOp(","));
    GK_ASSIGN_OR_RETURN(AssignTarget target, ParseAssignTarget(false, ""));
    GK_RETURN_IF_ERROR(ExpectOp("="));
    GK_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression());
    node.assignments.emplace_back(std::move(target), std::move(value));
  }
  GK_ASSIGN_OR_RETURN(node.body, ParseStatements({"endwith"}, true));
  return Stmt{line, std::move(node)};
}

// `name`, `a, b` (a tuple of names) or, for set, `ns.attribute`.
Result<AssignTarget> Parser::ParseAssignTarget(bool with_namespace, std::string_view extra_end) {
  AssignTarget target;
  if (with_namespace && Look().type == TokenType::kOperator && Look().value == ".") {
    GK_ASSIGN_OR_RETURN(std::string ns, ExpectName());
    Next();
    GK_ASSIGN_OR_RETURN(target.ns_attribute, ExpectName());
    target.names.push_back(std::move(ns));
    return target;
  }
  while (!IsTupleEnd(extra_end)) {
    if (AtOp("(")) return Fail("nested tuple unpacking is not supported");
    GK_ASSIGN_OR_RETURN(std::string name, ExpectName());
    for (std::string_view literal : {"true", "false", "none", "True", "False", "None"}) {
      if (name == literal) return Fail(StrCat("cannot assign to '", name, "'"));
    }
    target.names.push_back(std::move(name));
    if (!SkipOp(",")) break;
    target.is_tuple = true;
  }
  if (target.names.empty()) return Fail(StrCat("expected a name to assign to, got ", Describe(Current())));
  return target;
}

bool Parser::IsTupleEnd(std::string_view extra_end) const {
  const TokenType t = Current().type;
  if (t == TokenType::kVariableEnd || t == TokenType::kBlockEnd || AtOp(")")) return true;
  return !extra_end.empty() && AtName(extra_end);
}

}  // namespace gk::jinja
