// Router advertisements for the guest link (RFC 4861 section 6, RDNSS
// RFC 8106), so the guest takes an address in the plan's /64 by SLAAC
// (RFC 4862), a default route through our link-local address, the MTU,
// and the DNS server.
//
// Each RA: Cur Hop Limit 64, the O flag (stateless DHCPv6 has DNS too),
// the plan's router lifetime; options source link-layer address, MTU,
// Prefix Information (L and A set, the plan's lifetimes) and RDNSS.
//
// When: unsolicited at Start and then MAX_INITIAL_RTR_ADVERTISEMENTS (3)
// at MAX_INITIAL_RTR_ADVERT_INTERVAL (16 s) or the plan's interval if
// shorter, then every ra_interval (RFC 4861 6.2.4). A valid Router
// Solicitation brings the next one forward, but never closer than
// MIN_DELAY_BETWEEN_RAS (3 s) to the last (6.2.6). All go to ff02::1.
//
// A solicitation is valid (6.1.1) when its hop limit is 255 and, from the
// unspecified address, it has no source link-layer address option; the
// stack has checked the checksum, the Code and the option syntax before
// (its drop counters say so for those). Time is an argument:
// NextDeadline() and Poll(now) as the stack's.
#ifndef NETSTACK_BACKEND_RA_SERVER_H_
#define NETSTACK_BACKEND_RA_SERVER_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "netstack/backend/guest_config_plan.h"
#include "netstack/base/time.h"
#include "netstack/buffer/chunk.h"
#include "netstack/buffer/packet.h"
#include "netstack/stack/stack.h"

namespace netstack::backend {

struct RaCounters {
  uint64_t rs_received = 0;  // valid ones
  uint64_t rs_bad_hop_limit = 0;
  uint64_t rs_unspecified_with_sllao = 0;
  uint64_t ra_sent_unsolicited = 0;
  uint64_t ra_sent_solicited = 0;
  uint64_t ra_send_failed = 0;
  // "ra.<name> value" lines for the non-zero counters.
  std::string Format() const;
};

class RaServer : public stack::RouterSolicitationHandler {
 public:
  static constexpr Duration kMinDelayBetweenRas = absl::Seconds(3);
  static constexpr Duration kMaxInitialInterval = absl::Seconds(16);
  static constexpr int kMaxInitialAdvertisements = 3;
  static constexpr uint32_t kRdnssLen = 24;  // one address

  RaServer(stack::Stack& stack, buffer::ChunkPool& chunks,
           buffer::PacketPool& packets, stack::NicId nic,
           const GuestConfigPlan& plan);

  // Joins ff02::2 (so solicitations reach us) and schedules the first RA
  // for `now`. Does not register as the stack's RS handler (the caller
  // does: GuestConfigServices).
  absl::Status Start(Instant now);

  std::optional<stack::DropReason> OnRouterSolicitation(
      const stack::Ipv6Datagram& d, const wire::NdpRouterSolicitation& rs,
      Instant now) override;

  Instant NextDeadline() const { return next_ra_; }
  // Sends the RA that is due (then the caller's Stack::Flush sends it).
  void Poll(Instant now);

  const RaCounters& counters() const { return counters_; }

 private:
  bool SendAdvertisement(Instant now);

  stack::Stack& stack_;
  buffer::ChunkPool& chunks_;
  buffer::PacketPool& packets_;
  const stack::NicId nic_;
  const GuestConfigPlan plan_;
  Instant next_ra_ = kNever;
  Instant last_ra_ = absl::InfinitePast();
  int initial_left_ = kMaxInitialAdvertisements;
  bool solicited_pending_ = false;
  RaCounters counters_;
};

}  // namespace netstack::backend

#endif  // NETSTACK_BACKEND_RA_SERVER_H_
