// IPv6, NDP and ICMPv6 (RFC 8200, 4861, 4443).
#include <array>
#include <utility>
#include <variant>

#include "netstack/stack/nic.h"
#include "netstack/stack/stack.h"
#include "netstack/wire/bytes.h"
#include "netstack/wire/checksum.h"
#include "netstack/wire/ethernet.h"
#include "netstack/wire/icmpv6.h"
#include "netstack/wire/ip_protocol.h"
#include "netstack/wire/udp.h"

namespace netstack::stack {
namespace {

constexpr uint16_t kIpv6Type = static_cast<uint16_t>(wire::EtherType::kIpv6);
constexpr uint8_t kIcmpv6 = static_cast<uint8_t>(wire::IpProtocol::kIcmpv6);
constexpr uint8_t kNdpHopLimit = 255;  // RFC 4861 section 7.1

constexpr uint8_t kIcmpv6Unreachable = 1;       // RFC 4443 3.1
constexpr uint8_t kCodePortUnreachable = 4;
constexpr uint8_t kIcmpv6ParameterProblem = 4;  // RFC 4443 3.4
constexpr uint8_t kCodeUnknownNextHeader = 1;
constexpr uint8_t kCodeUnrecognizedOption = 2;

const wire::Ipv6Address& Loopback6() {
  static const wire::Ipv6Address a = *wire::Ipv6Address::Parse("::1");
  return a;
}

const wire::Ipv6Address& AllNodes() {
  static const wire::Ipv6Address a = *wire::Ipv6Address::Parse("ff02::1");
  return a;
}

}  // namespace

bool Stack::IsOurIpv6(const Nic& nic, const wire::Ipv6Address& a) const {
  for (const Ipv6Cidr& c : nic.ipv6) {
    if (c.address == a) return true;
  }
  return false;
}

bool Stack::AcceptsIpv6(const Nic& nic, const wire::Ipv6Address& a) const {
  if (a == AllNodes()) return true;
  for (const wire::Ipv6Address& g : nic.ipv6_groups) {
    if (g == a) return true;
  }
  for (const Ipv6Cidr& c : nic.ipv6) {
    if (c.address == a || SolicitedNodeMulticast(c.address) == a) return true;
  }
  return false;
}

std::optional<wire::Ipv6Address> Stack::SourceFor(
    const Nic& nic, const wire::Ipv6Address& dst) const {
  // RFC 6724 in miniature: link-local for link-local (and multicast of
  // link scope), else an address on the destination's prefix, else the
  // first global one.
  if (dst.IsLinkLocal() || (dst.IsMulticast() && (dst.bytes[1] & 0x0f) <= 2)) {
    return nic.ipv6.front().address;
  }
  for (const Ipv6Cidr& c : nic.ipv6) {
    if (!c.address.IsLinkLocal() && c.Contains(dst)) return c.address;
  }
  for (const Ipv6Cidr& c : nic.ipv6) {
    if (!c.address.IsLinkLocal()) return c.address;
  }
  return nic.ipv6.front().address;
}

bool Stack::GatewaySourceOk(const Nic& nic,
                            const wire::Ipv6Address& src) const {
  const GatewayOptions& g = *nic.gateway;
  if (src.IsLinkLocal() || src.IsZero()) return true;  // :: only for NDP
  return g.guest6_prefix && g.guest6_prefix->Contains(src);
}

bool Stack::GatewayForwards(const Nic& nic,
                            const wire::Ipv6Address& dst) const {
  return !dst.IsMulticast() && !dst.IsLinkLocal() && !dst.IsZero() &&
         dst != Loopback6() && !dst.EmbedsIpv4() &&
         !(nic.gateway->guest6_prefix &&
           nic.gateway->guest6_prefix->Contains(dst) && !IsOurIpv6(nic, dst));
}

bool Stack::SendDestUnreachable(const wire::Ipv6Address& src,
                                const wire::Ipv6Address& dst,
                                uint8_t protocol,
                                std::span<const uint8_t> l4_head,
                                IcmpErrorKind kind, Instant now) {
  const auto hop = routes6_.Lookup(src);
  Nic* nic = hop ? FindNic(hop->nic) : nullptr;
  if (nic == nullptr) {
    Drop(DropReason::kNoRoute);
    return false;
  }
  // RFC 4443 3.1: 0 no route, 1 administratively prohibited, 3 address
  // unreachable.
  uint8_t code = 3;
  if (kind == IcmpErrorKind::kNetUnreachable) code = 0;
  if (kind == IcmpErrorKind::kAdminProhibited) code = 1;
  buffer::ChunkRef chunk = chunks_.Allocate();
  if (!chunk) {
    Drop(DropReason::kNoBuffer);
    return false;
  }
  const size_t head = std::min<size_t>(8, l4_head.size());
  wire::Ipv6Repr ip;
  ip.src = src;
  ip.dst = dst;
  ip.next_header = protocol;
  ip.payload_len = static_cast<uint16_t>(head);
  auto mem = chunk->mutable_data();
  const size_t hlen = ip.BufferLen();
  ip.Emit(wire::MutableIpv6Packet(mem.first(hlen)));
  std::copy(l4_head.begin(), l4_head.begin() + head, mem.begin() + hlen);
  buffer::PayloadView all(chunk, 0, static_cast<uint32_t>(hlen + head));
  Ipv6Datagram d;
  d.nic = nic->id;
  d.ip = ip;
  d.packet = all;
  d.protocol = protocol;
  d.payload = all.Subview(static_cast<uint32_t>(hlen),
                          static_cast<uint32_t>(head));
  const uint64_t before = counters_.icmpv6_errors_sent;
  SendIcmpv6Error(d, /*Destination Unreachable*/ 1, code, 0, now);
  return counters_.icmpv6_errors_sent != before;
}

void Stack::HandleIpv6(Nic& nic, const link::InboundFrame& frame,
                       buffer::PayloadView packet, bool link_multicast,
                       Instant now) {
  const wire::Ipv6Packet view(packet.bytes());
  wire::Ipv6Repr ip;
  if (wire::Ipv6Repr::Parse(view, ip) != wire::WireError::kOk) {
    return Drop(DropReason::kIpv6Malformed);
  }
  // RFC 4291 2.5.3 / RFC 8200: never from a multicast or the loopback
  // address, nor from one of ours (a loop or a spoof). The unspecified
  // source is legal only for DAD's solicitations (checked there).
  if (ip.src.IsMulticast() || ip.src == Loopback6() || IsOurIpv6(nic, ip.src)) {
    return Drop(DropReason::kIpv6BadSource);
  }
  if (nic.gateway && !GatewaySourceOk(nic, ip.src)) {
    return Drop(DropReason::kSpoofedSource);
  }
  const bool ours = AcceptsIpv6(nic, ip.dst);
  if (!ours && !(nic.gateway && GatewayForwards(nic, ip.dst))) {
    // GatewayForwards refuses IPv4-mapped and -compatible destinations
    // before any transport, so that none of them (TCP, UDP, ping) needs
    // its own check; named apart from not-for-us, as it is an attempt.
    return Drop(ip.dst.IsMulticast() ? DropReason::kIpv6MulticastNotJoined
                : nic.gateway && ip.dst.EmbedsIpv4()
                    ? DropReason::kIpv6MappedDestination
                    : DropReason::kIpv6NotForUs);
  }
  if (link_multicast && !ip.dst.IsMulticast()) {
    return Drop(DropReason::kIpv6LinkMulticast);
  }
  ++counters_.ipv6_received;
  const uint32_t hlen = wire::Ipv6Packet::kHeaderLen;
  buffer::PayloadView payload = packet.Subview(hlen, ip.payload_len);
  wire::Ipv6ExtensionInfo ext;
  if (wire::WalkIpv6ExtensionHeaders(payload.bytes(), ip.next_header, ext) !=
      wire::WireError::kOk) {
    return Drop(DropReason::kIpv6ExtensionMalformed);
  }
  Ipv6Datagram d;
  d.nic = nic.id;
  d.ip = ip;
  d.packet = packet.Subview(0, hlen + ip.payload_len);
  d.checksum_verified = frame.checksum_verified;
  d.checksum_partial = frame.checksum_partial;
  d.udp_gso_size = frame.udp_gso_size;
  d.link_multicast = link_multicast;
  if (ext.unrecognized_option) {
    // RFC 8200 4.2: an option whose action bits say discard: 01 silently;
    // 10 with a Parameter Problem (code 2, pointing at the option type)
    // whatever the destination; 11 likewise, but only when the
    // destination is not multicast (SendIcmpv6Error checks that).
    const uint8_t action = ext.unrecognized_option->action();
    if (action >= 2) {
      d.protocol = ip.next_header;
      SendIcmpv6Error(
          d, kIcmpv6ParameterProblem, kCodeUnrecognizedOption,
          static_cast<uint32_t>(ext.unrecognized_option->offset + hlen), now,
          /*multicast_ok=*/action == 2);
    }
    return Drop(DropReason::kIpv6UnrecognizedOption);
  }
  if (ext.fragment) {
    ++counters_.ipv6_fragments_received;
    if (reassembler_.NextDeadline() <= now) ExpireReassembly(now);
    const auto& frag = ext.fragment->header;
    const uint32_t data_at = static_cast<uint32_t>(
        ext.fragment->header_offset + wire::Ipv6FragmentHeader::kHeaderLen);
    const buffer::PayloadView data =
        payload.Subview(data_at, payload.size() - data_at);
    if (frag.offset == 0 && !frag.more_fragments) {
      // An atomic fragment (RFC 6946): process it on its own.
      payload = data;
      d.protocol = frag.next_header;
    } else {
      ip::AddResult r = reassembler_.Add(
          ip::ReassemblyKey::Ipv6(ip.src, ip.dst, frag.identification),
          frag.offset, frag.more_fragments, data.bytes(), now,
          packet.Subview(0, hlen + data_at).bytes());
      if (r.outcome == ip::AddOutcome::kIncomplete) return;
      if (r.outcome != ip::AddOutcome::kComplete) {
        return Drop(DropReason::kIpv6FragmentDropped);
      }
      ++counters_.ipv6_reassembled;
      payload = std::move(r.payload);
      d.protocol = frag.next_header;
      d.checksum_verified = false;
      d.checksum_partial = false;
      d.udp_gso_size = 0;
    }
    // Headers after the Fragment header belong to the reassembled data.
    wire::Ipv6ExtensionInfo inner;
    if (wire::WalkIpv6ExtensionHeaders(payload.bytes(), d.protocol, inner) !=
            wire::WireError::kOk ||
        inner.fragment) {
      return Drop(DropReason::kIpv6ExtensionMalformed);
    }
    d.protocol = inner.upper_protocol;
    d.payload = payload.Subview(static_cast<uint32_t>(inner.upper_offset),
                                payload.size());
  } else {
    d.protocol = ext.upper_protocol;
    d.payload = payload.Subview(static_cast<uint32_t>(ext.upper_offset),
                                payload.size());
  }
  DeliverIpv6(d, now);
}

void Stack::DeliverIpv6(Ipv6Datagram& d, Instant now) {
  if (d.ip.src.IsZero() &&
      d.protocol != static_cast<uint8_t>(wire::IpProtocol::kIcmpv6)) {
    return Drop(DropReason::kIpv6BadSource);
  }
  switch (static_cast<wire::IpProtocol>(d.protocol)) {
    case wire::IpProtocol::kIcmpv6:
      return HandleIcmpv6(d, now);
    case wire::IpProtocol::kUdp: {
      const wire::UdpHeader udp(d.payload.bytes());
      wire::UdpRepr repr;
      if (wire::UdpRepr::Parse(udp, repr) != wire::WireError::kOk) {
        return Drop(DropReason::kUdpMalformed);
      }
      if (!d.checksum_verified && !d.checksum_partial &&
          !udp.ChecksumValid(
              wire::Ipv6PseudoHeaderSum(d.ip.src, d.ip.dst, d.protocol,
                                        udp.Length()),
              wire::UdpZeroChecksum::kReject)) {
        return Drop(DropReason::kUdpBadChecksum);
      }
      std::optional<DropReason> r = DropReason::kUdpNoListener;
      if (udp_ != nullptr) {
        d.checksum_verified = true;  // verified just above
        r = udp_->Deliver(d, now);
      }
      if (!r) return;
      if (*r == DropReason::kUdpNoListener) {
        SendIcmpv6Error(d, kIcmpv6Unreachable, kCodePortUnreachable, 0,
                        now);
      }
      return Drop(*r);
    }
    case wire::IpProtocol::kTcp: {
      if (tcp_ == nullptr) return Drop(DropReason::kTcpNoListener);
      if (auto r = tcp_->Deliver(d, now)) Drop(*r);
      return;
    }
    case wire::IpProtocol::kIpv6NoNext:
      return Drop(DropReason::kIpv6UnknownProtocol);
    default:
      // RFC 8200 4: unrecognized Next Header -> Parameter Problem code 1.
      // Pointer left 0: we do not track the field's offset here.
      SendIcmpv6Error(d, kIcmpv6ParameterProblem, kCodeUnknownNextHeader, 0,
                      now);
      return Drop(DropReason::kIpv6UnknownProtocol);
  }
}

void Stack::HandleIcmpv6(Ipv6Datagram& d, Instant now) {
  const wire::Icmpv6Packet icmp(d.payload.bytes());
  wire::Icmpv6Repr repr;
  if (wire::Icmpv6Repr::Parse(icmp, repr) != wire::WireError::kOk) {
    return Drop(DropReason::kIcmpv6Malformed);
  }
  if (!icmp.ChecksumValid(d.ip.src, d.ip.dst)) {
    return Drop(DropReason::kIcmpv6BadChecksum);
  }
  Nic* nic = FindNic(d.nic);
  if (nic == nullptr) return Drop(DropReason::kIcmpv6Unhandled);

  if (std::holds_alternative<wire::Icmpv6EchoRequest>(repr.message)) {
    if (d.ip.src.IsZero()) return Drop(DropReason::kIpv6BadSource);
    const bool foreign = nic->gateway && !IsOurIpv6(*nic, d.ip.dst) &&
                         !d.ip.dst.IsMulticast();
    if (foreign && echo_handler_ == nullptr) {
      // A gateway never answers for a host beyond it.
      return Drop(DropReason::kIpv6NotForUs);
    }
    ++counters_.icmpv6_echo_requests;
    if (echo_handler_ != nullptr && !d.link_multicast &&
        !d.ip.dst.IsMulticast()) {
      const auto& echo = std::get<wire::Icmpv6EchoRequest>(repr.message);
      EchoRequest req;
      req.v6 = true;
      req.src6 = d.ip.src;
      req.dst6 = d.ip.dst;
      req.id = echo.identifier;
      req.seq = echo.sequence;
      req.ttl = d.ip.hop_limit;
      req.data = d.payload.Subview(8, d.payload.size() - 8);
      if (echo_handler_->OnEchoRequest(req, now)) {
        ++counters_.icmpv6_echo_requests_handed_off;
        return;
      }
    }
    // Beyond the gateway only the echo handler answers (no forged reply).
    if (foreign) return Drop(DropReason::kIpv6NotForUs);
    buffer::PacketPtr reply = packets_.Allocate();
    if (reply == nullptr) return Drop(DropReason::kNoBuffer);
    const uint32_t hdr_len = 8;
    if (!reply->AppendPayload(
            d.payload.Subview(hdr_len, d.payload.size() - hdr_len))) {
      return Drop(DropReason::kNoBuffer);
    }
    auto hdr = reply->headers().Prepend(hdr_len);
    if (!hdr) return Drop(DropReason::kNoBuffer);
    std::copy(icmp.bytes().begin(), icmp.bytes().begin() + hdr_len,
              hdr->begin());
    wire::MutableIcmpv6Packet out(*hdr);
    wire::Ipv6Repr ip;
    ip.dst = d.ip.src;
    ip.src = d.ip.dst.IsMulticast() ? *SourceFor(*nic, d.ip.src) : d.ip.dst;
    ip.next_header = kIcmpv6;
    ip.traffic_class = d.ip.traffic_class & 0xfc;  // not the ECN bits
    out.SetType(static_cast<uint8_t>(wire::Icmpv6Type::kEchoReply));
    out.SetCode(0);
    if (ip.src == d.ip.dst) {
      // Same address pair: the pseudo-header sum is unchanged, so RFC 1624
      // updates the checksum for the new type without reading the data.
      const uint16_t old_word =
          static_cast<uint16_t>(icmp.Type() << 8 | icmp.Code());
      const uint16_t new_word = static_cast<uint16_t>(
          static_cast<uint8_t>(wire::Icmpv6Type::kEchoReply) << 8);
      out.SetChecksum(
          wire::ChecksumUpdate16(icmp.Checksum(), old_word, new_word));
    } else {
      out.SetChecksum(0);
      wire::ChecksumAccumulator sum;
      sum.AddFolded(wire::Ipv6PseudoHeaderSum(ip.src, ip.dst, kIcmpv6,
                                              d.payload.size()));
      sum.Add(*hdr);
      for (const auto& v : reply->payload()) sum.Add(v.bytes());
      out.SetChecksum(sum.Checksum());
    }
    if (SendIpv6(ip, std::move(reply), now)) {
      ++counters_.icmpv6_echo_replies_sent;
    }
    return;
  }

  if (const auto* ns =
          std::get_if<wire::NdpNeighborSolicitation>(&repr.message)) {
    ++counters_.ndp_ns_received;
    const bool unspecified_src = d.ip.src.IsZero();
    // RFC 4861 7.1.1 validity checks.
    if (d.ip.hop_limit != kNdpHopLimit ||
        (unspecified_src &&
         (d.ip.dst != SolicitedNodeMulticast(ns->target) ||
          ns->options.source_link_layer)) ||
        (ns->options.source_link_layer &&
         ns->options.source_link_layer->IsMulticast())) {
      return Drop(DropReason::kNdpInvalid);
    }
    // RFC 4861 7.2.3: a solicitation for someone else teaches nothing.
    if (!IsOurIpv6(*nic, ns->target)) return Drop(DropReason::kNdpNotForUs);
    if (!unspecified_src && ns->options.source_link_layer) {
      buffer::PacketChain waiting =
          ndp_.Update(d.ip.src, *ns->options.source_link_layer,
                      /*confirmed=*/false, /*create=*/true, now);
      while (buffer::PacketPtr p = waiting.PopFront()) {
        QueueFrame(*nic, std::move(p), *ns->options.source_link_layer,
                   kIpv6Type);
      }
    }
    // RFC 4861 7.2.4: answer with a solicited NA, or to all-nodes when the
    // solicitation came from the unspecified address (DAD).
    wire::Icmpv6Repr na;
    wire::NdpNeighborAdvertisement adv;
    adv.solicited = !unspecified_src;
    adv.override_flag = true;
    // A gateway NIC is the guest's router: without R, the guest's NUD
    // probe of it removes it from the default router list (RFC 4861
    // 7.2.5), and with it the guest's IPv6 default route.
    adv.router = nic->gateway.has_value();
    adv.target = ns->target;
    adv.options.target_link_layer = nic->caps.mac;
    na.message = adv;
    buffer::PacketPtr p = packets_.Allocate();
    if (p == nullptr) return Drop(DropReason::kNoBuffer);
    auto hdr = p->headers().Prepend(na.BufferLen());
    if (!hdr) return Drop(DropReason::kNoBuffer);
    na.Emit(wire::MutableIcmpv6Packet(*hdr));
    wire::Ipv6Repr ip;
    ip.src = ns->target;
    ip.dst = unspecified_src ? AllNodes() : d.ip.src;
    ip.next_header = kIcmpv6;
    ip.hop_limit = kNdpHopLimit;
    wire::MutableIcmpv6Packet(*hdr).FillChecksum(ip.src, ip.dst);
    ip.payload_len = static_cast<uint16_t>(hdr->size());
    auto ip_hdr = p->headers().Prepend(ip.BufferLen());
    if (!ip_hdr) return Drop(DropReason::kNoBuffer);
    ip.Emit(wire::MutableIpv6Packet(*ip_hdr));
    // The solicitation told us the sender's MAC; send straight to it
    // (or to the all-nodes group) without another resolution round.
    // The solicitation told us where to answer: the all-nodes group for
    // DAD, the SLLAO's MAC, or (a unicast NS without SLLAO, which RFC 4861
    // 7.2.4 allows) whatever resolution says.
    if (unspecified_src) {
      QueueFrame(*nic, std::move(p), Ipv6MulticastMac(ip.dst), kIpv6Type);
    } else if (ns->options.source_link_layer) {
      QueueFrame(*nic, std::move(p), *ns->options.source_link_layer,
                 kIpv6Type);
    } else {
      ResolveAndQueue6(*nic, ip.dst, std::move(p), now);
    }
    ++counters_.ndp_na_sent;
    return;
  }

  if (const auto* na =
          std::get_if<wire::NdpNeighborAdvertisement>(&repr.message)) {
    ++counters_.ndp_na_received;
    if (d.ip.hop_limit != kNdpHopLimit ||
        (d.ip.dst.IsMulticast() && na->solicited) ||
        (na->options.target_link_layer &&
         na->options.target_link_layer->IsMulticast())) {
      return Drop(DropReason::kNdpInvalid);
    }
    buffer::PacketChain waiting =
        ndp_.Advertise(na->target, na->options.target_link_layer,
                       na->solicited, na->override_flag, now);
    while (buffer::PacketPtr p = waiting.PopFront()) {
      QueueFrame(*nic, std::move(p), *na->options.target_link_layer,
                 kIpv6Type);
    }
    return;
  }

  {
    IcmpError e;
    e.v6 = true;
    std::span<const uint8_t> invoking;
    bool is_error = true;
    if (const auto* ptb = std::get_if<wire::Icmpv6PacketTooBig>(&repr.message)) {
      e.kind = IcmpErrorKind::kFragmentationNeeded;
      e.mtu = ptb->mtu;
      invoking = ptb->invoking_packet;
    } else if (const auto* u = std::get_if<wire::Icmpv6DestinationUnreachable>(
                   &repr.message)) {
      // RFC 4443 3.1 codes: 0 no route, 1 administratively prohibited,
      // 2 beyond scope, 3 address unreachable, 4 port unreachable, 5 and
      // 6 source address policy, 7 error in source routing header.
      switch (u->code) {
        case 0:
          e.kind = IcmpErrorKind::kNetUnreachable;
          break;
        case 1:
        case 5:
        case 6:
          e.kind = IcmpErrorKind::kAdminProhibited;
          break;
        case 4:
          e.kind = IcmpErrorKind::kPortUnreachable;
          break;
        default:
          e.kind = IcmpErrorKind::kHostUnreachable;
          break;
      }
      invoking = u->invoking_packet;
    } else if (const auto* t =
                   std::get_if<wire::Icmpv6TimeExceeded>(&repr.message)) {
      e.kind = IcmpErrorKind::kTimeExceeded;
      invoking = t->invoking_packet;
    } else if (const auto* pp =
                   std::get_if<wire::Icmpv6ParameterProblem>(&repr.message)) {
      e.kind = IcmpErrorKind::kParameterProblem;
      invoking = pp->invoking_packet;
    } else {
      is_error = false;
    }
    if (is_error) {
      if (DeliverIcmpError(e, invoking, now)) return;
      return Drop(DropReason::kIcmpv6ErrorReceived);
    }
  }
  if (const auto* rs =
          std::get_if<wire::NdpRouterSolicitation>(&repr.message)) {
    return HandleRouterSolicitation(*nic, d, *rs, now);
  }
  // Router solicitations/advertisements (we are not a router and take our
  // configuration from flags), echo replies, MLD, redirects.
  return Drop(DropReason::kIcmpv6Unhandled);
}

void Stack::SendNeighborSolicitation(Nic& nic, const wire::Ipv6Address& target,
                                     Instant now) {
  wire::Icmpv6Repr ns;
  wire::NdpNeighborSolicitation sol;
  sol.target = target;
  sol.options.source_link_layer = nic.caps.mac;
  ns.message = sol;
  buffer::PacketPtr p = packets_.Allocate();
  if (p == nullptr) return Drop(DropReason::kNoBuffer);
  auto hdr = p->headers().Prepend(ns.BufferLen());
  if (!hdr) return Drop(DropReason::kNoBuffer);
  ns.Emit(wire::MutableIcmpv6Packet(*hdr));
  wire::Ipv6Repr ip;
  ip.src = *SourceFor(nic, target);
  ip.dst = SolicitedNodeMulticast(target);
  ip.next_header = kIcmpv6;
  ip.hop_limit = kNdpHopLimit;
  wire::MutableIcmpv6Packet(*hdr).FillChecksum(ip.src, ip.dst);
  ip.payload_len = static_cast<uint16_t>(hdr->size());
  auto ip_hdr = p->headers().Prepend(ip.BufferLen());
  if (!ip_hdr) return Drop(DropReason::kNoBuffer);
  ip.Emit(wire::MutableIpv6Packet(*ip_hdr));
  ++counters_.ndp_ns_sent;
  QueueFrame(nic, std::move(p), Ipv6MulticastMac(ip.dst), kIpv6Type);
}

void Stack::SendIcmpv6Error(const Ipv6Datagram& offending, uint8_t type,
                            uint8_t code, uint32_t mtu, Instant now,
                            bool multicast_ok) {
  // RFC 4443 2.4(e): not about an ICMPv6 error, not about a packet sent to
  // a multicast address (IPv6 or link layer) unless `multicast_ok`
  // (Parameter Problem code 2 for an option of action 10), not to an
  // unspecified or multicast source.
  Nic* nic = FindNic(offending.nic);
  if (nic == nullptr ||
      (!multicast_ok &&
       (offending.link_multicast || offending.ip.dst.IsMulticast())) ||
      offending.ip.src.IsZero() ||
      offending.ip.src.IsMulticast()) {
    return;
  }
  if (offending.protocol == kIcmpv6 && offending.payload.size() > 0 &&
      offending.payload.bytes()[0] < 128) {
    return;
  }
  if (!TakeIcmpErrorToken(now)) return;
  buffer::PacketPtr p = packets_.Allocate();
  if (p == nullptr) return Drop(DropReason::kNoBuffer);
  // As much of the offending packet as fits in the minimum MTU.
  const uint32_t room = 1280 - 40 - 8;
  if (!p->AppendPayload(offending.packet.Subview(0, room))) {
    return Drop(DropReason::kNoBuffer);
  }
  auto hdr = p->headers().Prepend(8);
  if (!hdr) return Drop(DropReason::kNoBuffer);
  wire::MutableIcmpv6Packet out(*hdr);
  out.SetType(type);
  out.SetCode(code);
  out.SetChecksum(0);
  wire::StoreBe32(hdr->data() + 4, mtu);
  wire::Ipv6Repr ip;
  ip.dst = offending.ip.src;
  ip.src = IsOurIpv6(*nic, offending.ip.dst) ? offending.ip.dst
                                             : *SourceFor(*nic, ip.dst);
  ip.next_header = kIcmpv6;
  wire::ChecksumAccumulator sum;
  sum.AddFolded(wire::Ipv6PseudoHeaderSum(
      ip.src, ip.dst, kIcmpv6, static_cast<uint32_t>(p->size())));
  sum.Add(*hdr);
  for (const auto& v : p->payload()) sum.Add(v.bytes());
  out.SetChecksum(sum.Checksum());
  if (SendIpv6(ip, std::move(p), now)) ++counters_.icmpv6_errors_sent;
}

bool Stack::SendIpv6(wire::Ipv6Repr ip, buffer::PacketPtr packet,
                     Instant now) {
  const auto hop = routes6_.Lookup(ip.dst);
  Nic* nic = hop ? FindNic(hop->nic) : nullptr;
  if (nic == nullptr) {
    Drop(DropReason::kNoRoute);
    return false;
  }
  if (ip.src.IsZero()) ip.src = *SourceFor(*nic, ip.dst);
  ip.hop_limit = options_.ipv6_hop_limit;
  const size_t l4_len = packet->size();
  if (wire::Ipv6Packet::kHeaderLen + l4_len <= nic->caps.mtu ||
      FitsGso(*packet, wire::Ipv6Packet::kHeaderLen + l4_len, nic->caps)) {
    ip.payload_len = static_cast<uint16_t>(l4_len);
    auto hdr = packet->headers().Prepend(ip.BufferLen());
    if (!hdr) {
      Drop(DropReason::kNoBuffer);
      return false;
    }
    ip.Emit(wire::MutableIpv6Packet(*hdr));
    ResolveAndQueue6(*nic, hop->address, std::move(packet), now);
    return true;
  }
  // RFC 8200 4.5: the original packet's payload (here the transport
  // header and data; we add no extension headers) may be 65535 bytes;
  // the Fragment header each fragment carries does not count.
  if (l4_len > 65535) {
    Drop(DropReason::kFragmentationNeeded);
    return false;
  }
  std::array<buffer::PayloadView, buffer::PacketBuffer::kMaxPayloadViews + 1>
      views;
  const size_t n_views = ToPayloadViews(*packet, views);
  buffer::PacketChain fragments;
  if (n_views == 0 ||
      ip::FragmentIpv6(ip, next_ipv6_frag_ident_++,
                       std::span(views.data(), n_views), nic->caps.mtu,
                       packets_,
                       fragments) != ip::FragmentStatus::kOk) {
    Drop(DropReason::kNoBuffer);
    return false;
  }
  if (!hop->address.IsMulticast() && !ndp_.Lookup(hop->address, now) &&
      ndp_.QueueRoom(hop->address) < fragments.size()) {
    DropChain(std::move(fragments), DropReason::kNeighborQueueFull);
    return false;
  }
  counters_.ipv6_fragments_sent += fragments.size();
  while (buffer::PacketPtr f = fragments.PopFront()) {
    ResolveAndQueue6(*nic, hop->address, std::move(f), now);
  }
  return true;
}

void Stack::ResolveAndQueue6(Nic& nic, const wire::Ipv6Address& next_hop,
                             buffer::PacketPtr packet, Instant now) {
  if (next_hop.IsMulticast()) {
    return QueueFrame(nic, std::move(packet), Ipv6MulticastMac(next_hop),
                      kIpv6Type);
  }
  if (auto mac = ndp_.Lookup(next_hop, now)) {
    return QueueFrame(nic, std::move(packet), *mac, kIpv6Type);
  }
  buffer::PacketChain evicted;
  const auto result = ndp_.Enqueue(next_hop, std::move(packet), now, evicted);
  if (!evicted.empty()) {
    DropChain(std::move(evicted), DropReason::kNeighborQueueFull);
  }
  switch (result) {
    case NeighborCache<wire::Ipv6Address>::EnqueueResult::kSolicit:
      return SendNeighborSolicitation(nic, next_hop, now);
    case NeighborCache<wire::Ipv6Address>::EnqueueResult::kQueued:
      return;
    case NeighborCache<wire::Ipv6Address>::EnqueueResult::kDropped:
      return Drop(DropReason::kNeighborQueueFull);
  }
}

}  // namespace netstack::stack
