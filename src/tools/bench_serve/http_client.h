// A single-threaded HTTP/1.1 client on epoll for the benchmark: many concurrent streamed
// responses (a thousand on two cores), each byte time-stamped when it is read.
//
// Why not cpp-httplib's client: it blocks one thread per request. At 1,000 streams that is
// 1,000 threads waking per token, and the time a chunk is stamped then depends on the
// scheduler. One event loop reads each chunk as soon as it arrives, as vLLM's aiohttp client
// does, and its own CPU time per chunk can be measured (bench serve reports it).
//
// Connections are kept alive and reused (aiohttp's default); a reused connection that the
// server closed before answering is retried once on a fresh one. Plain http only.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "util/result.h"

namespace gk::bench {

struct BaseUrl {
  std::string host;         // name or address
  int port = 80;
  std::string path_prefix;  // "" or "/something" (no trailing slash)
  std::string text;         // as given, for reports
};
// "http://host[:port][/prefix]". https is refused (no TLS here) with a clear error.
Result<BaseUrl> ParseBaseUrl(const std::string& url);

class HttpResponseHandler {
 public:
  virtual ~HttpResponseHandler() = default;
  virtual void OnStatus(int status, const std::string& reason, double now) {}
  // Decoded body bytes (chunked framing removed), stamped with the time they were read.
  virtual void OnBody(std::string_view bytes, double now) = 0;
  // Called once: error is "" when the response ended normally.
  virtual void OnDone(const std::string& error, double now) = 0;
};

struct HttpRequest {
  std::string method = "POST";
  std::string path;  // appended to the base URL's prefix
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // Host, Content-Length are added
};

class HttpClient {
 public:
  // Resolves the host. timeout_s bounds each request from its start to its last byte.
  static Result<std::unique_ptr<HttpClient>> Create(const BaseUrl& url, double timeout_s);
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  // Starts the request (reusing an idle connection when there is one) and returns the time just
  // before it, vLLM's start time. The handler must outlive the request; it is called from Poll.
  double Start(const HttpRequest& request, HttpResponseHandler* handler);
  // Handles whatever I/O is ready, waiting at most timeout_s for some.
  void Poll(double timeout_s);
  int in_flight() const { return in_flight_; }
  int open_connections() const;

  struct Conn;  // one TCP connection and the response being read on it

 private:
  HttpClient() = default;
  Conn* OpenConnection(std::string* error);
  void Send(Conn* c);
  void HandleEvent(Conn* c, uint32_t events);
  void ReadAvailable(Conn* c);
  bool ParseHead(Conn* c, double now);
  void ParseBody(Conn* c, double now);
  void Finish(Conn* c, const std::string& error, double now);
  void Close(Conn* c);
  void Watch(Conn* c, uint32_t events, bool add);
  void CheckTimeouts(double now);

  BaseUrl url_;
  std::vector<char> addr_;  // sockaddr of the server
  int addr_len_ = 0, family_ = 0;
  int epoll_fd_ = -1;
  double timeout_s_ = 0, last_timeout_check_ = 0;
  int in_flight_ = 0;
  std::vector<std::unique_ptr<Conn>> conns_;  // every open connection
  std::vector<Conn*> idle_;                   // kept-alive connections ready for reuse
  std::vector<std::unique_ptr<Conn>> closed_; // closed during this Poll, freed at its end
};

}  // namespace gk::bench
