// Turns tokens into the AST, following jinja2's parser.py function for function so precedence and
// odd corners (`-2 ** 2` is 4, `x is divisibleby 3`, `a if b` without else) come out the same.
// Everything we cannot render is refused here, at load time, with the line: unknown or
// unsupported tags, filters and tests, unbalanced blocks, {% break %} outside a loop. Nesting of
// blocks and expressions is bounded so hostile templates cannot exhaust the stack.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "formats/jinja/ast.h"
#include "formats/jinja/lexer.h"

namespace gk::jinja {

inline constexpr int kMaxBlockNesting = 100;
inline constexpr int kMaxExprDepth = 200;

Result<std::unique_ptr<const TemplateAst>> ParseTemplate(std::string_view source);

inline ExprPtr MakeExpr(ExprKind kind, int line) {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->line = line;
  return e;
}

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}
  Result<std::unique_ptr<const TemplateAst>> Parse();

 private:
  struct OpenBlock {
    std::string tag;
    int line;
  };

  // Token stream (parser.cc).
  const Token& Current() const { return tokens_[pos_]; }
  const Token& Look() const { return tokens_[std::min(pos_ + 1, tokens_.size() - 1)]; }
  const Token& Next() { return tokens_[pos_ < tokens_.size() - 1 ? pos_++ : pos_]; }
  bool AtName(std::string_view name) const;
  bool AtOp(std::string_view op) const;
  bool SkipName(std::string_view name);
  bool SkipOp(std::string_view op);
  Status Expect(TokenType type, std::string_view what);
  Status ExpectOp(std::string_view op);
  Result<std::string> ExpectName();
  Status ExpectNamed(std::string_view name);
  Status Fail(std::string_view message) const { return FailAt(Current().line, message); }
  static Status FailAt(int line, std::string_view message);
  std::string Describe(const Token& token) const;

  // Statements (parser.cc).
  Result<Body> Subparse(const std::vector<std::string_view>& end_tags);
  Result<Body> ParseStatements(const std::vector<std::string_view>& end_tags, bool drop_end_tag);
  Status ParseStatement(Body& body);
  Status FailUnexpectedTag(const std::string& name) const;
  Result<Stmt> ParseFor();
  Result<Stmt> ParseIf();
  Result<Stmt> ParseSet();
  Result<Stmt> ParseMacro();
  Result<Stmt> ParseWith();
  Result<AssignTarget> ParseAssignTarget(bool with_namespace, std::string_view extra_end);

  // Expressions (parse_expr.cc).
  Result<ExprPtr> ParseTuple(bool with_condexpr, std::string_view extra_end, bool explicit_parens);
  Result<ExprPtr> ParseExpression(bool with_condexpr = true);
  Result<ExprPtr> ParseCondExpr();
  Result<ExprPtr> ParseOr();
  Result<ExprPtr> ParseAnd();
  Result<ExprPtr> ParseNot();
  Result<ExprPtr> ParseCompare();
  Result<ExprPtr> ParseMath1();
  Result<ExprPtr> ParseConcat();
  Result<ExprPtr> ParseMath2();
  Result<ExprPtr> ParsePow();
  Result<ExprPtr> ParseUnary(bool with_filter);
  Result<ExprPtr> ParsePrimary();
  Result<ExprPtr> ParseList();
  Result<ExprPtr> ParseDict();
  Result<ExprPtr> ParsePostfix(ExprPtr node);
  Result<ExprPtr> ParseFilterExpr(ExprPtr node);
  Result<ExprPtr> ParseSubscript(ExprPtr node);
  Result<ExprPtr> ParseSubscribed();
  Result<ExprPtr> ParseCall(ExprPtr node);
  Status ParseCallArgs(Expr& call);
  Result<ExprPtr> ParseFilter(ExprPtr node, bool start_inline);
  Result<ExprPtr> ParseTest(ExprPtr node);
  Status CheckNamedArgument(const Expr& filter) const;
  // Computes node->depth and refuses trees deeper than kMaxExprDepth.
  Result<ExprPtr> Finish(ExprPtr node) const;
  bool IsTupleEnd(std::string_view extra_end) const;

  std::vector<Token> tokens_;
  size_t pos_ = 0;
  std::vector<OpenBlock> open_blocks_;
  int loop_depth_ = 0;                  // for {% break %} / {% continue %}
  std::vector<MacroNode*> macros_;      // macros being parsed, innermost last
  int recursion_ = 0;                   // nested ParseExpression/ParseUnary calls
};

}  // namespace gk::jinja
