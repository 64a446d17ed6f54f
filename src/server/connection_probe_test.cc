#include "server/connection_probe.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

namespace gk::server {
namespace {

int Port(int fd, bool peer) {
  sockaddr_in a{};
  socklen_t len = sizeof(a);
  if (peer) {
    getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len);
  } else {
    getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  }
  return ntohs(a.sin_port);
}

TEST(ConnectionProbeTest, FindsTheSocketAndSeesThePeerHangUp) {
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(listen(listener, 1), 0);
  const int port = Port(listener, false);
  const int client = socket(AF_INET, SOCK_STREAM, 0);
  a.sin_port = htons(uint16_t(port));
  ASSERT_EQ(connect(client, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  const int served = accept(listener, nullptr, nullptr);
  ASSERT_GE(served, 0);

  ConnectionProbe probe("127.0.0.1", port, "127.0.0.1", Port(served, true));
  EXPECT_TRUE(probe.found());
  EXPECT_FALSE(probe.PeerClosed());
  ASSERT_EQ(send(client, "x", 1, 0), 1);  // pending data is not a hang-up
  EXPECT_FALSE(probe.PeerClosed());
  close(client);
  pollfd p{served, POLLRDHUP, 0};
  poll(&p, 1, 1000);
  EXPECT_TRUE(probe.PeerClosed());

  EXPECT_FALSE(ConnectionProbe("127.0.0.1", port, "127.0.0.1", 1).found());
  EXPECT_FALSE(ConnectionProbe().PeerClosed());
  close(served);
  close(listener);
}

}  // namespace
}  // namespace gk::server
