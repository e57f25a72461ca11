#include "netstack/backend/guest_config_services.h"

#include "absl/strings/str_cat.h"
#include "netstack/wire/ip_protocol.h"
#include "netstack/wire/udp.h"

namespace netstack::backend {
namespace {
constexpr uint8_t kUdp = static_cast<uint8_t>(wire::IpProtocol::kUdp);
}  // namespace

GuestConfigServices::GuestConfigServices(stack::Stack& stack,
                                         buffer::ChunkPool& chunks,
                                         buffer::PacketPool& packets,
                                         stack::NicId nic,
                                         const GuestConfigPlan& plan)
    : stack_(stack),
      dhcp4_on_(plan.dhcp4),
      ipv6_on_(plan.ipv6),
      dhcp4_(stack, chunks, packets, nic, plan),
      ra_(stack, chunks, packets, nic, plan),
      dhcp6_(stack, chunks, packets, nic, plan) {}

GuestConfigServices::~GuestConfigServices() {
  if (!started_) return;
  stack_.SetTransport(kUdp, next_);
  stack_.SetRouterSolicitationHandler(nullptr);
  stack_.AcceptIpv4UnspecifiedSource(false);
}

absl::Status GuestConfigServices::Start(Instant now,
                                        stack::TransportHandler* udp_next) {
  if (started_) return absl::FailedPreconditionError("already started");
  if (ipv6_on_) {
    if (absl::Status s = ra_.Start(now); !s.ok()) return s;
    if (absl::Status s = dhcp6_.Start(); !s.ok()) return s;
  }
  next_ = udp_next;
  stack_.SetTransport(kUdp, this);
  if (ipv6_on_) stack_.SetRouterSolicitationHandler(&ra_);
  stack_.AcceptIpv4UnspecifiedSource(true);
  started_ = true;
  return absl::OkStatus();
}

std::optional<stack::DropReason> GuestConfigServices::Deliver(
    const stack::Ipv4Datagram& d, Instant now) {
  // The stack parsed the UDP header (its Length fits) before calling us.
  const wire::UdpHeader udp(d.payload.bytes());
  if (dhcp4_on_ && udp.DstPort() == kDhcp4ServerPort) {
    dhcp4_.Deliver(d, now);
    return std::nullopt;
  }
  if (d.ip.src.IsZero()) {
    // Only DHCP may come from 0.0.0.0: a flow needs a source to answer.
    return stack::DropReason::kIpv4BadSource;
  }
  if (next_ == nullptr) return stack::DropReason::kUdpNoListener;
  return next_->Deliver(d, now);
}

std::optional<stack::DropReason> GuestConfigServices::Deliver(
    const stack::Ipv6Datagram& d, Instant now) {
  const wire::UdpHeader udp(d.payload.bytes());
  if (ipv6_on_ && udp.DstPort() == kDhcp6ServerPort) {
    dhcp6_.Deliver(d, now);
    return std::nullopt;
  }
  if (next_ == nullptr) return stack::DropReason::kUdpNoListener;
  return next_->Deliver(d, now);
}

void GuestConfigServices::OnIcmpError(const stack::IcmpError& e,
                                      Instant now) {
  if (next_ != nullptr) next_->OnIcmpError(e, now);
}

void GuestConfigServices::Poll(Instant now) {
  if (!ipv6_on_ || now < ra_.NextDeadline()) return;
  ra_.Poll(now);
  stack_.Flush(now);
}

std::string GuestConfigServices::FormatCounters() const {
  return absl::StrCat(dhcp4_.counters().Format(), ra_.counters().Format(),
                      dhcp6_.counters().Format());
}

}  // namespace netstack::backend
