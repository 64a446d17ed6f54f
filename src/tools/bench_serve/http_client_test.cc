// The epoll client against a real HTTP server (cpp-httplib) in the same process.
#include "tools/bench_serve/http_client.h"

#include <gtest/gtest.h>
#include <httplib.h>
#include <sys/socket.h>

#include <thread>

#include "server/listen_backlog.h"
#include "util/clock.h"

namespace gk::bench {
namespace {

class Collect : public HttpResponseHandler {
 public:
  void OnStatus(int s, const std::string& r, double) override {
    status = s;
    reason = r;
  }
  void OnBody(std::string_view b, double) override {
    body.append(b);
    ++pieces;
  }
  void OnDone(const std::string& e, double) override {
    error = e;
    done = true;
  }
  int status = 0, pieces = 0;
  std::string reason, body, error;
  bool done = false;
};

class HttpClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // cpp-httplib holds a thread per open connection, idle keep-alive ones included.
    svr_.new_task_queue = [] { return new httplib::ThreadPool(64); };
    svr_.Get("/len", [](const httplib::Request&, httplib::Response& res) { res.set_content("hello", "text/plain"); });
    svr_.Post("/echo", [](const httplib::Request& req, httplib::Response& res) {
      res.set_content(req.body + "|" + req.get_header_value("X-Test"), "text/plain");
    });
    svr_.Get("/chunked", [](const httplib::Request&, httplib::Response& res) {
      res.set_chunked_content_provider("text/plain", [n = 0](size_t, httplib::DataSink& sink) mutable {
        if (n == 3) {
          sink.done();
          return true;
        }
        const std::string piece = "piece" + std::to_string(n++) + ";";
        sink.write(piece.data(), piece.size());
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        return true;
      });
    });
    svr_.Get("/until-close", [](const httplib::Request&, httplib::Response& res) {
      res.set_content_provider("text/plain", [n = 0](size_t, httplib::DataSink& sink) mutable {
        if (n++ == 2) {
          sink.done();
          return true;
        }
        sink.write("ab", 2);
        return true;
      });
    });
    svr_.Get("/drop", [](const httplib::Request&, httplib::Response& res) {
      res.set_chunked_content_provider("text/plain", [](size_t, httplib::DataSink& sink) {
        sink.write("partial", 7);
        return false;  // abort: the connection closes mid-body
      });
    });
    svr_.Get("/slow", [](const httplib::Request&, httplib::Response& res) {
      std::this_thread::sleep_for(std::chrono::milliseconds(400));
      res.set_content("late", "text/plain");
    });
    svr_.Get("/status", [](const httplib::Request&, httplib::Response& res) {
      res.status = 503;
      res.set_content("busy", "text/plain");
    });
    // httplib's backlog of 5 drops SYNs of a 50-connection burst; clients retry only after 1 s.
    DeepListenBacklog backlog(svr_);
    port_ = svr_.bind_to_any_port("127.0.0.1");
    ASSERT_GT(port_, 0);
    backlog.Apply();
    thread_ = std::thread([this] { svr_.listen_after_bind(); });
    while (!svr_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  void TearDown() override {
    svr_.stop();
    thread_.join();
  }
  std::unique_ptr<HttpClient> Client(double timeout = 10) {
    auto c = HttpClient::Create({"127.0.0.1", port_, "", ""}, timeout);
    EXPECT_TRUE(c.ok()) << c.message();
    return std::move(*c);
  }
  static void Wait(HttpClient& c, Collect& h) {
    const double deadline = NowSeconds() + 30;
    while (!h.done && NowSeconds() < deadline) c.Poll(0.01);
    ASSERT_TRUE(h.done) << "no answer within 30 s";
  }
  static HttpRequest Get(const std::string& path) {
    HttpRequest r;
    r.method = "GET";
    r.path = path;
    return r;
  }

  httplib::Server svr_;
  int port_ = 0;
  std::thread thread_;
};

TEST_F(HttpClientTest, ContentLengthBodyAndHeaders) {
  auto c = Client();
  Collect h;
  HttpRequest r;
  r.path = "/echo";
  r.body = "payload";
  r.headers.emplace_back("X-Test", "yes");
  c->Start(r, &h);
  Wait(*c, h);
  EXPECT_EQ(h.error, "");
  EXPECT_EQ(h.status, 200);
  EXPECT_EQ(h.reason, "OK");
  EXPECT_EQ(h.body, "payload|yes");
}

TEST_F(HttpClientTest, ChunkedBodyArrivesPieceByPiece) {
  auto c = Client();
  Collect h;
  c->Start(Get("/chunked"), &h);
  Wait(*c, h);
  EXPECT_EQ(h.error, "");
  EXPECT_EQ(h.body, "piece0;piece1;piece2;");
  EXPECT_GE(h.pieces, 3);  // 5 ms apart: each chunk is handed over as it arrives
}

TEST_F(HttpClientTest, CloseDelimitedBody) {
  auto c = Client();
  Collect h;
  c->Start(Get("/until-close"), &h);
  Wait(*c, h);
  EXPECT_EQ(h.error, "");
  EXPECT_EQ(h.body, "abab");
}

TEST_F(HttpClientTest, KeepAliveReusesOneConnection) {
  // httplib answers 5 requests per connection, the 5th with "Connection: close": the client
  // must drop that one and open a new connection for the 6th.
  auto c = Client();
  for (int i = 0; i < 8; ++i) {
    Collect h;
    c->Start(Get("/len"), &h);
    Wait(*c, h);
    EXPECT_EQ(h.error, "");
    EXPECT_EQ(h.body, "hello");
    EXPECT_EQ(c->open_connections(), i == 4 ? 0 : 1) << i;
  }
  EXPECT_EQ(c->in_flight(), 0);
}

TEST_F(HttpClientTest, ManyConcurrentRequests) {
  auto c = Client();
  std::vector<Collect> hs(50);
  for (auto& h : hs) c->Start(Get("/chunked"), &h);
  EXPECT_EQ(c->in_flight(), 50);
  for (auto& h : hs) Wait(*c, h);
  for (auto& h : hs) EXPECT_EQ(h.body, "piece0;piece1;piece2;") << h.error;
}

TEST_F(HttpClientTest, DroppedConnectionIsAnError) {
  auto c = Client();
  Collect h;
  c->Start(Get("/drop"), &h);
  Wait(*c, h);
  EXPECT_NE(h.error.find("closed the connection"), std::string::npos) << h.error;
  EXPECT_EQ(c->open_connections(), 0);
}

TEST_F(HttpClientTest, ErrorStatusIsAResponseNotAnError) {
  auto c = Client();
  Collect h;
  c->Start(Get("/status"), &h);
  Wait(*c, h);
  EXPECT_EQ(h.error, "");
  EXPECT_EQ(h.status, 503);
  EXPECT_EQ(h.body, "busy");
}

TEST_F(HttpClientTest, TimeoutEndsTheRequest) {
  auto c = Client(0.1);
  Collect h;
  c->Start(Get("/slow"), &h);
  Wait(*c, h);
  EXPECT_NE(h.error.find("timed out"), std::string::npos) << h.error;
}

TEST_F(HttpClientTest, RefusedConnection) {
  // A port nobody listens on: bind one and close it.
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  auto c = HttpClient::Create({"127.0.0.1", ntohs(a.sin_port), "", ""}, 5);
  ASSERT_TRUE(c.ok());
  Collect h;
  (*c)->Start(Get("/len"), &h);
  Wait(**c, h);
  EXPECT_NE(h.error.find("cannot connect"), std::string::npos) << h.error;
}

TEST(BaseUrlTest, Parses) {
  auto u = ParseBaseUrl("http://example.org:8080/api/");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->host, "example.org");
  EXPECT_EQ(u->port, 8080);
  EXPECT_EQ(u->path_prefix, "/api");
  u = ParseBaseUrl("http://[::1]:9000");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->host, "::1");
  EXPECT_EQ(u->port, 9000);
  EXPECT_EQ(ParseBaseUrl("http://h")->port, 80);
  EXPECT_FALSE(ParseBaseUrl("https://h").ok());
  EXPECT_FALSE(ParseBaseUrl("h:80").ok());
  EXPECT_FALSE(ParseBaseUrl("http://h:99999").ok());
  EXPECT_FALSE(ParseBaseUrl("http://:80").ok());
}

}  // namespace
}  // namespace gk::bench
