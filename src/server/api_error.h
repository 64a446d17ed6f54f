// The OpenAI error object every failed request gets:
//   {"error": {"message": "...", "type": "...", "param": null | "field", "code": <http status>}}
// (vLLM's ErrorResponse: type is the error class, code the HTTP status.)
#pragma once

#include <string>

#include <nlohmann/json_fwd.hpp>

namespace gk::server {

struct ApiError {
  int status = 400;
  std::string type = "invalid_request_error";
  std::string message;
  std::string param;  // the offending field; "" -> null

  // 400: malformed or invalid request (invalid_request_error).
  static ApiError BadRequest(std::string message, std::string param = "");
  // 404: unknown model or route (NotFoundError).
  static ApiError NotFound(std::string message);
  // 401: missing or wrong API key.
  static ApiError Unauthorized();
  // 503: queue full or the engine is shutting down / dead.
  static ApiError Unavailable(std::string message);
  // 500: an engine failure.
  static ApiError Internal(std::string message);

  nlohmann::ordered_json ToJson() const;
  std::string Body() const;  // ToJson() serialised
};

}  // namespace gk::server
