#include "netstack/backend/ra_server.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "netstack/wire/bytes.h"
#include "netstack/wire/icmpv6.h"
#include "netstack/wire/ip_protocol.h"
#include "netstack/wire/ipv6.h"

namespace netstack::backend {
namespace {

constexpr uint8_t kNdpHopLimit = 255;  // RFC 4861 6.1.1
constexpr uint8_t kRdnssType = 25;     // RFC 8106 5.1

wire::Ipv6Address AllNodes() { return *wire::Ipv6Address::Parse("ff02::1"); }
wire::Ipv6Address AllRouters() {
  return *wire::Ipv6Address::Parse("ff02::2");
}

}  // namespace

std::string RaCounters::Format() const {
  std::string out;
  auto line = [&](const char* name, uint64_t v) {
    if (v != 0) absl::StrAppend(&out, "ra.", name, " ", v, "\n");
  };
  line("rs_received", rs_received);
  line("drop.rs_bad_hop_limit", rs_bad_hop_limit);
  line("drop.rs_unspecified_with_sllao", rs_unspecified_with_sllao);
  line("ra_sent_unsolicited", ra_sent_unsolicited);
  line("ra_sent_solicited", ra_sent_solicited);
  line("ra_send_failed", ra_send_failed);
  return out;
}

RaServer::RaServer(stack::Stack& stack, buffer::ChunkPool& chunks,
                   buffer::PacketPool& packets, stack::NicId nic,
                   const GuestConfigPlan& plan)
    : stack_(stack),
      chunks_(chunks),
      packets_(packets),
      nic_(nic),
      plan_(plan) {}

absl::Status RaServer::Start(Instant now) {
  if (absl::Status s = stack_.JoinIpv6Multicast(nic_, AllRouters()); !s.ok()) {
    return s;
  }
  next_ra_ = now;
  return absl::OkStatus();
}

std::optional<stack::DropReason> RaServer::OnRouterSolicitation(
    const stack::Ipv6Datagram& d, const wire::NdpRouterSolicitation& rs,
    Instant now) {
  if (d.ip.hop_limit != kNdpHopLimit) {
    ++counters_.rs_bad_hop_limit;
    return stack::DropReason::kNdpInvalid;
  }
  if (d.ip.src.IsZero() && rs.options.source_link_layer) {
    ++counters_.rs_unspecified_with_sllao;
    return stack::DropReason::kNdpInvalid;
  }
  ++counters_.rs_received;
  if (next_ra_ == kNever) return std::nullopt;  // not started
  const Instant soonest = std::max(now, last_ra_ + kMinDelayBetweenRas);
  if (soonest < next_ra_) {
    next_ra_ = soonest;
    solicited_pending_ = true;
  }
  return std::nullopt;
}

void RaServer::Poll(Instant now) {
  if (now < next_ra_) return;
  const bool solicited = solicited_pending_;
  solicited_pending_ = false;
  last_ra_ = now;
  if (SendAdvertisement(now)) {
    ++(solicited ? counters_.ra_sent_solicited
                 : counters_.ra_sent_unsolicited);
  } else {
    ++counters_.ra_send_failed;
  }
  Duration interval = plan_.ra_interval;
  if (initial_left_ > 0) {
    --initial_left_;
    interval = std::min(interval, kMaxInitialInterval);
  }
  next_ra_ = now + interval;
}

bool RaServer::SendAdvertisement(Instant now) {
  const auto mac = stack_.NicMac(nic_);
  const auto src = stack_.LinkLocalAddress(nic_);
  if (!mac || !src) return false;
  wire::NdpRouterAdvertisement ra;
  ra.cur_hop_limit = 64;
  ra.other_config = true;
  ra.router_lifetime = plan_.router_lifetime_seconds;
  ra.options.source_link_layer = *mac;
  ra.options.mtu = plan_.mtu;
  wire::NdpPrefixInformation pi;
  pi.prefix_length = 64;
  pi.on_link = true;
  pi.autonomous = true;
  pi.valid_lifetime = plan_.prefix_valid_seconds;
  pi.preferred_lifetime = plan_.prefix_preferred_seconds;
  pi.prefix = plan_.prefix6;
  (void)ra.options.prefixes.push_back(pi);
  wire::Icmpv6Repr repr;
  repr.message = ra;
  buffer::ChunkRef chunk = chunks_.Allocate();
  if (!chunk) return false;
  const size_t base_len = repr.BufferLen();
  const size_t len = base_len + kRdnssLen;
  std::span<uint8_t> msg = chunk->mutable_data().first(len);
  repr.Emit(wire::MutableIcmpv6Packet(msg));
  // RDNSS (RFC 8106 5.1): type, length 3 (units of 8 bytes), reserved,
  // lifetime, one address.
  uint8_t* o = msg.data() + base_len;
  std::fill(o, o + kRdnssLen, 0);
  o[0] = kRdnssType;
  o[1] = kRdnssLen / 8;
  wire::StoreBe32(o + 4, plan_.rdnss_lifetime_seconds);
  plan_.dns6.CopyTo(o + 8);
  const wire::Ipv6Address dst = AllNodes();
  wire::MutableIcmpv6Packet(msg).FillChecksum(*src, dst);
  buffer::PacketPtr p = packets_.Allocate();
  if (p == nullptr ||
      !p->AppendPayload(
          buffer::PayloadView(std::move(chunk), 0, static_cast<uint32_t>(len)))) {
    return false;
  }
  wire::Ipv6Repr ip;
  ip.src = *src;
  ip.dst = dst;
  ip.next_header = static_cast<uint8_t>(wire::IpProtocol::kIcmpv6);
  ip.hop_limit = kNdpHopLimit;
  return stack_.SendIpv6OnLink(nic_, ip, std::move(p), now);
}

}  // namespace netstack::backend
