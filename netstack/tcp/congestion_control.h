// Congestion control behind an interface: the sender reports events, the
// algorithm owns cwnd and ssthresh. NewReno (RFC 5681 + RFC 6582) and
// CUBIC (RFC 9438) implement it today; BBR can be added without touching
// the sender.
//
// Units: cwnd and ssthresh are counted in MSS-sized packets, as in Linux
// and gVisor, even when the sender emits super-segments (a 64 KiB
// super-segment counts as ceil(64 KiB / MSS) packets).
//
// Loss recovery itself (which segment to retransmit, RFC 6675 / RFC 6582
// / RACK-TLP) lives in the sender. The sender calls:
//   OnAck            for every ACK that delivers new data (cumulative or
//                    SACKed), in and out of recovery;
//   OnCongestionEvent once per recovery episode, when fast retransmit or
//                    RACK starts recovery (ssthresh and cwnd drop here);
//   OnRecoveryEnd    when the ACK reaches the recovery point;
//   OnRetransmitTimeout when the RTO fires (first expiry of an episode);
//   OnIdleRestart    after an idle period longer than the RTO (RFC 5681
//                    section 4.1).
#ifndef NETSTACK_TCP_CONGESTION_CONTROL_H_
#define NETSTACK_TCP_CONGESTION_CONTROL_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>

#include "netstack/base/time.h"

namespace netstack::tcp {

enum class CongestionAlgorithm : uint8_t { kNewReno, kCubic };
std::string_view AlgorithmName(CongestionAlgorithm a);
std::optional<CongestionAlgorithm> ParseAlgorithm(std::string_view name);

struct AckEvent {
  Instant now;
  // Packets newly delivered by this ACK (cumulatively acked plus newly
  // SACKed), in MSS units, rounded up.
  uint32_t delivered_packets = 0;
  // Packets in flight (the RFC 6675 "pipe", in MSS units) before this ACK
  // was processed.
  uint32_t prior_in_flight = 0;
  // A valid RTT sample from this ACK, if any; and the path's minimum RTT.
  std::optional<Duration> rtt;
  Duration min_rtt = absl::ZeroDuration();
  // The sender could not fill cwnd before this ACK (application-limited,
  // RFC 7661): the algorithm must not grow cwnd on it.
  bool app_limited = false;
  // The ACK arrived during loss recovery (cwnd growth is suspended).
  bool in_recovery = false;
};

class CongestionControl {
 public:
  virtual ~CongestionControl() = default;
  virtual CongestionAlgorithm algorithm() const = 0;

  virtual void OnAck(const AckEvent& e) = 0;
  // Sets ssthresh (and cwnd) for a fast-recovery episode.
  virtual void OnCongestionEvent(Instant now, uint32_t in_flight) = 0;
  virtual void OnRecoveryEnd(Instant now) = 0;
  // ssthresh from in_flight, cwnd = 1 (RFC 5681 equation 4).
  virtual void OnRetransmitTimeout(Instant now, uint32_t in_flight) = 0;
  // The congestion event was spurious (RFC 5682/RFC 8985 undo): restore
  // the state saved at the last OnCongestionEvent/OnRetransmitTimeout.
  virtual void Undo() = 0;
  virtual void OnIdleRestart(Instant now) = 0;

  uint32_t cwnd() const { return cwnd_; }
  uint32_t ssthresh() const { return ssthresh_; }
  bool InSlowStart() const { return cwnd_ < ssthresh_; }

  // No cwnd grows past this: far above any real window, and far enough
  // below UINT32_MAX that the arithmetic on it cannot wrap.
  static constexpr uint32_t kMaxCwnd = 1u << 24;

 protected:
  explicit CongestionControl(uint32_t initial_cwnd)
      : cwnd_(initial_cwnd < 1 ? 1 : initial_cwnd), initial_cwnd_(cwnd_) {}

  // Slow start (RFC 5681 section 3.1, RFC 3465 byte counting): grows cwnd
  // by every packet the ACK delivered, never past ssthresh. RFC 3465's
  // L = 2 limit is not applied, as in Linux's tcp_slow_start: a GRO or
  // LRO receiver ACKs once per ~45 packets, and with L = 2 cwnd would grow
  // ~4% per RTT instead of doubling. Bursts are bounded by the sender's
  // super-segment size instead. Call only while
  // InSlowStart(). Returns the delivered packets that slow start did not
  // use because cwnd reached ssthresh: congestion avoidance counts those.
  uint32_t SlowStart(uint32_t delivered);
  // RFC 5681 section 4.1: after an idle period longer than the RTO, cwnd
  // restarts from the restart window min(IW, cwnd). ssthresh first keeps
  // 3/4 of the old cwnd (RFC 2861 section 3, as Linux does), so slow start
  // climbs back to near the old rate instead of crawling there in
  // congestion avoidance.
  void RestartAfterIdle();

  uint32_t cwnd_;
  uint32_t ssthresh_ = UINT32_MAX / 2;
  uint32_t initial_cwnd_;
};

// initial_cwnd: RFC 6928's 10 packets by default.
std::unique_ptr<CongestionControl> MakeCongestionControl(
    CongestionAlgorithm a, uint32_t initial_cwnd = 10);

}  // namespace netstack::tcp

#endif  // NETSTACK_TCP_CONGESTION_CONTROL_H_
