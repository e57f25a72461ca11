// CUBIC congestion control (RFC 9438), counted in packets.
//
// After a congestion event cwnd follows W_cubic(t) = C (t - K)^3 + W_max,
// t being the time since the epoch started (the first ACK of the
// congestion-avoidance stage after the event): concave while below W_max,
// flat around it at t = K, convex beyond. Where standard TCP would have
// been faster (small cwnd, short RTT) cwnd follows the Reno estimate W_est
// instead (section 4.3). Slow start is the shared RFC 5681/3465 one.
#ifndef NETSTACK_TCP_CUBIC_H_
#define NETSTACK_TCP_CUBIC_H_

#include <cstdint>
#include <optional>

#include "netstack/base/time.h"
#include "netstack/tcp/congestion_control.h"

namespace netstack::tcp {

class Cubic final : public CongestionControl {
 public:
  // RFC 9438 section 4.1.1. kBeta is applied to in_flight as 7/10 in
  // integer arithmetic so that ssthresh is exact.
  static constexpr double kBeta = 0.7;
  static constexpr double kC = 0.4;
  // Section 4.3: the additive increase, per RTT, that makes CUBIC with
  // kBeta as fast on average as Reno's 1 with 0.5.
  static constexpr double kAlpha = 3 * (1 - kBeta) / (1 + kBeta);

  explicit Cubic(uint32_t initial_cwnd) : CongestionControl(initial_cwnd) {}

  CongestionAlgorithm algorithm() const override {
    return CongestionAlgorithm::kCubic;
  }
  void OnAck(const AckEvent& e) override;
  void OnCongestionEvent(Instant now, uint32_t in_flight) override;
  void OnRecoveryEnd(Instant now) override;
  void OnRetransmitTimeout(Instant now, uint32_t in_flight) override;
  void Undo() override;
  void OnIdleRestart(Instant now) override;

  // The curve, for tests and diagnostics. K and the epoch are set on the
  // first congestion-avoidance ACK after an event.
  double w_max() const { return s_.w_max; }
  double k() const { return s_.k; }
  double w_est() const { return s_.w_est; }
  bool in_epoch() const { return s_.in_epoch; }
  Instant epoch_start() const { return s_.epoch_start; }
  // RFC 9438 equation 1, t seconds after the epoch start.
  double WCubic(double t) const {
    const double d = t - s_.k;
    return kC * d * d * d + s_.w_max;
  }

 private:
  struct State {
    double w_max = 0;       // W_max: cwnd at the last reduction (section 4.7)
    double cwnd_prior = 0;  // cwnd just before the last reduction
    double k = 0;           // K, seconds (equation 2)
    double w_est = 0;       // W_est (section 4.3)
    bool in_epoch = false;
    Instant epoch_start;
    // The next epoch follows an RTO: K = 0, W_max = cwnd_epoch (4.8).
    bool after_rto = false;
    // Fractional packets of growth not yet added to cwnd.
    double credit = 0;
  };
  struct Saved {
    uint32_t cwnd;
    uint32_t ssthresh;
    State state;
  };

  void StartEpoch(Instant now);
  void CongestionAvoidance(const AckEvent& e, uint32_t delivered);
  void Save() { undo_ = Saved{cwnd_, ssthresh_, s_}; }

  State s_;
  bool recovering_ = false;
  Instant last_ack_ = absl::InfinitePast();
  std::optional<Saved> undo_;
};

}  // namespace netstack::tcp

#endif  // NETSTACK_TCP_CUBIC_H_
