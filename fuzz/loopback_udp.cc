#include "fuzz/loopback_udp.h"

#include <dirent.h>
#include <sys/socket.h>

#include "fuzz/fuzz_check.h"
#include "netstack/backend/udp_host_socket.h"

namespace netstack::fuzz {

LoopbackUdp BindLoopbackUdp(const transport::IpAddress& ip, int rcvbuf) {
  LoopbackUdp u;
  u.fd = socket(ip.is_v4() ? AF_INET : AF_INET6,
                SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  FUZZ_CHECK(u.fd >= 0);
  (void)setsockopt(u.fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
  sockaddr_storage ss;
  socklen_t len = backend::ToSockaddr(transport::SocketAddress{ip, 0}, ss);
  FUZZ_CHECK(bind(u.fd, reinterpret_cast<sockaddr*>(&ss), len) == 0);
  len = sizeof(ss);
  FUZZ_CHECK(getsockname(u.fd, reinterpret_cast<sockaddr*>(&ss), &len) == 0);
  u.addr = *backend::FromSockaddr(ss, len);
  return u;
}

std::optional<Datagram> RecvDatagram(int fd) {
  static std::vector<uint8_t> buf(70000);
  sockaddr_storage ss;
  socklen_t len = sizeof(ss);
  const ssize_t n = recvfrom(fd, buf.data(), buf.size(), MSG_DONTWAIT,
                             reinterpret_cast<sockaddr*>(&ss), &len);
  if (n < 0) return std::nullopt;
  return Datagram{std::vector<uint8_t>(buf.begin(), buf.begin() + n),
                  *backend::FromSockaddr(ss, len)};
}

size_t OpenFdCount() {
  size_t n = 0;
  DIR* d = opendir("/proc/self/fd");
  FUZZ_CHECK(d != nullptr);
  while (readdir(d) != nullptr) ++n;
  closedir(d);
  return n;
}

}  // namespace netstack::fuzz
