// Round-trip time estimation and the retransmission timeout (RFC 6298),
// plus the windowed minimum RTT that RACK and CUBIC use.
#ifndef NETSTACK_TCP_RTT_ESTIMATOR_H_
#define NETSTACK_TCP_RTT_ESTIMATOR_H_

#include <array>
#include <cstdint>

#include "netstack/base/time.h"

namespace netstack::tcp {

struct RttOptions {
  // RFC 6298 says 1 s; Linux and most modern stacks use 200 ms.
  Duration min_rto = absl::Milliseconds(200);
  Duration max_rto = absl::Seconds(120);
  Duration initial_rto = absl::Seconds(1);
  // Clock granularity G of RFC 6298 section 2.
  Duration granularity = absl::Milliseconds(1);
  // Window of the min-RTT filter (RACK, RFC 8985 uses the minimum over
  // the connection; Linux keeps 5 minutes).
  Duration min_rtt_window = absl::Seconds(300);
};

class RttEstimator {
 public:
  explicit RttEstimator(const RttOptions& options = {});

  // A measurement (RFC 6298 section 2.2/2.3; Karn's rule is the caller's:
  // never sample a retransmitted segment without timestamps). Resets the
  // backoff (section 5.7 allows it once an ACK for new data arrives).
  void Sample(Duration rtt, Instant now);
  bool has_sample() const { return has_sample_; }
  Duration srtt() const { return srtt_; }
  Duration rttvar() const { return rttvar_; }
  // InfiniteDuration if none.
  Duration min_rtt() const { return min_rtt_[0].rtt; }
  Duration latest_rtt() const { return latest_; }

  // The RTO including backoff: max(min_rto, srtt + max(G, 4 rttvar))
  // times 2^backoff, capped at max_rto.
  Duration Rto() const;
  // The timer expired: double (section 5.5).
  void Backoff();
  void ResetBackoff() { backoff_ = 0; }
  uint32_t backoff() const { return backoff_; }

 private:
  struct MinRttSample {
    Duration rtt = absl::InfiniteDuration();
    Instant at = absl::InfinitePast();
  };
  void UpdateMinRtt(Duration rtt, Instant now);

  RttOptions options_;
  bool has_sample_ = false;
  Duration srtt_;
  Duration rttvar_;
  Duration latest_;
  // Windowed minimum (K. Nichols' running min, as in Linux's win_minmax):
  // the best sample of the window and two later, larger candidates to
  // take over when it ages out, so the minimum steps up gradually rather
  // than jumping to the latest sample when the window passes.
  std::array<MinRttSample, 3> min_rtt_;
  uint32_t backoff_ = 0;
};

}  // namespace netstack::tcp

#endif  // NETSTACK_TCP_RTT_ESTIMATOR_H_
