// Host datagram sockets for the backend's UDP flows, DNS upstreams and
// ping: conversions between netstack's addresses and sockaddr, and opening
// a non-blocking socket bound to the configured outbound source.
#ifndef NETSTACK_BACKEND_UDP_HOST_SOCKET_H_
#define NETSTACK_BACKEND_UDP_HOST_SOCKET_H_

#include <sys/socket.h>

#include <optional>

#include "absl/status/statusor.h"
#include "netstack/transport/address.h"
#include "netstack/wire/address.h"

namespace netstack::backend {

// `--outbound-bind`: the source address host sockets of each family bind
// to (port 0); nullopt: the kernel's choice.
struct OutboundBind {
  std::optional<wire::Ipv4Address> v4;
  std::optional<wire::Ipv6Address> v6;
};

socklen_t ToSockaddr(const transport::SocketAddress& a, sockaddr_storage& out);
std::optional<transport::SocketAddress> FromSockaddr(const sockaddr_storage& s,
                                                     socklen_t len);

// An IPv6 address that embeds an IPv4 one: IPv4-mapped ::ffff:0:0/96, or
// IPv4-compatible ::/96 other than :: and ::1. An AF_INET6 socket without
// IPV6_V6ONLY sends to a mapped address as IPv4 (::ffff:127.0.0.1 is the
// host's loopback, ::ffff:0.0.0.0 too), so the backend never relays to one.
bool EmbedsIpv4(const transport::IpAddress& ip);

// socket(family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, protocol),
// bound to `bind`'s address of the family if there is one. An AF_INET6
// socket is IPV6_V6ONLY (set before the bind; the socket is not returned
// if that fails), so no connect or sendto can make it speak IPv4. The
// errno comes back in the status (transport/errors.h style:
// ErrnoToStatus).
absl::StatusOr<int> OpenHostDatagramSocket(transport::Family family,
                                           int protocol,
                                           const OutboundBind& bind);

}  // namespace netstack::backend

#endif  // NETSTACK_BACKEND_UDP_HOST_SOCKET_H_
