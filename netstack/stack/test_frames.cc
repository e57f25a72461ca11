#include "netstack/stack/test_frames.h"

#include <algorithm>

#include "netstack/wire/arp.h"
#include "netstack/wire/bytes.h"
#include "netstack/wire/checksum.h"
#include "netstack/wire/ethernet.h"
#include "netstack/wire/icmpv4.h"
#include "netstack/wire/icmpv6.h"
#include "netstack/wire/ipv4.h"
#include "netstack/wire/ipv6.h"

namespace netstack::stack::testing {

std::vector<uint8_t> WithEthernet(const wire::MacAddress& src,
                                  const wire::MacAddress& dst, uint16_t type,
                                  const std::vector<uint8_t>& payload) {
  wire::EthernetRepr eth;
  eth.src = src;
  eth.dst = dst;
  eth.ethertype = type;
  std::vector<uint8_t> out(eth.BufferLen() + payload.size());
  eth.Emit(wire::MutableEthernetFrame(out));
  std::copy(payload.begin(), payload.end(), out.begin() + eth.BufferLen());
  return out;
}

static std::vector<uint8_t> Arp(const Peer& from, wire::ArpOperation op,
                                const wire::MacAddress& target_mac,
                                const wire::Ipv4Address& target_ip,
                                const wire::MacAddress& eth_dst) {
  wire::ArpRepr arp;
  arp.operation = op;
  arp.sender_mac = from.mac;
  arp.sender_ip = from.ip4;
  arp.target_mac = target_mac;
  arp.target_ip = target_ip;
  std::vector<uint8_t> body(arp.BufferLen());
  arp.Emit(wire::MutableArpPacket(body));
  return WithEthernet(from.mac, eth_dst,
                      static_cast<uint16_t>(wire::EtherType::kArp), body);
}

std::vector<uint8_t> ArpRequest(const Peer& from,
                                const wire::Ipv4Address& target) {
  return Arp(from, wire::ArpOperation::kRequest, wire::MacAddress(), target,
             wire::MacAddress::Broadcast());
}

std::vector<uint8_t> ArpReply(const Peer& from, const wire::MacAddress& to_mac,
                              const wire::Ipv4Address& to_ip) {
  return Arp(from, wire::ArpOperation::kReply, to_mac, to_ip, to_mac);
}

std::vector<uint8_t> Icmpv4Echo(uint16_t id, uint16_t seq, size_t size) {
  std::vector<uint8_t> msg(8 + size);
  msg[0] = 8;
  wire::StoreBe16(&msg[4], id);
  wire::StoreBe16(&msg[6], seq);
  for (size_t i = 0; i < size; ++i) msg[8 + i] = static_cast<uint8_t>(i * 7);
  wire::StoreBe16(&msg[2], wire::InternetChecksum(msg));
  return msg;
}

std::vector<std::vector<uint8_t>> Ipv4Packets(const wire::Ipv4Address& src,
                                              const wire::Ipv4Address& dst,
                                              uint8_t protocol, uint16_t ident,
                                              const std::vector<uint8_t>& l4,
                                              size_t mtu) {
  std::vector<std::vector<uint8_t>> out;
  const size_t max_data = ((mtu - 20) / 8) * 8;
  size_t off = 0;
  do {
    const size_t n = std::min(max_data, l4.size() - off);
    wire::Ipv4Repr ip;
    ip.src = src;
    ip.dst = dst;
    ip.protocol = protocol;
    ip.ttl = 64;
    ip.ident = ident;
    ip.fragment_offset = static_cast<uint16_t>(off);
    ip.more_fragments = off + n < l4.size();
    ip.payload_len = static_cast<uint16_t>(n);
    std::vector<uint8_t> pkt(ip.BufferLen() + n);
    ip.Emit(wire::MutableIpv4Packet(pkt));
    std::copy(l4.begin() + off, l4.begin() + off + n,
              pkt.begin() + ip.BufferLen());
    out.push_back(std::move(pkt));
    off += n;
  } while (off < l4.size());
  return out;
}

std::vector<uint8_t> Icmpv6Echo(const wire::Ipv6Address& src,
                                const wire::Ipv6Address& dst, uint16_t id,
                                uint16_t seq, size_t size) {
  std::vector<uint8_t> msg(8 + size);
  msg[0] = 128;
  wire::StoreBe16(&msg[4], id);
  wire::StoreBe16(&msg[6], seq);
  for (size_t i = 0; i < size; ++i) msg[8 + i] = static_cast<uint8_t>(i * 3);
  wire::MutableIcmpv6Packet(msg).FillChecksum(src, dst);
  return msg;
}

std::vector<uint8_t> Icmpv6NeighborSolicitation(
    const Peer& from, const wire::Ipv6Address& target,
    const wire::Ipv6Address* dst, const wire::MacAddress* dst_mac) {
  wire::Icmpv6Repr ns;
  wire::NdpNeighborSolicitation sol;
  sol.target = target;
  sol.options.source_link_layer = from.mac;
  ns.message = sol;
  std::vector<uint8_t> msg(ns.BufferLen());
  ns.Emit(wire::MutableIcmpv6Packet(msg));
  wire::Ipv6Address snm;
  snm.bytes = {0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, 0xff,
               target.bytes[13], target.bytes[14], target.bytes[15]};
  if (dst != nullptr) snm = *dst;
  wire::MutableIcmpv6Packet(msg).FillChecksum(from.ip6, snm);
  auto pkts = Ipv6Packets(from.ip6, snm, 58, 255, 0, msg, 1500);
  wire::MacAddress mac;
  mac.bytes = {0x33, 0x33, snm.bytes[12], snm.bytes[13], snm.bytes[14],
               snm.bytes[15]};
  if (dst_mac != nullptr) mac = *dst_mac;
  return WithEthernet(from.mac, mac,
                      static_cast<uint16_t>(wire::EtherType::kIpv6), pkts[0]);
}

std::vector<std::vector<uint8_t>> Ipv6Packets(const wire::Ipv6Address& src,
                                              const wire::Ipv6Address& dst,
                                              uint8_t next_header,
                                              uint8_t hop_limit,
                                              uint32_t ident,
                                              const std::vector<uint8_t>& l4,
                                              size_t mtu) {
  std::vector<std::vector<uint8_t>> out;
  wire::Ipv6Repr ip;
  ip.src = src;
  ip.dst = dst;
  ip.hop_limit = hop_limit;
  if (40 + l4.size() <= mtu) {
    ip.next_header = next_header;
    ip.payload_len = static_cast<uint16_t>(l4.size());
    std::vector<uint8_t> pkt(40 + l4.size());
    ip.Emit(wire::MutableIpv6Packet(pkt));
    std::copy(l4.begin(), l4.end(), pkt.begin() + 40);
    out.push_back(std::move(pkt));
    return out;
  }
  const size_t max_data = ((mtu - 48) / 8) * 8;
  size_t off = 0;
  while (off < l4.size()) {
    const size_t n = std::min(max_data, l4.size() - off);
    ip.next_header = 44;
    ip.payload_len = static_cast<uint16_t>(8 + n);
    std::vector<uint8_t> pkt(48 + n);
    ip.Emit(wire::MutableIpv6Packet(pkt));
    wire::Ipv6FragmentRepr frag;
    frag.next_header = next_header;
    frag.offset = static_cast<uint16_t>(off);
    frag.more_fragments = off + n < l4.size();
    frag.identification = ident;
    frag.Emit(wire::MutableIpv6FragmentHeader(
        std::span<uint8_t>(pkt).subspan(40, 8)));
    std::copy(l4.begin() + off, l4.begin() + off + n, pkt.begin() + 48);
    out.push_back(std::move(pkt));
    off += n;
  }
  return out;
}

}  // namespace netstack::stack::testing
