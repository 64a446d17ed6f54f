#include "server/api_error.h"

#include <nlohmann/json.hpp>

namespace gk::server {

ApiError ApiError::BadRequest(std::string message, std::string param) {
  return {400, "invalid_request_error", std::move(message), std::move(param)};
}
ApiError ApiError::NotFound(std::string message) { return {404, "NotFoundError", std::move(message), ""}; }
ApiError ApiError::Unauthorized() {
  return {401, "authentication_error", "Incorrect API key provided. Pass it as 'Authorization: Bearer <key>'.", ""};
}
ApiError ApiError::Unavailable(std::string message) {
  return {503, "ServiceUnavailableError", std::move(message), ""};
}
ApiError ApiError::Internal(std::string message) { return {500, "InternalServerError", std::move(message), ""}; }

nlohmann::ordered_json ApiError::ToJson() const {
  nlohmann::ordered_json e = {{"message", message}, {"type", type}, {"param", nullptr}, {"code", status}};
  if (!param.empty()) e["param"] = param;
  return {{"error", std::move(e)}};
}

std::string ApiError::Body() const {
  return ToJson().dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

}  // namespace gk::server
