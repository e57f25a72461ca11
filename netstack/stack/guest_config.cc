// What a backend's guest configuration services (netstack/backend: DHCP,
// router advertisements, DHCPv6) need from the stack: a DHCP client's
// 0.0.0.0 source, Router Solicitations, multicast groups, and sending to a
// MAC or on-link without the usual routing.
#include <utility>
#include <variant>

#include "absl/strings/str_cat.h"
#include "netstack/stack/nic.h"
#include "netstack/stack/stack.h"
#include "netstack/wire/ethernet.h"
#include "netstack/wire/ip_protocol.h"

namespace netstack::stack {

std::optional<wire::MacAddress> Stack::NicMac(NicId id) const {
  const Nic* nic = FindNic(id);
  if (nic == nullptr) return std::nullopt;
  return nic->caps.mac;
}

std::optional<link::LinkStats> Stack::NicLinkStats(NicId id) const {
  const Nic* nic = FindNic(id);
  if (nic == nullptr) return std::nullopt;
  return nic->link->Stats();
}

uint64_t Stack::RxBatchLimitHits() const {
  uint64_t n = 0;
  for (const auto& nic : nics_) n += nic->link->Stats().rx_batch_limit_hits;
  return n;
}

std::optional<wire::Ipv6Address> Stack::LinkLocalAddress(NicId id) const {
  const Nic* nic = FindNic(id);
  if (nic == nullptr || nic->ipv6.empty()) return std::nullopt;
  return nic->ipv6.front().address;
}

absl::Status Stack::JoinIpv6Multicast(NicId id,
                                      const wire::Ipv6Address& group) {
  Nic* nic = FindNic(id);
  if (nic == nullptr) return absl::NotFoundError(absl::StrCat("no NIC ", id));
  if (!group.IsMulticast()) {
    return absl::InvalidArgumentError("JoinIpv6Multicast: not a multicast group");
  }
  for (const auto& g : nic->ipv6_groups) {
    if (g == group) return absl::OkStatus();
  }
  nic->ipv6_groups.push_back(group);
  return absl::OkStatus();
}

bool Stack::IsUnspecifiedSourceBroadcast(const wire::Ipv4Repr& ip) const {
  return accept_unspecified4_ && ip.src.IsZero() && ip.dst.IsBroadcast() &&
         ip.protocol == static_cast<uint8_t>(wire::IpProtocol::kUdp);
}

void Stack::HandleRouterSolicitation(Nic& nic, Ipv6Datagram& d,
                                     const wire::NdpRouterSolicitation& rs,
                                     Instant now) {
  if (rs_handler_ == nullptr) return Drop(DropReason::kIcmpv6Unhandled);
  std::optional<DropReason> r = rs_handler_->OnRouterSolicitation(d, rs, now);
  if (r) return Drop(*r);
  // RFC 4861 6.2.6: a router updates its neighbour cache from a valid
  // solicitation's source link-layer address (stale, not reachable).
  if (!d.ip.src.IsZero() && rs.options.source_link_layer &&
      !rs.options.source_link_layer->IsMulticast()) {
    buffer::PacketChain waiting =
        ndp_.Update(d.ip.src, *rs.options.source_link_layer,
                    /*confirmed=*/false, /*create=*/true, now);
    while (buffer::PacketPtr p = waiting.PopFront()) {
      QueueFrame(nic, std::move(p), *rs.options.source_link_layer,
                 static_cast<uint16_t>(wire::EtherType::kIpv6));
    }
  }
}

bool Stack::SendIpv4ToMac(NicId id, wire::Ipv4Repr ip,
                          buffer::PacketPtr packet,
                          const wire::MacAddress& dst_mac, Instant now) {
  Nic* nic = FindNic(id);
  if (nic == nullptr) {
    Drop(DropReason::kNoRoute);
    return false;
  }
  const size_t l4_len = packet->size();
  if (ip.HeaderLen() + l4_len > nic->caps.mtu) {
    Drop(DropReason::kFragmentationNeeded);
    return false;
  }
  ip.ttl = options_.ipv4_ttl;
  ip.ident = next_ipv4_ident_++;
  ip.payload_len = static_cast<uint16_t>(l4_len);
  auto hdr = packet->headers().Prepend(ip.BufferLen());
  if (!hdr) {
    Drop(DropReason::kNoBuffer);
    return false;
  }
  ip.Emit(wire::MutableIpv4Packet(*hdr));
  QueueFrame(*nic, std::move(packet), dst_mac,
             static_cast<uint16_t>(wire::EtherType::kIpv4));
  (void)now;
  return true;
}

bool Stack::SendIpv6OnLink(NicId id, wire::Ipv6Repr ip,
                           buffer::PacketPtr packet, Instant now) {
  Nic* nic = FindNic(id);
  if (nic == nullptr) {
    Drop(DropReason::kNoRoute);
    return false;
  }
  const size_t l4_len = packet->size();
  if (wire::Ipv6Packet::kHeaderLen + l4_len > nic->caps.mtu) {
    Drop(DropReason::kFragmentationNeeded);
    return false;
  }
  if (ip.src.IsZero()) ip.src = nic->ipv6.front().address;
  ip.payload_len = static_cast<uint16_t>(l4_len);
  auto hdr = packet->headers().Prepend(ip.BufferLen());
  if (!hdr) {
    Drop(DropReason::kNoBuffer);
    return false;
  }
  ip.Emit(wire::MutableIpv6Packet(*hdr));
  ResolveAndQueue6(*nic, ip.dst, std::move(packet), now);
  return true;
}

}  // namespace netstack::stack
