// A trivial OpenAI-compatible streaming server whose timing is set, not computed: a fixed
// delay before the first chunk, a fixed gap between chunks, a fixed number of tokens. The
// benchmark client is checked against it (what it measures must equal what was configured,
// and what the server logged it sent), and `gemmakit bench client-check` uses it to measure
// the client's own overhead. It can also misbehave on chosen requests: HTTP 500, a connection
// dropped mid-stream, malformed SSE, a stream with no choices.
//
// Requests are told apart by their x-request-id's trailing number (bench serve sends
// "<prefix><index>"); requests without one are never faulted.
#pragma once

#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "util/result.h"

namespace httplib {
class Server;
}

namespace gk::bench {

struct FakeServerOptions {
  double ttft_s = 0.05;      // request received -> first chunk written
  double itl_s = 0.01;       // between chunks
  int tokens_per_chunk = 1;  // > 1 packs tokens as some servers do (still one ITL sample each)
  int prompt_tokens = -1;    // usage.prompt_tokens; -1: the prompt's whitespace-separated words
  bool chunked = true;       // Transfer-Encoding: chunked; false: close-delimited body
  std::string model = "fake-model";
  int threads = 1100;        // one per open stream (cpp-httplib blocks a thread per connection)
  std::set<int> fail_500, drop_mid_stream, malformed_sse, no_choices;  // request indices
};

// What the server did for one request, on the same steady clock as the client.
struct FakeRequestTrace {
  int index = -1;
  double received = 0;           // handler entered
  std::vector<double> sends;     // just before each token chunk was written
};

class FakeSseServer {
 public:
  explicit FakeSseServer(FakeServerOptions options);
  ~FakeSseServer();
  // Binds 127.0.0.1 (port 0: a free one) and serves on a background thread.
  Result<int> Start(int port = 0);
  void Stop();
  std::vector<FakeRequestTrace> traces() const;

 private:
  void Routes();

  FakeServerOptions options_;
  std::unique_ptr<httplib::Server> svr_;
  std::thread thread_;
  mutable std::mutex mu_;
  std::vector<FakeRequestTrace> traces_;
};

}  // namespace gk::bench
