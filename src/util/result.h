// Errors as values. Library code never exits or prints: it returns a Status or Result<T>
// whose message names the file, tensor or field, the expected and actual values, and the fix.
// Only src/cli turns an error into stderr plus an exit code.
#pragma once

#include <optional>
#include <sstream>
#include <string>
#include <utility>

namespace gk {

// Concatenates any streamable values into a string: StrCat("tensor ", name, " has ", n, " rows").
template <class... Args>
std::string StrCat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

class [[nodiscard]] Status {
 public:
  Status() = default;
  static Status Ok() { return Status(); }
  static Status Error(std::string message) { return Status(std::move(message), true); }
  bool ok() const { return !failed_; }
  const std::string& message() const { return message_; }
  // Prepends context: "loading model.safetensors: " + message.
  Status Wrap(const std::string& context) const {
    return ok() ? *this : Error(context + ": " + message_);
  }

 private:
  Status(std::string m, bool failed) : message_(std::move(m)), failed_(failed) {}
  std::string message_;
  bool failed_ = false;
};

template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}          // NOLINT: implicit on purpose
  Result(Status status) : status_(std::move(status)) {}  // NOLINT: must be an error
  static Result Error(std::string message) { return Result(Status::Error(std::move(message))); }

  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }
  const std::string& message() const { return status_.message(); }
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T& operator*() & { return *value_; }
  const T& operator*() const& { return *value_; }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }

 private:
  std::optional<T> value_;
  Status status_;
};

}  // namespace gk

#define GK_CONCAT_INNER(a, b) a##b
#define GK_CONCAT(a, b) GK_CONCAT_INNER(a, b)

#define GK_RETURN_IF_ERROR(expr)           \
  do {                                     \
    ::gk::Status gk_status_ = (expr);      \
    if (!gk_status_.ok()) return gk_status_; \
  } while (0)

#define GK_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                             \
  if (!tmp.ok()) return tmp.status();            \
  lhs = std::move(tmp).value()

// GK_ASSIGN_OR_RETURN(auto x, MakeX()); returns the error from the enclosing function.
#define GK_ASSIGN_OR_RETURN(lhs, expr) \
  GK_ASSIGN_OR_RETURN_IMPL(GK_CONCAT(gk_result_, __LINE__), lhs, expr)

// For our own bugs only (never for bad input): always on, names the condition.
#define GK_ASSERT(cond)                                                              \
  do {                                                                               \
    if (!(cond)) ::gk::AssertFail(#cond, __FILE__, __LINE__);                          \
  } while (0)

namespace gk {
[[noreturn]] void AssertFail(const char* cond, const char* file, int line);
}
