#include "tools/bench_serve/http_client.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>

#include "util/clock.h"

namespace gk::bench {

namespace {

constexpr size_t kMaxHeadBytes = 64 * 1024;

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& ch : out) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return out;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

}  // namespace

struct HttpClient::Conn {
  enum class State { kConnecting, kWriting, kHead, kBody, kIdle };
  enum class Framing { kLength, kChunked, kUntilClose };
  enum class ChunkState { kSize, kData, kDataEnd, kTrailer };

  int fd = -1;
  State state = State::kConnecting;
  bool reused = false;         // had served an earlier response
  bool got_response = false;   // any byte of this response arrived
  std::string out;             // the serialized request
  size_t out_off = 0;
  std::string in;              // read but not yet parsed
  HttpResponseHandler* handler = nullptr;
  double deadline = 0;
  Framing framing = Framing::kUntilClose;
  long long remaining = 0;     // kLength: body bytes left; kChunked: bytes left in the chunk
  ChunkState chunk = ChunkState::kSize;
  bool keep_alive = true;
  bool head_request = false;
  int status = 0;
};

Result<BaseUrl> ParseBaseUrl(const std::string& url) {
  BaseUrl u;
  u.text = url;
  std::string_view rest = url;
  if (rest.starts_with("https://")) {
    return Result<BaseUrl>::Error(StrCat("--base-url ", url, ": https is not supported; use http:// (a TLS ",
                                         "proxy in front of the client adds its own latency anyway)"));
  }
  if (!rest.starts_with("http://")) {
    return Result<BaseUrl>::Error(StrCat("--base-url ", url, ": expected http://host[:port][/prefix]"));
  }
  rest.remove_prefix(7);
  const size_t slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  std::string_view path = slash == std::string_view::npos ? "" : rest.substr(slash);
  while (!path.empty() && path.back() == '/') path.remove_suffix(1);
  u.path_prefix = std::string(path);
  if (authority.starts_with("[")) {  // [v6]:port
    const size_t close = authority.find(']');
    if (close == std::string_view::npos) return Result<BaseUrl>::Error(StrCat("--base-url ", url, ": unclosed ["));
    u.host = std::string(authority.substr(1, close - 1));
    authority.remove_prefix(close + 1);
    if (authority.starts_with(":")) authority.remove_prefix(1);
    else if (!authority.empty()) return Result<BaseUrl>::Error(StrCat("--base-url ", url, ": junk after ]"));
  } else {
    const size_t colon = authority.rfind(':');
    u.host = std::string(authority.substr(0, colon));
    authority = colon == std::string_view::npos ? "" : authority.substr(colon + 1);
  }
  if (!authority.empty()) {
    int port = 0;
    for (char ch : authority) {
      if (ch < '0' || ch > '9' || port > 65535) return Result<BaseUrl>::Error(StrCat("--base-url ", url, ": bad port"));
      port = port * 10 + (ch - '0');
    }
    if (port < 1 || port > 65535) return Result<BaseUrl>::Error(StrCat("--base-url ", url, ": bad port"));
    u.port = port;
  }
  if (u.host.empty()) return Result<BaseUrl>::Error(StrCat("--base-url ", url, ": no host"));
  return u;
}

Result<std::unique_ptr<HttpClient>> HttpClient::Create(const BaseUrl& url, double timeout_s) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const std::string port = std::to_string(url.port);
  if (int rc = getaddrinfo(url.host.c_str(), port.c_str(), &hints, &res); rc != 0 || !res) {
    return Result<std::unique_ptr<HttpClient>>::Error(
        StrCat("cannot resolve ", url.host, ": ", gai_strerror(rc)));
  }
  std::unique_ptr<HttpClient> c(new HttpClient());
  c->url_ = url;
  c->family_ = res->ai_family;
  c->addr_len_ = static_cast<int>(res->ai_addrlen);
  c->addr_.assign(reinterpret_cast<char*>(res->ai_addr), reinterpret_cast<char*>(res->ai_addr) + res->ai_addrlen);
  freeaddrinfo(res);
  c->timeout_s_ = timeout_s;
  c->epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  if (c->epoll_fd_ < 0) return Result<std::unique_ptr<HttpClient>>::Error(StrCat("epoll: ", std::strerror(errno)));
  return c;
}

HttpClient::~HttpClient() {
  for (auto& c : conns_) ::close(c->fd);  // requests still in flight are dropped unanswered
  if (epoll_fd_ >= 0) ::close(epoll_fd_);
}

int HttpClient::open_connections() const { return static_cast<int>(conns_.size()); }

void HttpClient::Watch(Conn* c, uint32_t events, bool add) {
  epoll_event ev{};
  ev.events = events;
  ev.data.ptr = c;
  epoll_ctl(epoll_fd_, add ? EPOLL_CTL_ADD : EPOLL_CTL_MOD, c->fd, &ev);
}

HttpClient::Conn* HttpClient::OpenConnection(std::string* error) {
  const int fd = ::socket(family_, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *error = StrCat("socket: ", std::strerror(errno), errno == EMFILE ? " (raise ulimit -n)" : "");
    return nullptr;
  }
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  auto conn = std::make_unique<Conn>();
  conn->fd = fd;
  if (::connect(fd, reinterpret_cast<const sockaddr*>(addr_.data()), addr_len_) != 0 && errno != EINPROGRESS) {
    *error = StrCat("cannot connect to ", url_.host, ":", url_.port, ": ", std::strerror(errno));
    ::close(fd);
    return nullptr;
  }
  Conn* c = conn.get();
  conns_.push_back(std::move(conn));
  Watch(c, EPOLLOUT, true);
  return c;
}

double HttpClient::Start(const HttpRequest& request, HttpResponseHandler* handler) {
  const double start = NowSeconds();
  std::string out = StrCat(request.method, " ", url_.path_prefix, request.path, " HTTP/1.1\r\nHost: ", url_.host,
                           ":", url_.port, "\r\n");
  for (const auto& [k, v] : request.headers) out += StrCat(k, ": ", v, "\r\n");
  if (request.method != "GET" || !request.body.empty()) out += StrCat("Content-Length: ", request.body.size(), "\r\n");
  out += "\r\n";
  out += request.body;

  Conn* c = nullptr;
  if (!idle_.empty()) {
    c = idle_.back();
    idle_.pop_back();
    c->reused = true;
  } else {
    std::string error;
    c = OpenConnection(&error);
    if (!c) {
      handler->OnDone(error, NowSeconds());
      return start;
    }
  }
  ++in_flight_;
  c->handler = handler;
  c->out = std::move(out);
  c->out_off = 0;
  c->in.clear();
  c->got_response = false;
  c->status = 0;
  c->head_request = request.method == "HEAD";
  c->deadline = start + timeout_s_;
  if (c->state == Conn::State::kIdle) {
    c->state = Conn::State::kWriting;
    Send(c);
  }  // else still connecting: Send runs when the socket becomes writable
  return start;
}

void HttpClient::Send(Conn* c) {
  while (c->out_off < c->out.size()) {
    const ssize_t n = ::send(c->fd, c->out.data() + c->out_off, c->out.size() - c->out_off, MSG_NOSIGNAL);
    if (n > 0) {
      c->out_off += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      Watch(c, EPOLLOUT, false);
      return;
    }
    Finish(c, StrCat("sending the request: ", std::strerror(errno)), NowSeconds());
    return;
  }
  c->state = Conn::State::kHead;
  Watch(c, EPOLLIN | EPOLLRDHUP, false);
}

void HttpClient::HandleEvent(Conn* c, uint32_t events) {
  if (c->state == Conn::State::kIdle) {  // the server closed (or sent junk on) a kept-alive connection
    idle_.erase(std::remove(idle_.begin(), idle_.end(), c), idle_.end());
    Close(c);
    return;
  }
  if (c->state == Conn::State::kConnecting) {
    int err = 0;
    socklen_t len = sizeof(err);
    getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) {
      Finish(c, StrCat("cannot connect to ", url_.host, ":", url_.port, ": ", std::strerror(err)), NowSeconds());
      return;
    }
    c->state = Conn::State::kWriting;
    Send(c);
    return;
  }
  if (c->state == Conn::State::kWriting) {
    if (events & (EPOLLERR | EPOLLHUP)) {
      Finish(c, "connection reset while sending the request", NowSeconds());
      return;
    }
    Send(c);
    return;
  }
  ReadAvailable(c);
}

void HttpClient::ReadAvailable(Conn* c) {
  char buf[64 * 1024];
  for (;;) {
    const ssize_t n = ::recv(c->fd, buf, sizeof(buf), 0);
    const double now = NowSeconds();
    if (n > 0) {
      c->got_response = true;
      c->in.append(buf, static_cast<size_t>(n));
      if (c->state == Conn::State::kHead && !ParseHead(c, now)) return;
      if (c->state == Conn::State::kBody) ParseBody(c, now);
      if (c->state != Conn::State::kHead && c->state != Conn::State::kBody) return;  // finished
      if (static_cast<size_t>(n) < sizeof(buf)) return;  // drained for now (level-triggered)
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n < 0 && errno == EINTR) continue;
    // End of stream or reset.
    if (c->state == Conn::State::kBody && c->framing == Conn::Framing::kUntilClose) {
      c->keep_alive = false;
      Finish(c, "", now);
    } else if (c->reused && !c->got_response) {
      // The server dropped an idle connection just as we reused it: retry once on a new one.
      std::string error;
      Conn* fresh = OpenConnection(&error);
      HttpResponseHandler* h = c->handler;
      if (!fresh) {
        Finish(c, error, now);
        return;
      }
      fresh->handler = h;
      fresh->out = std::move(c->out);
      fresh->deadline = c->deadline;
      fresh->head_request = c->head_request;
      c->handler = nullptr;
      Close(c);
    } else {
      Finish(c, n == 0 ? "the server closed the connection before the response ended"
                       : StrCat("connection error: ", std::strerror(errno)), now);
    }
    return;
  }
}

bool HttpClient::ParseHead(Conn* c, double now) {
  const size_t end = c->in.find("\r\n\r\n");
  if (end == std::string::npos) {
    if (c->in.size() > kMaxHeadBytes) Finish(c, "response headers larger than 64 KiB", now);
    return false;
  }
  std::string_view head(c->in.data(), end);
  const size_t eol = head.find("\r\n");
  std::string_view status_line = head.substr(0, eol);
  // "HTTP/1.1 200 OK"
  if (!status_line.starts_with("HTTP/1.") || status_line.size() < 12) {
    Finish(c, StrCat("not an HTTP response: ", std::string(status_line.substr(0, 60))), now);
    return false;
  }
  const bool http10 = status_line[7] == '0';
  c->status = std::atoi(std::string(status_line.substr(9, 3)).c_str());
  const std::string reason(Trim(status_line.size() > 13 ? status_line.substr(13) : ""));
  c->keep_alive = !http10;
  c->framing = Conn::Framing::kUntilClose;
  bool have_length = false;
  size_t pos = eol == std::string_view::npos ? head.size() : eol + 2;
  while (pos < head.size()) {
    size_t next = head.find("\r\n", pos);
    if (next == std::string_view::npos) next = head.size();
    std::string_view line = head.substr(pos, next - pos);
    pos = next + 2;
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    const std::string name = Lower(Trim(line.substr(0, colon)));
    const std::string value = Lower(Trim(line.substr(colon + 1)));
    if (name == "content-length") {
      have_length = true;
      c->remaining = std::atoll(value.c_str());
    } else if (name == "transfer-encoding" && value.find("chunked") != std::string::npos) {
      c->framing = Conn::Framing::kChunked;
      c->chunk = Conn::ChunkState::kSize;
    } else if (name == "connection") {
      if (value.find("close") != std::string::npos) c->keep_alive = false;
      if (value.find("keep-alive") != std::string::npos) c->keep_alive = true;
    }
  }
  if (c->framing != Conn::Framing::kChunked && have_length) c->framing = Conn::Framing::kLength;
  if (c->framing == Conn::Framing::kUntilClose) c->keep_alive = false;
  c->in.erase(0, end + 4);
  c->state = Conn::State::kBody;
  if (c->handler) c->handler->OnStatus(c->status, reason, now);
  const bool no_body = c->head_request || c->status == 204 || c->status == 304 || (c->status >= 100 && c->status < 200);
  if (no_body || (c->framing == Conn::Framing::kLength && c->remaining == 0)) {
    Finish(c, "", now);
    return false;
  }
  return true;
}

void HttpClient::ParseBody(Conn* c, double now) {
  HttpResponseHandler* h = c->handler;
  if (c->framing == Conn::Framing::kUntilClose) {
    if (h && !c->in.empty()) h->OnBody(c->in, now);
    c->in.clear();
    return;
  }
  if (c->framing == Conn::Framing::kLength) {
    const size_t take = std::min<size_t>(c->in.size(), static_cast<size_t>(c->remaining));
    if (h && take) h->OnBody(std::string_view(c->in.data(), take), now);
    c->remaining -= static_cast<long long>(take);
    c->in.erase(0, take);
    if (c->remaining == 0) Finish(c, "", now);
    return;
  }
  // Chunked: hand over each piece of chunk data as soon as it is here.
  size_t pos = 0;
  for (;;) {
    if (c->chunk == Conn::ChunkState::kSize) {
      const size_t eol = c->in.find("\r\n", pos);
      if (eol == std::string::npos) break;
      std::string_view line(c->in.data() + pos, eol - pos);
      line = line.substr(0, line.find(';'));  // chunk extensions
      long long size = 0;
      bool valid = !Trim(line).empty();
      for (char ch : Trim(line)) {
        const int d = std::isdigit(static_cast<unsigned char>(ch)) ? ch - '0'
                      : (ch >= 'a' && ch <= 'f') ? ch - 'a' + 10
                      : (ch >= 'A' && ch <= 'F') ? ch - 'A' + 10 : -1;
        if (d < 0 || size > (1LL << 40)) valid = false;
        size = size * 16 + (d < 0 ? 0 : d);
      }
      if (!valid) {
        c->in.clear();
        Finish(c, "malformed chunked encoding from the server", now);
        return;
      }
      pos = eol + 2;
      c->remaining = size;
      c->chunk = size == 0 ? Conn::ChunkState::kTrailer : Conn::ChunkState::kData;
    } else if (c->chunk == Conn::ChunkState::kData) {
      const size_t take = std::min<size_t>(c->in.size() - pos, static_cast<size_t>(c->remaining));
      if (take == 0) break;
      if (h) h->OnBody(std::string_view(c->in.data() + pos, take), now);
      pos += take;
      c->remaining -= static_cast<long long>(take);
      if (c->remaining == 0) c->chunk = Conn::ChunkState::kDataEnd;
    } else if (c->chunk == Conn::ChunkState::kDataEnd) {
      if (c->in.size() - pos < 2) break;
      pos += 2;
      c->chunk = Conn::ChunkState::kSize;
    } else {  // trailer lines until an empty one
      const size_t eol = c->in.find("\r\n", pos);
      if (eol == std::string::npos) break;
      const bool empty = eol == pos;
      pos = eol + 2;
      if (empty) {
        c->in.erase(0, pos);
        Finish(c, "", now);
        return;
      }
    }
  }
  c->in.erase(0, pos);
}

void HttpClient::Finish(Conn* c, const std::string& error, double now) {
  HttpResponseHandler* h = c->handler;
  c->handler = nullptr;
  const bool reusable = error.empty() && c->keep_alive && c->in.empty();
  if (reusable) {
    c->state = Conn::State::kIdle;
    c->reused = false;
    Watch(c, EPOLLIN | EPOLLRDHUP, false);
    idle_.push_back(c);
  } else {
    Close(c);
  }
  if (h) {
    --in_flight_;
    h->OnDone(error, now);
  }
}

void HttpClient::Close(Conn* c) {
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, c->fd, nullptr);
  ::close(c->fd);
  c->fd = -1;
  // Freed at the end of Poll: later events of the same epoll batch may still point at it.
  auto it = std::find_if(conns_.begin(), conns_.end(), [c](const auto& p) { return p.get() == c; });
  if (it != conns_.end()) {
    closed_.push_back(std::move(*it));
    std::swap(*it, conns_.back());
    conns_.pop_back();
  }
}

void HttpClient::CheckTimeouts(double now) {
  std::vector<Conn*> late;
  for (auto& c : conns_) {
    if (c->handler && now > c->deadline) late.push_back(c.get());
  }
  for (Conn* c : late) Finish(c, StrCat("timed out after ", timeout_s_, " s"), now);
}

void HttpClient::Poll(double timeout_s) {
  epoll_event events[256];
  timespec ts{};
  timeout_s = std::max(0.0, timeout_s);
  ts.tv_sec = static_cast<time_t>(timeout_s);
  ts.tv_nsec = static_cast<long>((timeout_s - static_cast<double>(ts.tv_sec)) * 1e9);
  // epoll_pwait2 takes nanoseconds; epoll_wait's milliseconds would make arrivals up to 1 ms late.
  int n = epoll_pwait2(epoll_fd_, events, 256, &ts, nullptr);
  if (n < 0 && errno == ENOSYS) n = epoll_wait(epoll_fd_, events, 256, static_cast<int>(timeout_s * 1000));
  for (int i = 0; i < n; ++i) {
    auto* c = static_cast<Conn*>(events[i].data.ptr);
    if (c->fd >= 0) HandleEvent(c, events[i].events);
  }
  closed_.clear();
  const double now = NowSeconds();
  if (now - last_timeout_check_ > 0.1) {
    last_timeout_check_ = now;
    CheckTimeouts(now);
  }
}

}  // namespace gk::bench
