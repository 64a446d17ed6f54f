#include "server/connection_probe.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

namespace gk::server {
namespace {

// Compares a socket address with httplib's textual address and port without formatting it.
bool SameEndpoint(const sockaddr_storage& ss, const std::string& addr, int port) {
  if (ss.ss_family == AF_INET) {
    const auto& a = reinterpret_cast<const sockaddr_in&>(ss);
    in_addr want{};
    return ntohs(a.sin_port) == port && inet_pton(AF_INET, addr.c_str(), &want) == 1 &&
           want.s_addr == a.sin_addr.s_addr;
  }
  if (ss.ss_family == AF_INET6) {
    const auto& a = reinterpret_cast<const sockaddr_in6&>(ss);
    in6_addr want{};
    if (ntohs(a.sin6_port) != port) return false;
    if (inet_pton(AF_INET6, addr.c_str(), &want) == 1) return std::memcmp(&want, &a.sin6_addr, sizeof(want)) == 0;
    char host[NI_MAXHOST];  // e.g. a scoped or v4-mapped form: compare as text
    return getnameinfo(reinterpret_cast<const sockaddr*>(&ss), sizeof(sockaddr_in6), host, sizeof(host), nullptr, 0,
                       NI_NUMERICHOST) == 0 && addr == host;
  }
  return false;
}

}  // namespace

ConnectionProbe::ConnectionProbe(const std::string& local_addr, int local_port, const std::string& remote_addr,
                                 int remote_port) {
  if (remote_port <= 0 || local_port <= 0) return;
  DIR* dir = opendir("/proc/self/fd");
  if (!dir) return;
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    const int fd = std::atoi(e->d_name);
    if (fd == dirfd(dir)) continue;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    sockaddr_storage peer{}, local{};
    socklen_t plen = sizeof(peer), llen = sizeof(local);
    if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &plen) != 0) continue;
    if (!SameEndpoint(peer, remote_addr, remote_port)) continue;
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &llen) != 0) continue;
    if (!SameEndpoint(local, local_addr, local_port)) continue;
    fd_ = fd;
    break;
  }
  closedir(dir);
}

bool ConnectionProbe::PeerClosed() const {
  if (fd_ < 0) return false;
  pollfd p{fd_, POLLRDHUP, 0};
  if (poll(&p, 1, 0) <= 0) return false;
  return (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
}

}  // namespace gk::server
