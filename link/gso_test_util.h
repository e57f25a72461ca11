// Test helpers for software GSO (testonly): TCP super-segments built the
// way the stack queues them (buffer::GsoInfo contract), with the payload
// spread over shared chunks in views with odd boundaries.
#ifndef NETSTACK_LINK_GSO_TEST_UTIL_H_
#define NETSTACK_LINK_GSO_TEST_UTIL_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "netstack/buffer/chunk.h"
#include "netstack/buffer/packet.h"
#include "netstack/buffer/payload_view.h"
#include "netstack/wire/address.h"
#include "netstack/wire/tcp.h"

namespace netstack::link::testing {

// 02:00:00:00:00:<last>
inline wire::MacAddress TestMac(uint8_t last) {
  wire::MacAddress m;
  m.bytes = {0x02, 0, 0, 0, 0, last};
  return m;
}

struct SuperSegmentSpec {
  bool v6 = false;
  // One 802.1Q tag between the MACs and the EtherType.
  bool vlan = false;
  // A Timestamps option (12 bytes of options, Linux's layout).
  bool timestamps = false;
  uint16_t mss = 1460;
  uint8_t flags = wire::tcp_flag::kAck | wire::tcp_flag::kPsh;
  // Near the wrap, so that seq + i * mss and ident + i wrap in long splits.
  uint32_t seq = 0xffff'0000;
  uint32_t ack = 0x1234'5678;
  uint16_t ident = 0xfff0;
  uint16_t src_port = 40000;
  uint16_t dst_port = 5201;
  wire::MacAddress src_mac = TestMac(0x01);
  wire::MacAddress dst_mac = TestMac(0x02);
  wire::Ipv4Address src4 = wire::Ipv4Address::FromU32(0x0a000001);
  wire::Ipv4Address dst4 = wire::Ipv4Address::FromU32(0x0a000002);
  wire::Ipv6Address src6;  // fd00::1 unless set
  wire::Ipv6Address dst6;  // fd00::2 unless set

  size_t ip_header_len() const { return v6 ? 40 : 20; }
  size_t tcp_header_len() const { return timestamps ? 32 : 20; }
  size_t eth_header_len() const { return vlan ? 18 : 14; }
  // Largest payload whose IP length field can cover the super-segment.
  size_t max_payload() const {
    return 65535 - (v6 ? 0 : ip_header_len()) - tcp_header_len();
  }
};

// A super-segment: Ethernet (+ tag) + IPv4/IPv6 + TCP in the headers, IP
// lengths covering `payload`, the TCP checksum field holding the
// pseudo-header sum only, GsoInfo {kTcpV4 or kTcpV6, spec.mss}. The views
// are copied (shared). The IP length fields are written modulo 2^16, so
// a payload above spec.max_payload() gives a packet whose lengths do not
// cover it. Null if the pool is exhausted or there are too many views.
buffer::PacketPtr MakeSuperSegment(buffer::PacketPool& packets,
                                   const SuperSegmentSpec& spec,
                                   std::span<const buffer::PayloadView> payload);

// Writes `bytes` into fresh chunks, starting at `first_offset` of the
// first one and continuing at offset 0 of the next, and returns views of
// them cut into about `pieces` pieces at odd positions (and at each chunk
// boundary). Empty if the pool runs out. `chunks_out` receives the chunks.
std::vector<buffer::PayloadView> SpreadPayload(
    buffer::ChunkPool& pool, std::span<const uint8_t> bytes,
    uint32_t first_offset, size_t pieces,
    std::vector<buffer::ChunkRef>* chunks_out = nullptr);

}  // namespace netstack::link::testing

#endif  // NETSTACK_LINK_GSO_TEST_UTIL_H_
