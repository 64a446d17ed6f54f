// Tells whether the client of an HTTP request has gone away, without reading from or writing
// to the connection. cpp-httplib 0.11.4 exposes neither the socket nor a "connection closed"
// query to handlers, so the socket is found once by its address pair (/proc/self/fd, then
// getsockname/getpeername), and polled for POLLRDHUP/POLLHUP/POLLERR. The fd stays valid while
// the handler (or its content provider) runs: httplib closes it only after the response.
#pragma once

#include <string>

namespace gk::server {

class ConnectionProbe {
 public:
  ConnectionProbe() = default;
  // Finds the socket whose local and peer addresses are these (as httplib reports them).
  ConnectionProbe(const std::string& local_addr, int local_port, const std::string& remote_addr, int remote_port);

  bool found() const { return fd_ >= 0; }
  // True once the peer closed or reset the connection. False when the socket was not found.
  bool PeerClosed() const;

 private:
  int fd_ = -1;
};

}  // namespace gk::server
