// ICMP and ICMPv6 destination-unreachable messages the backend sends to
// the guest on behalf of a host peer: from the peer's (foreign) address,
// quoting a UDP datagram the guest sent to it (RFC 792, RFC 4443 3.1).
//
// The quote is rebuilt from the flow's addresses and ports (IP header and
// the 8-byte UDP header, the minimum RFC 1122 3.2.2 asks for): the
// datagram itself has long left. The guest's kernel matches the error to
// its socket by those fields only (Linux __udp4_lib_err, __udp6_lib_err).
#ifndef NETSTACK_BACKEND_UDP_ICMP_H_
#define NETSTACK_BACKEND_UDP_ICMP_H_

#include <cstdint>

#include "netstack/base/time.h"
#include "netstack/buffer/packet.h"
#include "netstack/stack/stack.h"
#include "netstack/transport/address.h"

namespace netstack::backend {

enum class Unreachable : uint8_t {
  kPort,           // v4 3/3, v6 1/4
  kHost,           // v4 3/1, v6 1/3 (address unreachable)
  kNet,            // v4 3/0, v6 1/0 (no route)
  kAdminProhibited,  // v4 3/13, v6 1/1
};

// Sends the error from `peer.ip` to `guest.ip` about a datagram of
// `udp_len` bytes (header included) that went from `guest` to `peer`.
// False if the stack's ICMP error budget was spent, no packet buffer was
// left, or the stack dropped it (each counted).
bool SendUdpUnreachable(stack::Stack& stack, buffer::PacketPool& packets,
                        Unreachable what, const transport::SocketAddress& guest,
                        const transport::SocketAddress& peer,
                        uint16_t udp_len, Instant now);

}  // namespace netstack::backend

#endif  // NETSTACK_BACKEND_UDP_ICMP_H_
