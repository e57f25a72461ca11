#include "tools/pcap_inspect/decode.h"

#include "netstack/wire/checksum.h"
#include "netstack/wire/ip_protocol.h"

namespace netstack::tools {
namespace {

using wire::WireError;

bool Fail(DecodedFrame& out, std::string_view layer, WireError e) {
  if (e == WireError::kOk) return false;
  out.error = e;
  out.error_layer = layer;
  return true;
}

// Decodes the transport layer. `pseudo_sum` is the folded pseudo-header
// sum for TCP/UDP over this network header.
void DecodeTransport(DecodedFrame& out, uint8_t protocol,
                     std::span<const uint8_t> bytes, uint16_t pseudo_sum,
                     bool ipv6) {
  switch (static_cast<wire::IpProtocol>(protocol)) {
    case wire::IpProtocol::kTcp: {
      wire::TcpHeader tcp(bytes);
      wire::TcpRepr repr;
      if (Fail(out, "tcp", wire::TcpRepr::Parse(tcp, repr))) return;
      out.tcp = repr;
      out.l4_payload_len = tcp.Payload().size();
      out.l4_checksum_valid = tcp.ChecksumValid(pseudo_sum);
      return;
    }
    case wire::IpProtocol::kUdp: {
      wire::UdpHeader udp(bytes);
      wire::UdpRepr repr;
      if (Fail(out, "udp", wire::UdpRepr::Parse(udp, repr))) return;
      out.udp = repr;
      out.l4_payload_len = repr.payload_len;
      if (udp.HasChecksum() || ipv6) {
        out.l4_checksum_valid = udp.ChecksumValid(
            pseudo_sum, ipv6 ? wire::UdpZeroChecksum::kReject
                             : wire::UdpZeroChecksum::kAccept);
      }
      return;
    }
    case wire::IpProtocol::kIcmp: {
      if (ipv6) return;
      wire::Icmpv4Packet icmp(bytes);
      wire::Icmpv4Repr repr;
      if (Fail(out, "icmpv4", wire::Icmpv4Repr::Parse(icmp, repr))) return;
      out.icmpv4 = repr;
      out.l4_checksum_valid = icmp.ChecksumValid();
      return;
    }
    default:
      return;  // Not decoded; the network layer says which protocol.
  }
}

void DecodeIpv4(DecodedFrame& out, std::span<const uint8_t> bytes) {
  wire::Ipv4Packet ip(bytes);
  wire::Ipv4Repr repr;
  if (Fail(out, "ipv4", wire::Ipv4Repr::Parse(ip, repr))) return;
  out.ipv4 = repr;
  out.ipv4_checksum_valid = ip.HeaderChecksumValid();
  out.l4_protocol = repr.protocol;
  if (repr.fragment_offset != 0) {
    out.non_first_fragment = true;
    return;
  }
  const uint16_t pseudo = wire::Ipv4PseudoHeaderSum(
      repr.src, repr.dst, repr.protocol,
      static_cast<uint32_t>(ip.Payload().size()));
  if (repr.more_fragments) {
    // A first fragment: the transport header is here, the checksum covers
    // data in later fragments, so it cannot be checked.
    DecodeTransport(out, repr.protocol, ip.Payload(), pseudo, false);
    out.l4_checksum_valid.reset();
    return;
  }
  DecodeTransport(out, repr.protocol, ip.Payload(), pseudo, false);
}

void DecodeIpv6(DecodedFrame& out, std::span<const uint8_t> bytes) {
  wire::Ipv6Packet ip(bytes);
  wire::Ipv6Repr repr;
  if (Fail(out, "ipv6", wire::Ipv6Repr::Parse(ip, repr))) return;
  out.ipv6 = repr;
  wire::Ipv6ExtensionInfo ext;
  if (Fail(out, "ipv6_ext",
           wire::WalkIpv6ExtensionHeaders(ip.Payload(), repr.next_header,
                                          ext))) {
    return;
  }
  out.ipv6_ext = ext;
  out.l4_protocol = ext.upper_protocol;
  if (ext.fragment && ext.fragment->header.offset != 0) {
    out.non_first_fragment = true;
    return;
  }
  const auto upper = ip.Payload().subspan(ext.upper_offset);
  const uint16_t pseudo =
      wire::Ipv6PseudoHeaderSum(repr.src, repr.dst, ext.upper_protocol,
                                static_cast<uint32_t>(upper.size()));
  if (ext.upper_protocol == static_cast<uint8_t>(wire::IpProtocol::kIcmpv6)) {
    wire::Icmpv6Packet icmp(upper);
    wire::Icmpv6Repr icmp_repr;
    if (Fail(out, "icmpv6", wire::Icmpv6Repr::Parse(icmp, icmp_repr))) return;
    out.icmpv6 = icmp_repr;
    if (!ext.fragment) out.l4_checksum_valid = icmp.ChecksumValid(repr.src, repr.dst);
    return;
  }
  DecodeTransport(out, ext.upper_protocol, upper, pseudo, true);
  if (ext.fragment) out.l4_checksum_valid.reset();
}

}  // namespace

DecodedFrame DecodeFrame(std::span<const uint8_t> frame) {
  DecodedFrame out;
  wire::EthernetFrame eth(frame);
  wire::EthernetRepr eth_repr;
  if (Fail(out, "ethernet", wire::EthernetRepr::Parse(eth, eth_repr))) {
    return out;
  }
  out.eth = eth_repr;
  const auto payload = eth.Payload();
  switch (static_cast<wire::EtherType>(eth_repr.ethertype)) {
    case wire::EtherType::kArp: {
      wire::ArpRepr arp;
      if (Fail(out, "arp", wire::ArpRepr::Parse(wire::ArpPacket(payload), arp))) {
        break;
      }
      out.arp = arp;
      break;
    }
    case wire::EtherType::kIpv4:
      DecodeIpv4(out, payload);
      break;
    case wire::EtherType::kIpv6:
      DecodeIpv6(out, payload);
      break;
    default:
      break;  // Other EtherTypes are shown by number only.
  }
  return out;
}

std::string TcpFlagString(uint8_t flags) {
  static constexpr struct {
    uint8_t bit;
    char letter;
  } kLetters[] = {
      {wire::tcp_flag::kFin, 'F'}, {wire::tcp_flag::kSyn, 'S'},
      {wire::tcp_flag::kRst, 'R'}, {wire::tcp_flag::kPsh, 'P'},
      {wire::tcp_flag::kAck, 'A'}, {wire::tcp_flag::kUrg, 'U'},
      {wire::tcp_flag::kEce, 'E'}, {wire::tcp_flag::kCwr, 'C'},
  };
  std::string s;
  for (const auto& l : kLetters) {
    if (flags & l.bit) s.push_back(l.letter);
  }
  return s.empty() ? "." : s;
}

}  // namespace netstack::tools
