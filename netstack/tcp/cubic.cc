#include "netstack/tcp/cubic.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace netstack::tcp {
namespace {

// Section 4.6: ssthresh = flight_size * beta_cubic, at least 2 packets.
// (The RFC also allows cwnd * beta, as Linux does; we take the flight size
// the sender reports and do not grow cwnd while application-limited.)
uint32_t BetaFlight(uint32_t in_flight) {
  return std::max(static_cast<uint32_t>(uint64_t{in_flight} * 7 / 10), 2u);
}

}  // namespace

void Cubic::OnAck(const AckEvent& e) {
  const Instant previous_ack = last_ack_;
  last_ack_ = e.now;
  if (e.in_recovery || e.delivered_packets == 0) return;
  if (e.app_limited) {
    // Section 5.8: t must not include application-limited periods, or
    // W_cubic(t) would be far ahead when the application comes back.
    // Sliding the epoch start holds the curve still meanwhile.
    if (s_.in_epoch) {
      s_.epoch_start += e.now - std::max(previous_ack, s_.epoch_start);
    }
    return;
  }
  uint32_t delivered = e.delivered_packets;
  if (InSlowStart()) {
    delivered = SlowStart(delivered);  // section 4.10
    if (delivered == 0) return;
  }
  CongestionAvoidance(e, delivered);
}

void Cubic::StartEpoch(Instant now) {
  s_.in_epoch = true;
  s_.epoch_start = now;
  s_.credit = 0;
  const double cwnd_epoch = cwnd_;
  if (s_.after_rto || s_.w_max <= cwnd_epoch) {
    // Section 4.8 after a timeout; likewise when cwnd already is at or past
    // W_max (no reduction yet, or after an undo): probe upwards from here.
    s_.w_max = cwnd_epoch;
    s_.k = 0;
  } else {
    // Equation 2: the time the curve takes from cwnd_epoch back to W_max.
    s_.k = std::cbrt((s_.w_max - cwnd_epoch) / kC);
  }
  s_.after_rto = false;
  s_.w_est = cwnd_epoch;  // section 4.3
}

void Cubic::CongestionAvoidance(const AckEvent& e, uint32_t delivered) {
  if (!s_.in_epoch) StartEpoch(e.now);
  const double cwnd = cwnd_;

  // Section 4.3: Reno's window with CUBIC's beta, grown by alpha per RTT
  // until it regains the cwnd before the last reduction, by 1 after.
  const double alpha = s_.w_est >= s_.cwnd_prior ? 1.0 : kAlpha;
  s_.w_est += alpha * delivered / cwnd;

  const double t = absl::ToDoubleSeconds(e.now - s_.epoch_start);
  if (WCubic(t) < s_.w_est) {
    // Reno-friendly region: cwnd = W_est (never shrinking it).
    const double est = std::min(s_.w_est, static_cast<double>(kMaxCwnd));
    cwnd_ = std::max(cwnd_, static_cast<uint32_t>(est));
    s_.credit = 0;
    return;
  }

  // Sections 4.2, 4.4, 4.5: aim at where the curve will be one RTT from
  // now, between no growth and 1.5 cwnd, and close the gap over the next
  // cwnd packets. RTT is the path's minimum RTT, as in Linux: the queue
  // CUBIC itself builds should not speed it up.
  const Duration rtt = e.min_rtt > absl::ZeroDuration()
                           ? e.min_rtt
                           : e.rtt.value_or(absl::ZeroDuration());
  const double target =
      std::clamp(WCubic(t + absl::ToDoubleSeconds(rtt)), cwnd, 1.5 * cwnd);
  s_.credit += (target - cwnd) / cwnd * delivered;
  if (s_.credit >= 1) {
    const double grow = std::floor(s_.credit);
    s_.credit -= grow;
    cwnd_ = static_cast<uint32_t>(
        std::min(cwnd + grow, static_cast<double>(kMaxCwnd)));
  }
}

void Cubic::OnCongestionEvent(Instant now, uint32_t in_flight) {
  Save();
  const double cwnd = cwnd_;
  // Section 4.7, fast convergence: a reduction before regaining the last
  // W_max means another flow is taking bandwidth; aim lower to release it.
  s_.w_max = cwnd < s_.w_max ? cwnd * (1 + kBeta) / 2 : cwnd;
  s_.cwnd_prior = cwnd;
  ssthresh_ = BetaFlight(in_flight);
  cwnd_ = ssthresh_;
  s_.in_epoch = false;
  s_.after_rto = false;
  recovering_ = true;
}

void Cubic::OnRecoveryEnd(Instant now) {
  if (!recovering_) return;
  recovering_ = false;
  cwnd_ = ssthresh_;
}

void Cubic::OnRetransmitTimeout(Instant now, uint32_t in_flight) {
  // Section 4.8: Reno's loss window, CUBIC's ssthresh; the curve restarts
  // from wherever congestion avoidance begins.
  Save();
  s_.cwnd_prior = cwnd_;
  ssthresh_ = BetaFlight(in_flight);
  cwnd_ = 1;
  s_.in_epoch = false;
  s_.after_rto = true;
  recovering_ = false;
}

void Cubic::Undo() {
  // Section 4.9: the reduction was spurious; put everything back.
  if (!undo_.has_value()) return;
  cwnd_ = undo_->cwnd;
  ssthresh_ = undo_->ssthresh;
  s_ = undo_->state;
  undo_.reset();
  recovering_ = false;
}

void Cubic::OnIdleRestart(Instant now) {
  RestartAfterIdle();
  s_.in_epoch = false;
}

}  // namespace netstack::tcp
