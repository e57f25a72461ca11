#include "link/vnet_header_test_util.h"

#include "link/fd_test_util.h"
#include "netstack/wire/bytes.h"
#include "netstack/wire/checksum.h"
#include "netstack/wire/ethernet.h"
#include "netstack/wire/ipv4.h"
#include "netstack/wire/ipv6.h"
#include "netstack/wire/tcp.h"

namespace netstack::link::testing {
namespace {

constexpr size_t kTcpHeaderLen = 20 + 12;  // with timestamps

}  // namespace

size_t TcpGsoHeaderLen(const TcpGsoSpec& spec) {
  return 14 + (spec.vlan_tci ? 4 : 0) + (spec.v6 ? 40 : 20) + kTcpHeaderLen;
}

buffer::PacketPtr MakeTcpGsoPacket(buffer::PacketPool& packets,
                                   buffer::ChunkPool& chunks,
                                   const TcpGsoSpec& spec,
                                   std::span<const uint8_t> payload) {
  buffer::PacketPtr p = packets.Allocate();
  if (!p) return p;
  ChunkWriter writer(chunks);
  const size_t half = payload.size() / 2;
  for (std::span<const uint8_t> piece :
       {payload.first(half), payload.subspan(half)}) {
    buffer::PayloadView v = writer.Write(piece);
    if (v.size() != piece.size() || !p->AppendPayload(v)) return nullptr;
  }

  wire::TcpRepr tcp;
  tcp.src_port = spec.src_port;
  tcp.dst_port = spec.dst_port;
  tcp.seq = spec.seq;
  tcp.ack = spec.ack;
  tcp.flags = spec.flags;
  tcp.window = 512;
  tcp.timestamps = wire::TcpTimestamps{0x01020304, 0x0a0b0c0d};
  const uint32_t tcp_len =
      static_cast<uint32_t>(tcp.BufferLen() + payload.size());
  auto tcp_bytes = p->headers().Prepend(tcp.BufferLen());
  if (!tcp_bytes) return nullptr;
  tcp.Emit(wire::MutableTcpHeader(*tcp_bytes));
  // CHECKSUM_PARTIAL: the pseudo-header sum only, not complemented.
  const uint16_t pseudo =
      spec.v6 ? wire::Ipv6PseudoHeaderSum(spec.src6, spec.dst6, 6, tcp_len)
              : wire::Ipv4PseudoHeaderSum(spec.src4, spec.dst4, 6, tcp_len);
  wire::StoreBe16(tcp_bytes->data() + 16, pseudo);

  wire::EthernetRepr eth;
  if (spec.v6) {
    wire::Ipv6Repr ip;
    ip.src = spec.src6;
    ip.dst = spec.dst6;
    ip.next_header = 6;
    ip.payload_len = static_cast<uint16_t>(tcp_len);
    auto ip_bytes = p->headers().Prepend(ip.BufferLen());
    if (!ip_bytes) return nullptr;
    ip.Emit(wire::MutableIpv6Packet(*ip_bytes));
    eth.ethertype = static_cast<uint16_t>(wire::EtherType::kIpv6);
  } else {
    wire::Ipv4Repr ip;
    ip.src = spec.src4;
    ip.dst = spec.dst4;
    ip.protocol = 6;
    ip.ident = spec.ipv4_ident;
    ip.dont_fragment = true;
    ip.payload_len = static_cast<uint16_t>(tcp_len);
    auto ip_bytes = p->headers().Prepend(ip.BufferLen());
    if (!ip_bytes) return nullptr;
    ip.Emit(wire::MutableIpv4Packet(*ip_bytes));
    eth.ethertype = static_cast<uint16_t>(wire::EtherType::kIpv4);
  }
  eth.src = spec.src_mac;
  eth.dst = spec.dst_mac;
  if (spec.vlan_tci) eth.vlan = wire::VlanTag{0x8100, *spec.vlan_tci};
  auto eth_bytes = p->headers().Prepend(eth.BufferLen());
  if (!eth_bytes) return nullptr;
  eth.Emit(wire::MutableEthernetFrame(*eth_bytes));
  p->gso() = buffer::GsoInfo{
      spec.v6 ? buffer::GsoType::kTcpV6 : buffer::GsoType::kTcpV4, spec.mss};
  return p;
}

std::vector<uint8_t> PatternBytes(size_t n, uint32_t seed) {
  std::vector<uint8_t> out(n);
  uint32_t x = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; ++i) {
    x = x * 1103515245u + 12345u;  // an LCG: cheap, and not periodic in 256
    out[i] = static_cast<uint8_t>(x >> 16);
  }
  return out;
}

}  // namespace netstack::link::testing
