// Builds the UDP datagrams the guest configuration servers send: the
// message sits in a pooled chunk (a payload view), the UDP header with
// its checksum in the packet's headroom.
#ifndef NETSTACK_BACKEND_GUEST_CONFIG_UDP_H_
#define NETSTACK_BACKEND_GUEST_CONFIG_UDP_H_

#include <cstdint>

#include "netstack/buffer/chunk.h"
#include "netstack/buffer/packet.h"

namespace netstack::backend {

// `len` bytes at the start of `chunk` are the payload. `pseudo_header_sum`
// is the IP pseudo-header's for a UDP length of 8 + len. nullptr when the
// packet pool is exhausted.
buffer::PacketPtr MakeUdpPacket(buffer::PacketPool& packets,
                                buffer::ChunkRef chunk, uint32_t len,
                                uint16_t src_port, uint16_t dst_port,
                                uint16_t pseudo_header_sum);

}  // namespace netstack::backend

#endif  // NETSTACK_BACKEND_GUEST_CONFIG_UDP_H_
