// IPv4, ARP and ICMPv4 (RFC 791, 826, 792, 1122, 1812).
#include <array>
#include <utility>

#include "netstack/stack/nic.h"
#include "netstack/stack/stack.h"
#include "netstack/wire/arp.h"
#include "netstack/wire/checksum.h"
#include "netstack/wire/ethernet.h"
#include "netstack/wire/icmpv4.h"
#include "netstack/wire/ip_protocol.h"
#include "netstack/wire/udp.h"

namespace netstack::stack {
namespace {

constexpr uint16_t kIpv4Type = static_cast<uint16_t>(wire::EtherType::kIpv4);
constexpr uint16_t kArpType = static_cast<uint16_t>(wire::EtherType::kArp);
constexpr uint8_t kIcmp = static_cast<uint8_t>(wire::IpProtocol::kIcmp);
constexpr uint8_t kIcmpUnreachable =
    static_cast<uint8_t>(wire::Icmpv4Type::kDestUnreachable);
constexpr uint8_t kCodeProtocolUnreachable =
    static_cast<uint8_t>(wire::Icmpv4UnreachableCode::kProtocolUnreachable);
constexpr uint8_t kCodePortUnreachable =
    static_cast<uint8_t>(wire::Icmpv4UnreachableCode::kPortUnreachable);

}  // namespace

bool Stack::IsOurIpv4(const Nic& nic, const wire::Ipv4Address& a) const {
  for (const Ipv4Cidr& c : nic.ipv4) {
    if (c.address == a) return true;
  }
  return false;
}

bool Stack::IsIpv4BroadcastFor(const Nic& nic,
                               const wire::Ipv4Address& a) const {
  const uint32_t v = a.ToU32();
  if (v == 0xffffffffu) return true;
  for (const Ipv4Cidr& c : nic.ipv4) {
    if (c.prefix_len >= 31) continue;  // RFC 3021: /31 has no broadcast
    const uint32_t host_mask = 0xffffffffu >> c.prefix_len;
    if ((v | host_mask) == (c.address.ToU32() | host_mask) &&
        (v & host_mask) == host_mask) {
      return true;
    }
  }
  return false;
}

std::optional<wire::Ipv4Address> Stack::SourceFor(
    const Nic& nic, const wire::Ipv4Address& dst) const {
  // Prefer an address on the destination's subnet, else the first one.
  for (const Ipv4Cidr& c : nic.ipv4) {
    if (c.Contains(dst)) return c.address;
  }
  if (!nic.ipv4.empty()) return nic.ipv4.front().address;
  return std::nullopt;
}

bool Stack::GatewaySourceOk(const Nic& nic, const wire::Ipv4Repr& ip) const {
  const GatewayOptions& g = *nic.gateway;
  if (!g.guest4.IsZero() && ip.src == g.guest4) return true;
  // A DHCP client before its lease: UDP to a broadcast or to us.
  return ip.src.IsZero() &&
         ip.protocol == static_cast<uint8_t>(wire::IpProtocol::kUdp) &&
         (IsIpv4BroadcastFor(nic, ip.dst) || IsOurIpv4(nic, ip.dst));
}

bool Stack::GatewayForwards(const Nic& nic,
                            const wire::Ipv4Address& dst) const {
  // Unicast beyond the link: not 0/8, loopback, multicast or class E, a
  // broadcast, or the guest itself.
  const uint32_t v = dst.ToU32();
  return (v >> 24) != 0 && (v >> 24) != 127 && (v >> 28) < 0xe &&
         !IsIpv4BroadcastFor(nic, dst) && dst != nic.gateway->guest4;
}

bool Stack::SendDestUnreachable(const wire::Ipv4Address& src,
                                const wire::Ipv4Address& dst,
                                uint8_t protocol,
                                std::span<const uint8_t> l4_head,
                                IcmpErrorKind kind, Instant now) {
  const auto hop = routes4_.Lookup(src);
  Nic* nic = hop ? FindNic(hop->nic) : nullptr;
  if (nic == nullptr) {
    Drop(DropReason::kNoRoute);
    return false;
  }
  uint8_t code = 1;  // host unreachable
  if (kind == IcmpErrorKind::kNetUnreachable) code = 0;
  if (kind == IcmpErrorKind::kAdminProhibited) code = 13;
  buffer::ChunkRef chunk = chunks_.Allocate();
  if (!chunk) {
    Drop(DropReason::kNoBuffer);
    return false;
  }
  const size_t head = std::min<size_t>(8, l4_head.size());
  wire::Ipv4Repr ip;
  ip.src = src;
  ip.dst = dst;
  ip.protocol = protocol;
  ip.dont_fragment = true;
  ip.payload_len = static_cast<uint16_t>(head);
  auto mem = chunk->mutable_data();
  const size_t hlen = ip.HeaderLen();
  ip.Emit(wire::MutableIpv4Packet(mem.first(hlen)));
  std::copy(l4_head.begin(), l4_head.begin() + head, mem.begin() + hlen);
  buffer::PayloadView all(chunk, 0, static_cast<uint32_t>(hlen + head));
  Ipv4Datagram d;
  d.nic = nic->id;
  d.ip = ip;
  d.header = all.Subview(0, static_cast<uint32_t>(hlen));
  d.payload = all.Subview(static_cast<uint32_t>(hlen),
                          static_cast<uint32_t>(head));
  const uint64_t before = counters_.icmpv4_errors_sent;
  SendIcmpv4Error(d, kIcmpUnreachable, code, 0, now);
  return counters_.icmpv4_errors_sent != before;
}

void Stack::HandleArp(Nic& nic, std::span<const uint8_t> bytes, Instant now) {
  wire::ArpRepr arp;
  if (wire::ArpRepr::Parse(wire::ArpPacket(bytes), arp) !=
      wire::WireError::kOk) {
    return Drop(DropReason::kArpMalformed);
  }
  if (arp.sender_mac.IsMulticast() || arp.sender_ip.IsMulticast() ||
      arp.sender_ip.IsBroadcast()) {
    return Drop(DropReason::kArpBadSender);
  }
  if (IsOurIpv4(nic, arp.sender_ip)) {
    // Someone else claims our address (RFC 5227 2.4): learn nothing and
    // do not answer.
    return Drop(DropReason::kArpAddressConflict);
  }
  const bool for_us = IsOurIpv4(nic, arp.target_ip);
  const bool is_request = arp.operation == wire::ArpOperation::kRequest;
  if (is_request) {
    ++counters_.arp_requests_received;
  } else {
    ++counters_.arp_replies_received;
  }
  // RFC 826 merge: update an existing entry from any ARP; create one only
  // for a request to us (the requester will talk to us next). A reply
  // confirms the entry our own request created; an unsolicited reply
  // creates nothing. A probe (sender 0.0.0.0, RFC 5227) teaches nothing.
  if (!arp.sender_ip.IsZero()) {
    buffer::PacketChain waiting = arp_.Update(
        arp.sender_ip, arp.sender_mac, /*confirmed=*/for_us && !is_request,
        /*create=*/for_us && is_request, now);
    while (buffer::PacketPtr p = waiting.PopFront()) {
      QueueFrame(nic, std::move(p), arp.sender_mac, kIpv4Type);
    }
  }
  if (!for_us) return Drop(DropReason::kArpNotForUs);
  if (is_request) {
    SendArp(nic, static_cast<uint16_t>(wire::ArpOperation::kReply),
            arp.sender_mac, arp.target_ip, arp.sender_mac, arp.sender_ip, now);
    ++counters_.arp_replies_sent;
  }
}

void Stack::SendArp(Nic& nic, uint16_t op, const wire::MacAddress& dst_mac,
                    const wire::Ipv4Address& sender_ip,
                    const wire::MacAddress& target_mac,
                    const wire::Ipv4Address& target_ip, Instant now) {
  buffer::PacketPtr p = packets_.Allocate();
  if (p == nullptr) return Drop(DropReason::kNoBuffer);
  wire::ArpRepr arp;
  arp.operation = static_cast<wire::ArpOperation>(op);
  arp.sender_mac = nic.caps.mac;
  arp.sender_ip = sender_ip;
  arp.target_mac = target_mac;
  arp.target_ip = target_ip;
  auto hdr = p->headers().Prepend(arp.BufferLen());
  if (!hdr) return Drop(DropReason::kNoBuffer);
  arp.Emit(wire::MutableArpPacket(*hdr));
  if (op == static_cast<uint16_t>(wire::ArpOperation::kRequest)) {
    ++counters_.arp_requests_sent;
  }
  QueueFrame(nic, std::move(p), dst_mac, kArpType);
}

void Stack::HandleIpv4(Nic& nic, const link::InboundFrame& frame,
                       buffer::PayloadView packet, bool link_multicast,
                       Instant now) {
  const wire::Ipv4Packet view(packet.bytes());
  wire::Ipv4Repr ip;
  if (wire::Ipv4Repr::Parse(view, ip) != wire::WireError::kOk) {
    return Drop(DropReason::kIpv4Malformed);
  }
  if (!view.HeaderChecksumValid()) return Drop(DropReason::kIpv4BadChecksum);
  // RFC 1122 3.2.1.3: martian sources. 0/8 ("this network"; only a DHCP
  // client's broadcast once AcceptIpv4UnspecifiedSource is on), 127/8, 240/4 (class E, limited broadcast), multicast,
  // a subnet broadcast, or one of our own addresses.
  const uint32_t src = ip.src.ToU32();
  if (nic.gateway) {
    // Only the guest's own address, whatever else looks plausible.
    if (!GatewaySourceOk(nic, ip)) return Drop(DropReason::kSpoofedSource);
  } else if (((src >> 24) == 0 && !IsUnspecifiedSourceBroadcast(ip)) ||
             (src >> 24) == 127 || (src >> 28) >= 0xe ||
             IsIpv4BroadcastFor(nic, ip.src) || IsOurIpv4(nic, ip.src)) {
    return Drop(DropReason::kIpv4BadSource);
  }
  const bool broadcast = IsIpv4BroadcastFor(nic, ip.dst);
  if (!IsOurIpv4(nic, ip.dst) && !broadcast &&
      !(nic.gateway && GatewayForwards(nic, ip.dst))) {
    // We are a host, not a router (RFC 1122 3.3.4): no forwarding. A
    // gateway stands in for the destination (its transports decide).
    return Drop((ip.dst.bytes[0] >> 4) == 0xe
                    ? DropReason::kIpv4MulticastNotJoined
                    : DropReason::kIpv4NotForUs);
  }
  if (link_multicast && !broadcast) {
    // A unicast datagram in a link-layer broadcast (RFC 1122 3.3.6).
    return Drop(DropReason::kIpv4LinkBroadcast);
  }
  ++counters_.ipv4_received;
  const uint32_t hlen = static_cast<uint32_t>(view.HeaderLen());
  Ipv4Datagram d;
  d.nic = nic.id;
  d.ip = ip;
  d.header = packet.Subview(0, hlen);
  d.payload = packet.Subview(hlen, ip.payload_len);
  d.checksum_verified = frame.checksum_verified;
  d.checksum_partial = frame.checksum_partial;
  d.udp_gso_size = frame.udp_gso_size;
  d.link_multicast = link_multicast;
  if (ip.more_fragments || ip.fragment_offset != 0) {
    ++counters_.ipv4_fragments_received;
    if (reassembler_.NextDeadline() <= now) ExpireReassembly(now);
    ip::AddResult r = reassembler_.Add(
        ip::ReassemblyKey::Ipv4(ip.src, ip.dst, ip.protocol, ip.ident),
        ip.fragment_offset, ip.more_fragments, d.payload.bytes(), now,
        d.header.bytes());
    if (r.outcome == ip::AddOutcome::kIncomplete) return;
    if (r.outcome != ip::AddOutcome::kComplete) {
      return Drop(DropReason::kIpv4FragmentDropped);
    }
    ++counters_.ipv4_reassembled;
    d.payload = std::move(r.payload);
    d.ip.payload_len = static_cast<uint16_t>(d.payload.size());
    d.ip.more_fragments = false;
    d.ip.fragment_offset = 0;
    // A reassembled checksum was never seen whole by the kernel.
    d.checksum_verified = false;
    d.checksum_partial = false;
    d.udp_gso_size = 0;
  }
  DeliverIpv4(d, now);
}

void Stack::DeliverIpv4(Ipv4Datagram& d, Instant now) {
  switch (static_cast<wire::IpProtocol>(d.ip.protocol)) {
    case wire::IpProtocol::kIcmp:
      return HandleIcmpv4(d, now);
    case wire::IpProtocol::kUdp: {
      const wire::UdpHeader udp(d.payload.bytes());
      wire::UdpRepr repr;
      if (wire::UdpRepr::Parse(udp, repr) != wire::WireError::kOk) {
        return Drop(DropReason::kUdpMalformed);
      }
      if (!d.checksum_verified && !d.checksum_partial &&
          !udp.ChecksumValid(
              // RFC 768: the pseudo-header carries the UDP Length, which
              // may be shorter than the IP payload.
              wire::Ipv4PseudoHeaderSum(d.ip.src, d.ip.dst, d.ip.protocol,
                                        udp.Length()),
              wire::UdpZeroChecksum::kAccept)) {
        return Drop(DropReason::kUdpBadChecksum);
      }
      std::optional<DropReason> r = DropReason::kUdpNoListener;
      if (udp_ != nullptr) {
        d.checksum_verified = true;  // verified just above
        r = udp_->Deliver(d, now);
      }
      if (!r) return;
      if (*r == DropReason::kUdpNoListener) {
        // Port unreachable (RFC 1122 4.1.3.1). SendIcmpv4Error refuses
        // broadcasts and the like.
        SendIcmpv4Error(d, kIcmpUnreachable, kCodePortUnreachable, 0, now);
      }
      return Drop(*r);
    }
    case wire::IpProtocol::kTcp: {
      if (tcp_ == nullptr) return Drop(DropReason::kTcpNoListener);
      if (auto r = tcp_->Deliver(d, now)) Drop(*r);
      return;
    }
    default:
      SendIcmpv4Error(d, kIcmpUnreachable, kCodeProtocolUnreachable, 0, now);
      return Drop(DropReason::kIpv4UnknownProtocol);
  }
}

void Stack::HandleIcmpv4(Ipv4Datagram& d, Instant now) {
  const wire::Icmpv4Packet icmp(d.payload.bytes());
  wire::Icmpv4Repr repr;
  if (wire::Icmpv4Repr::Parse(icmp, repr) != wire::WireError::kOk) {
    return Drop(DropReason::kIcmpv4Malformed);
  }
  // ICMP checksums are never offloaded: always verify.
  if (!icmp.ChecksumValid()) return Drop(DropReason::kIcmpv4BadChecksum);
  const auto* echo = std::get_if<wire::Icmpv4Repr::EchoRequest>(&repr.message);
  if (echo == nullptr) {
    IcmpError e;
    bool is_error = true;
    if (const auto* u =
            std::get_if<wire::Icmpv4Repr::DestUnreachable>(&repr.message)) {
      using C = wire::Icmpv4UnreachableCode;
      switch (u->code) {
        case C::kNetUnreachable:
          e.kind = IcmpErrorKind::kNetUnreachable;
          break;
        case C::kHostUnreachable:
          e.kind = IcmpErrorKind::kHostUnreachable;
          break;
        case C::kProtocolUnreachable:
          e.kind = IcmpErrorKind::kProtocolUnreachable;
          break;
        case C::kPortUnreachable:
          e.kind = IcmpErrorKind::kPortUnreachable;
          break;
        case C::kFragmentationNeeded:
          e.kind = IcmpErrorKind::kFragmentationNeeded;
          e.mtu = u->next_hop_mtu;
          break;
        case C::kNetProhibited:
        case C::kHostProhibited:
        case C::kCommunicationProhibited:  // RFC 1812 5.2.7.1
          e.kind = IcmpErrorKind::kAdminProhibited;
          break;
        default:
          // Unknown net or host, source route failed, TOS, precedence:
          // the host cannot be reached, as far as a transport cares.
          e.kind = IcmpErrorKind::kHostUnreachable;
          break;
      }
    } else if (std::holds_alternative<wire::Icmpv4Repr::TimeExceeded>(
                   repr.message)) {
      e.kind = IcmpErrorKind::kTimeExceeded;
    } else {
      is_error = false;
    }
    if (is_error) {
      // To the transport whose datagram it quotes; an error about nothing
      // of ours is dropped under its reason.
      if (DeliverIcmpError(e, repr.data, now)) return;
      return Drop(DropReason::kIcmpv4ErrorReceived);
    }
    return Drop(DropReason::kIcmpv4Unhandled);
  }
  Nic* nic = FindNic(d.nic);
  const bool foreign = nic != nullptr && nic->gateway &&
                       !IsOurIpv4(*nic, d.ip.dst) &&
                       !IsIpv4BroadcastFor(*nic, d.ip.dst);
  if (foreign && echo_handler_ == nullptr) {
    // A gateway never answers for a host beyond it (no forged replies).
    return Drop(DropReason::kIpv4NotForUs);
  }
  ++counters_.icmpv4_echo_requests;
  if (nic == nullptr || IsIpv4BroadcastFor(*nic, d.ip.dst)) {
    // Like Linux's icmp_echo_ignore_broadcasts (RFC 1122 3.2.2.6 allows).
    return Drop(DropReason::kIcmpv4EchoToBroadcast);
  }
  if (echo_handler_ != nullptr && !d.link_multicast &&
      !d.ip.dst.IsMulticast()) {
    EchoRequest req;
    req.src4 = d.ip.src;
    req.dst4 = d.ip.dst;
    req.id = echo->ident;
    req.seq = echo->seq_no;
    req.ttl = d.ip.ttl;
    req.data = d.payload.Subview(wire::Icmpv4Packet::kHeaderLen,
                                 d.payload.size() - wire::Icmpv4Packet::kHeaderLen);
    if (echo_handler_->OnEchoRequest(req, now)) {
      ++counters_.icmpv4_echo_requests_handed_off;
      return;
    }
  }
  // A gateway stands in for hosts beyond it only through the echo handler
  // (a backend's ping sockets); it never forges their replies.
  if (foreign) return Drop(DropReason::kIpv4NotForUs);
  // The reply shares the request's data: a sub-view of the received chunk
  // (or of the reassembly chunk), never a copy. Its checksum follows from
  // the request's by RFC 1624: only the type word changes.
  buffer::PacketPtr reply = packets_.Allocate();
  if (reply == nullptr) return Drop(DropReason::kNoBuffer);
  const uint32_t hdr_len = wire::Icmpv4Packet::kHeaderLen;
  if (!reply->AppendPayload(
          d.payload.Subview(hdr_len, d.payload.size() - hdr_len))) {
    return Drop(DropReason::kNoBuffer);
  }
  auto hdr = reply->headers().Prepend(hdr_len);
  if (!hdr) return Drop(DropReason::kNoBuffer);
  std::copy(icmp.bytes().begin(), icmp.bytes().begin() + hdr_len,
            hdr->begin());
  wire::MutableIcmpv4Packet out(*hdr);
  const uint16_t old_word = static_cast<uint16_t>(icmp.Type() << 8 | icmp.Code());
  out.SetType(static_cast<uint8_t>(wire::Icmpv4Type::kEchoReply));
  out.SetCode(0);
  out.SetChecksum(wire::ChecksumUpdate16(icmp.Checksum(), old_word, 0));
  wire::Ipv4Repr ip;
  ip.src = d.ip.dst;
  ip.dst = d.ip.src;
  ip.protocol = kIcmp;
  ip.dscp_ecn = d.ip.dscp_ecn & 0xfc;  // DSCP only: ECN is per hop (RFC 3168)
  if (SendIpv4(ip, std::move(reply), now)) ++counters_.icmpv4_echo_replies_sent;
}

void Stack::SendIcmpv4Error(const Ipv4Datagram& offending, uint8_t type,
                            uint8_t code, uint16_t mtu, Instant now) {
  // RFC 1122 3.2.2: never about an ICMP error, a datagram sent to a
  // broadcast or multicast address (IP or link layer), a non-first
  // fragment, or a source that does not name a single host.
  Nic* nic = FindNic(offending.nic);
  if (nic == nullptr || offending.link_multicast ||
      offending.ip.fragment_offset != 0 || offending.ip.dst.IsMulticast() ||
      IsIpv4BroadcastFor(*nic, offending.ip.dst) || offending.ip.src.IsZero() ||
      offending.ip.src.IsMulticast() || IsIpv4BroadcastFor(*nic, offending.ip.src)) {
    return;
  }
  if (offending.ip.protocol == kIcmp && offending.payload.size() > 0) {
    // Only queries and replies may be answered with an error.
    const uint8_t t = offending.payload.bytes()[0];
    if (t != 0 && t != 8 && t != 13 && t != 14 && t != 15 && t != 16) return;
  }
  if (!TakeIcmpErrorToken(now)) return;
  buffer::PacketPtr p = packets_.Allocate();
  if (p == nullptr) return Drop(DropReason::kNoBuffer);
  // Quote the IP header and the first 8 bytes of its payload (RFC 792),
  // as views of the received packet.
  buffer::PayloadView quoted =
      offending.payload.Subview(0, std::min<uint32_t>(8, offending.payload.size()));
  if (!p->AppendPayload(offending.header) || !p->AppendPayload(quoted)) {
    return Drop(DropReason::kNoBuffer);
  }
  auto hdr = p->headers().Prepend(wire::Icmpv4Packet::kHeaderLen);
  if (!hdr) return Drop(DropReason::kNoBuffer);
  wire::MutableIcmpv4Packet out(*hdr);
  out.SetType(type);
  out.SetCode(code);
  out.SetRestOfHeader(mtu);
  out.SetChecksum(0);
  wire::ChecksumAccumulator sum;
  sum.Add(*hdr);
  for (const auto& v : p->payload()) sum.Add(v.bytes());
  out.SetChecksum(sum.Checksum());
  wire::Ipv4Repr ip;
  // From the address the datagram was sent to when it is ours (RFC 1812
  // 4.3.2.4), else from our address on the way back.
  if (IsOurIpv4(*nic, offending.ip.dst)) {
    ip.src = offending.ip.dst;
  } else if (auto src = SourceFor(*nic, offending.ip.src)) {
    ip.src = *src;
  } else {
    return;
  }
  ip.dst = offending.ip.src;
  ip.protocol = kIcmp;
  if (SendIpv4(ip, std::move(p), now)) ++counters_.icmpv4_errors_sent;
}

bool Stack::SendIpv4(wire::Ipv4Repr ip, buffer::PacketPtr packet,
                     Instant now) {
  const auto hop = routes4_.Lookup(ip.dst);
  Nic* nic = hop ? FindNic(hop->nic) : nullptr;
  if (nic == nullptr) {
    Drop(DropReason::kNoRoute);
    return false;
  }
  if (ip.src.IsZero()) {
    auto src = SourceFor(*nic, ip.dst);
    if (!src) {
      Drop(DropReason::kNoRoute);
      return false;
    }
    ip.src = *src;
  }
  ip.ttl = options_.ipv4_ttl;
  const size_t l4_len = packet->size();
  // A GSO super-segment leaves as several wire packets, which the link
  // numbers ident, ident + 1, ... (as Linux's TSO does).
  ip.ident = next_ipv4_ident_;
  next_ipv4_ident_ += static_cast<uint16_t>(GsoPackets(*packet));
  if (ip.HeaderLen() + l4_len <= nic->caps.mtu ||
      FitsGso(*packet, ip.HeaderLen() + l4_len, nic->caps)) {
    ip.payload_len = static_cast<uint16_t>(l4_len);
    auto hdr = packet->headers().Prepend(ip.BufferLen());
    if (!hdr) {
      Drop(DropReason::kNoBuffer);
      return false;
    }
    ip.Emit(wire::MutableIpv4Packet(*hdr));
    ResolveAndQueue4(*nic, hop->address, std::move(packet), now);
    return true;
  }
  if (ip.dont_fragment || l4_len > 65535 - ip.HeaderLen()) {
    Drop(DropReason::kFragmentationNeeded);
    return false;
  }
  // Slow path: the transport header lives in the packet's headroom, but
  // the fragmenter cuts payload views, so give the header a chunk of its
  // own. The payload itself is still never copied.
  std::array<buffer::PayloadView, buffer::PacketBuffer::kMaxPayloadViews + 1>
      views;
  const size_t n_views = ToPayloadViews(*packet, views);
  buffer::PacketChain fragments;
  if (n_views == 0 ||
      ip::FragmentIpv4(ip, std::span(views.data(), n_views), nic->caps.mtu,
                       packets_, fragments) != ip::FragmentStatus::kOk) {
    Drop(DropReason::kNoBuffer);
    return false;
  }
  if (!arp_.Lookup(hop->address, now) && !IsIpv4BroadcastFor(*nic, hop->address) &&
      !hop->address.IsMulticast() &&
      arp_.QueueRoom(hop->address) < fragments.size()) {
    // Half a datagram is worth nothing: do not queue a fragment train
    // that cannot wait whole for the neighbour's resolution.
    DropChain(std::move(fragments), DropReason::kNeighborQueueFull);
    return false;
  }
  counters_.ipv4_fragments_sent += fragments.size();
  while (buffer::PacketPtr f = fragments.PopFront()) {
    ResolveAndQueue4(*nic, hop->address, std::move(f), now);
  }
  return true;
}

void Stack::ResolveAndQueue4(Nic& nic, const wire::Ipv4Address& next_hop,
                             buffer::PacketPtr packet, Instant now) {
  if (IsIpv4BroadcastFor(nic, next_hop)) {
    return QueueFrame(nic, std::move(packet), wire::MacAddress::Broadcast(),
                      kIpv4Type);
  }
  if (next_hop.IsMulticast()) {
    return QueueFrame(nic, std::move(packet), Ipv4MulticastMac(next_hop),
                      kIpv4Type);
  }
  if (auto mac = arp_.Lookup(next_hop, now)) {
    return QueueFrame(nic, std::move(packet), *mac, kIpv4Type);
  }
  buffer::PacketChain evicted;
  const auto result = arp_.Enqueue(next_hop, std::move(packet), now, evicted);
  if (!evicted.empty()) {
    DropChain(std::move(evicted), DropReason::kNeighborQueueFull);
  }
  switch (result) {
    case NeighborCache<wire::Ipv4Address>::EnqueueResult::kSolicit:
      if (auto src = SourceFor(nic, next_hop)) {
        SendArp(nic, static_cast<uint16_t>(wire::ArpOperation::kRequest),
                wire::MacAddress::Broadcast(), *src, wire::MacAddress(),
                next_hop, now);
      }
      return;
    case NeighborCache<wire::Ipv4Address>::EnqueueResult::kQueued:
      return;
    case NeighborCache<wire::Ipv4Address>::EnqueueResult::kDropped:
      return Drop(DropReason::kNeighborQueueFull);
  }
}

}  // namespace netstack::stack
