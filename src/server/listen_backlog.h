// cpp-httplib 0.11 (Debian 12) listens with a backlog of 5, fixed inside its shared library. A
// burst of connects (a benchmark at request rate "inf" opens hundreds at once) overflows that
// accept queue; the kernel drops the extra SYNs and clients retry them only after a second,
// which shows up as a 1 s TTFT. This hooks the server's socket creation to learn the listening
// socket and, once bound, listens again on it with the system's maximum backlog.
#pragma once

#include <memory>

namespace httplib {
class Server;
}

namespace gk {

class DeepListenBacklog {
 public:
  // Installs the hook; call before bind_to_port / bind_to_any_port.
  explicit DeepListenBacklog(httplib::Server& server);
  // After a successful bind: re-listens with SOMAXCONN (the kernel caps it at net.core.somaxconn).
  void Apply() const;

 private:
  std::shared_ptr<int> fd_;  // shared with the hook, which the server keeps
};

}  // namespace gk
