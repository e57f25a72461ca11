// The guest configuration services of a backend, on one NIC: the DHCPv4
// server, router advertisements, and the stateless DHCPv6 server.
//
//   GuestConfigServices services(stack, chunks, packets, nic, plan);
//   services.Start(now, /*udp_next=*/&udp_layer);  // after the UDP layer
//   loop.AddPoller(&poller_ref_of(services));  // NextDeadline()/Poll(now)
//   ... services.FormatCounters() ...
//
// Start makes it the stack's UDP handler (protocol 17): a datagram to
// port 67 (IPv4) or 547 (IPv6) is served here, everything else goes on to
// `udp_next` (the UDP layer or the backend's flows), which keeps its own
// contract. It also registers the RS handler, lets DHCP clients' 0.0.0.0
// source in (Stack::AcceptIpv4UnspecifiedSource) and joins ff02::2 and
// ff02::1:2. The stack, pools and `udp_next` must outlive it; destroying
// it hands protocol 17 back to `udp_next` and unregisters the RS handler.
#ifndef NETSTACK_BACKEND_GUEST_CONFIG_SERVICES_H_
#define NETSTACK_BACKEND_GUEST_CONFIG_SERVICES_H_

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "netstack/backend/dhcp4_server.h"
#include "netstack/backend/dhcp6_server.h"
#include "netstack/backend/guest_config_plan.h"
#include "netstack/backend/ra_server.h"
#include "netstack/stack/stack.h"

namespace netstack::backend {

class GuestConfigServices : public stack::TransportHandler {
 public:
  GuestConfigServices(stack::Stack& stack, buffer::ChunkPool& chunks,
                      buffer::PacketPool& packets, stack::NicId nic,
                      const GuestConfigPlan& plan);
  ~GuestConfigServices() override;

  // `udp_next` may be null: other UDP then gets port unreachable.
  absl::Status Start(Instant now, stack::TransportHandler* udp_next);

  std::optional<stack::DropReason> Deliver(const stack::Ipv4Datagram& d,
                                           Instant now) override;
  std::optional<stack::DropReason> Deliver(const stack::Ipv6Datagram& d,
                                           Instant now) override;
  void OnIcmpError(const stack::IcmpError& e, Instant now) override;
  void OnReceiveBatchEnd(Instant now) override {
    if (next_ != nullptr) next_->OnReceiveBatchEnd(now);
  }

  // The RA timer; Poll ends with Stack::Flush when it sent something.
  Instant NextDeadline() const { return ra_.NextDeadline(); }
  void Poll(Instant now);

  std::string FormatCounters() const;
  const Dhcp4Server& dhcp4() const { return dhcp4_; }
  const RaServer& ra() const { return ra_; }
  const Dhcp6Server& dhcp6() const { return dhcp6_; }

 private:
  stack::Stack& stack_;
  const bool dhcp4_on_;  // GuestConfigPlan::dhcp4
  const bool ipv6_on_;   // GuestConfigPlan::ipv6: RAs and DHCPv6
  Dhcp4Server dhcp4_;
  RaServer ra_;
  Dhcp6Server dhcp6_;
  stack::TransportHandler* next_ = nullptr;
  bool started_ = false;
};

}  // namespace netstack::backend

#endif  // NETSTACK_BACKEND_GUEST_CONFIG_SERVICES_H_
