#include "server/listen_backlog.h"

#include <sys/socket.h>

#include <httplib.h>

namespace gk {

DeepListenBacklog::DeepListenBacklog(httplib::Server& server) : fd_(std::make_shared<int>(-1)) {
  server.set_socket_options([fd = fd_](socket_t sock) {
    httplib::default_socket_options(sock);  // SO_REUSEADDR, as without the hook
    *fd = sock;
  });
}

void DeepListenBacklog::Apply() const {
  if (*fd_ >= 0) ::listen(*fd_, SOMAXCONN);  // on a listening socket this only resizes the queue
}

}  // namespace gk
