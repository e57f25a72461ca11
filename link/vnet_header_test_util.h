// Hand-built TCP GSO super-segments (testonly), laid out as the contract
// in netstack/buffer/packet.h says a GSO packet reaches the link:
// Ethernet (+ optional 802.1Q tag) + IPv4/IPv6 + TCP with timestamps in
// the headers, IP lengths covering the whole super-segment, and the TCP
// checksum field holding the non-complemented pseudo-header sum.
#ifndef NETSTACK_LINK_VNET_HEADER_TEST_UTIL_H_
#define NETSTACK_LINK_VNET_HEADER_TEST_UTIL_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "netstack/buffer/chunk.h"
#include "netstack/buffer/packet.h"
#include "netstack/wire/address.h"

namespace netstack::link::testing {

struct TcpGsoSpec {
  wire::MacAddress src_mac;
  wire::MacAddress dst_mac;
  std::optional<uint16_t> vlan_tci;  // one 802.1Q tag when set
  bool v6 = false;
  wire::Ipv4Address src4;
  wire::Ipv4Address dst4;
  wire::Ipv6Address src6;
  wire::Ipv6Address dst6;
  uint16_t ipv4_ident = 0x1000;
  uint16_t src_port = 40000;
  uint16_t dst_port = 5201;
  uint32_t seq = 1000;
  uint32_t ack = 1;
  uint8_t flags = 0x18;  // ACK | PSH
  uint16_t mss = 1448;
};

// Bytes of Ethernet (+ tag) + IP + TCP (with the 12-byte timestamps
// option) that MakeTcpGsoPacket writes.
size_t TcpGsoHeaderLen(const TcpGsoSpec& spec);

// The super-segment carrying `payload`, split over two payload views (the
// halves, each copied into a chunk), with GsoInfo {kTcpV4/kTcpV6, mss}.
// Null if a pool is exhausted.
buffer::PacketPtr MakeTcpGsoPacket(buffer::PacketPool& packets,
                                   buffer::ChunkPool& chunks,
                                   const TcpGsoSpec& spec,
                                   std::span<const uint8_t> payload);

// `n` bytes of a position-dependent pattern, so a misplaced or repeated
// slice shows.
std::vector<uint8_t> PatternBytes(size_t n, uint32_t seed);

}  // namespace netstack::link::testing

#endif  // NETSTACK_LINK_VNET_HEADER_TEST_UTIL_H_
