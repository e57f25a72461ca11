#include "link/gso_test_util.h"

#include <algorithm>
#include <cstring>
#include <optional>

#include "netstack/wire/checksum.h"
#include "netstack/wire/ethernet.h"
#include "netstack/wire/ip_protocol.h"
#include "netstack/wire/ipv4.h"
#include "netstack/wire/ipv6.h"

namespace netstack::link::testing {

namespace {

constexpr uint8_t kTcp = static_cast<uint8_t>(wire::IpProtocol::kTcp);

wire::Ipv6Address OrDefault(const wire::Ipv6Address& a, const char* text) {
  return a.IsZero() ? *wire::Ipv6Address::Parse(text) : a;
}

}  // namespace

buffer::PacketPtr MakeSuperSegment(
    buffer::PacketPool& packets, const SuperSegmentSpec& spec,
    std::span<const buffer::PayloadView> payload) {
  buffer::PacketPtr p = packets.Allocate();
  if (p == nullptr) return nullptr;
  for (const buffer::PayloadView& v : payload) {
    if (!p->AppendPayload(v)) return nullptr;
  }
  const size_t payload_len = p->payload_size();

  wire::TcpRepr tcp;
  tcp.src_port = spec.src_port;
  tcp.dst_port = spec.dst_port;
  tcp.seq = spec.seq;
  tcp.ack = spec.ack;
  tcp.flags = spec.flags;
  tcp.window = 502;
  if (spec.timestamps) tcp.timestamps = wire::TcpTimestamps{0x01020304, 7};
  const size_t tcp_len = tcp.BufferLen() + payload_len;

  wire::EthernetRepr eth;
  eth.src = spec.src_mac;
  eth.dst = spec.dst_mac;
  if (spec.vlan) eth.vlan = wire::VlanTag{0x8100, 0x0123};
  const size_t ip_len = spec.ip_header_len();
  const size_t header_len = eth.BufferLen() + ip_len + tcp.BufferLen();
  auto room = p->headers().Prepend(header_len);
  if (!room.has_value()) return nullptr;
  const std::span<uint8_t> hdr = *room;
  const std::span<uint8_t> tcp_bytes = hdr.subspan(eth.BufferLen() + ip_len);
  tcp.Emit(wire::MutableTcpHeader(tcp_bytes));

  uint16_t pseudo = 0;
  if (spec.v6) {
    eth.ethertype = static_cast<uint16_t>(wire::EtherType::kIpv6);
    wire::Ipv6Repr ip;
    ip.src = OrDefault(spec.src6, "fd00::1");
    ip.dst = OrDefault(spec.dst6, "fd00::2");
    ip.next_header = kTcp;
    ip.payload_len = static_cast<uint16_t>(tcp_len);
    ip.Emit(wire::MutableIpv6Packet(hdr.subspan(eth.BufferLen())));
    pseudo = wire::Ipv6PseudoHeaderSum(ip.src, ip.dst, kTcp,
                                       static_cast<uint32_t>(tcp_len));
    p->gso() = buffer::GsoInfo{buffer::GsoType::kTcpV6, spec.mss};
  } else {
    eth.ethertype = static_cast<uint16_t>(wire::EtherType::kIpv4);
    wire::Ipv4Repr ip;
    ip.src = spec.src4;
    ip.dst = spec.dst4;
    ip.protocol = kTcp;
    ip.ident = spec.ident;
    ip.dont_fragment = true;
    ip.payload_len = static_cast<uint16_t>(tcp_len);
    ip.Emit(wire::MutableIpv4Packet(hdr.subspan(eth.BufferLen())));
    pseudo = wire::Ipv4PseudoHeaderSum(ip.src, ip.dst, kTcp,
                                       static_cast<uint32_t>(tcp_len));
    p->gso() = buffer::GsoInfo{buffer::GsoType::kTcpV4, spec.mss};
  }
  eth.Emit(wire::MutableEthernetFrame(hdr));
  // CHECKSUM_PARTIAL, as the stack leaves a super-segment.
  wire::MutableTcpHeader(tcp_bytes).SetChecksum(pseudo);
  return p;
}

std::vector<buffer::PayloadView> SpreadPayload(
    buffer::ChunkPool& pool, std::span<const uint8_t> bytes,
    uint32_t first_offset, size_t pieces,
    std::vector<buffer::ChunkRef>* chunks_out) {
  std::vector<buffer::PayloadView> views;
  if (bytes.empty()) return views;
  // Where each chunk's part of `bytes` starts: (position in bytes, chunk).
  std::vector<std::pair<size_t, buffer::ChunkRef>> parts;
  size_t pos = 0;
  uint32_t offset = std::min<uint32_t>(first_offset, buffer::kChunkSize - 1);
  while (pos < bytes.size()) {
    buffer::ChunkRef chunk = pool.Allocate();
    if (!chunk) return {};
    const size_t n = std::min(bytes.size() - pos, buffer::kChunkSize - offset);
    std::memcpy(chunk->mutable_data().data() + offset, bytes.data() + pos, n);
    parts.emplace_back(pos, chunk);
    if (chunks_out != nullptr) chunks_out->push_back(chunk);
    pos += n;
    offset = 0;
  }
  // Cut positions: the chunk boundaries and about `pieces` odd ones.
  std::vector<size_t> cuts;
  for (size_t i = 1; i < parts.size(); ++i) cuts.push_back(parts[i].first);
  pieces = std::max<size_t>(pieces, 1);
  for (size_t k = 1; k < pieces; ++k) {
    const size_t c = (bytes.size() * k / pieces) | 1;
    if (c < bytes.size()) cuts.push_back(c);
  }
  cuts.push_back(bytes.size());
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  size_t from = 0;
  size_t part = 0;
  for (const size_t to : cuts) {
    if (to == from) continue;
    while (part + 1 < parts.size() && parts[part + 1].first <= from) ++part;
    const uint32_t base =
        (part == 0 ? std::min<uint32_t>(first_offset, buffer::kChunkSize - 1)
                   : 0) +
        static_cast<uint32_t>(from - parts[part].first);
    views.emplace_back(parts[part].second, base,
                       static_cast<uint32_t>(to - from));
    from = to;
  }
  return views;
}

}  // namespace netstack::link::testing
