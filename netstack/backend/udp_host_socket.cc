#include "netstack/backend/udp_host_socket.h"

#include <netinet/in.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace netstack::backend {

using transport::IpAddress;
using transport::SocketAddress;

socklen_t ToSockaddr(const SocketAddress& a, sockaddr_storage& out) {
  std::memset(&out, 0, sizeof(out));
  if (a.ip.is_v4()) {
    auto* s = reinterpret_cast<sockaddr_in*>(&out);
    s->sin_family = AF_INET;
    s->sin_port = htons(a.port);
    std::memcpy(&s->sin_addr, a.ip.v4().bytes.data(), 4);
    return sizeof(sockaddr_in);
  }
  auto* s = reinterpret_cast<sockaddr_in6*>(&out);
  s->sin6_family = AF_INET6;
  s->sin6_port = htons(a.port);
  std::memcpy(&s->sin6_addr, a.ip.v6().bytes.data(), 16);
  return sizeof(sockaddr_in6);
}

std::optional<SocketAddress> FromSockaddr(const sockaddr_storage& s,
                                          socklen_t len) {
  if (s.ss_family == AF_INET && len >= sizeof(sockaddr_in)) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&s);
    return SocketAddress{
        IpAddress(wire::Ipv4Address::FromBytes(
            reinterpret_cast<const uint8_t*>(&a->sin_addr))),
        ntohs(a->sin_port)};
  }
  if (s.ss_family == AF_INET6 && len >= sizeof(sockaddr_in6)) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&s);
    return SocketAddress{
        IpAddress(wire::Ipv6Address::FromBytes(
            reinterpret_cast<const uint8_t*>(&a->sin6_addr))),
        ntohs(a->sin6_port)};
  }
  return std::nullopt;
}

bool EmbedsIpv4(const IpAddress& ip) {
  return ip.is_v6() && ip.v6().EmbedsIpv4();
}

absl::StatusOr<int> OpenHostDatagramSocket(transport::Family family,
                                           int protocol,
                                           const OutboundBind& bind) {
  const bool v4 = family == transport::Family::kIpv4;
  const int fd = socket(v4 ? AF_INET : AF_INET6,
                        SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, protocol);
  if (fd < 0) {
    return absl::ErrnoToStatus(errno, "socket");
  }
  if (!v4) {
    // Review 2026-12-06, finding 3: without it, connect(::ffff:127.0.0.1)
    // is IPv4 to the host's loopback whatever the backend's policy says.
    const int on = 1;
    if (setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &on, sizeof(on)) != 0) {
      const int err = errno;
      close(fd);
      return absl::ErrnoToStatus(err, "setsockopt IPV6_V6ONLY");
    }
  }
  std::optional<SocketAddress> local;
  if (v4 && bind.v4) local = SocketAddress{IpAddress(*bind.v4), 0};
  if (!v4 && bind.v6) local = SocketAddress{IpAddress(*bind.v6), 0};
  if (local) {
    sockaddr_storage ss;
    const socklen_t len = ToSockaddr(*local, ss);
    if (::bind(fd, reinterpret_cast<const sockaddr*>(&ss), len) != 0) {
      const int err = errno;
      close(fd);
      return absl::ErrnoToStatus(err,
                                 absl::StrCat("bind ", local->ToString()));
    }
  }
  return fd;
}

}  // namespace netstack::backend
