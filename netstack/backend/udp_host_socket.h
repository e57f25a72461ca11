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

// socket(family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, protocol),
// bound to `bind`'s address of the family if there is one. The errno
// comes back in the status (transport/errors.h style: ErrnoToStatus).
absl::StatusOr<int> OpenHostDatagramSocket(transport::Family family,
                                           int protocol,
                                           const OutboundBind& bind);

}  // namespace netstack::backend

#endif  // NETSTACK_BACKEND_UDP_HOST_SOCKET_H_
