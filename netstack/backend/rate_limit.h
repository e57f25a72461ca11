// The backend's per-guest rate limits (issue #33, "Per-guest limits";
// docs/POLICY.md "Rate limits"), both off by default (BackendLimits):
//
//   - the new-flow rate: new outbound flows a second (a TCP SYN, a
//     datagram that would open a UDP flow, an echo request that would open
//     a ping flow), a RateBucket of flows. The Backend drops a flow over
//     it in silence (Admission::Kind::kDrop): the guest's TCP retransmits
//     its SYN after its RTO, and a UDP or ping client resends as it would
//     after a loss. A reset or an ICMP error would make the client give up
//     instead, and the limit is meant to slow a guest, not to fail it.
//   - the egress byte rate: bytes a second that the guest's own flows
//     write to host sockets, an EgressLimiter. A TCP flow over it stops
//     moving the guest's bytes to its host socket and waits for the loop's
//     timer; meanwhile it reads no more from the guest, so the guest's
//     window closes and nothing is dropped. A datagram (UDP, echo) over it
//     is dropped whole, as a full link would drop it.
//
// Time is passed in; the limiter's only timer is on the loop's wheel.
// Nothing here allocates per packet: the waiting flows' queue reuses its
// vectors.
#ifndef NETSTACK_BACKEND_RATE_LIMIT_H_
#define NETSTACK_BACKEND_RATE_LIMIT_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "netstack/base/time.h"
#include "netstack/eventloop/timer_wheel.h"
#include "netstack/transport/address.h"

namespace netstack::backend {

// `rate` tokens a second, at most `burst` saved up, full at its first
// use; takes any amount. An instant earlier than one already seen counts
// as no time passed.
class RateBucket {
 public:
  RateBucket(double rate, double burst) : rate_(rate), burst_(burst) {}

  // The tokens there are at `now`.
  double Available(Instant now) {
    Refill(now);
    return tokens_;
  }
  // Takes `n` tokens if there are that many; otherwise takes none.
  bool Take(double n, Instant now) {
    Refill(now);
    if (tokens_ < n) return false;
    tokens_ -= n;
    return true;
  }
  // Takes `n` of the tokens Available said were there (never below 0).
  void Consume(double n) { tokens_ = n >= tokens_ ? 0 : tokens_ - n; }
  // The first instant at which `n` tokens (at most the burst) are there,
  // if none is taken meanwhile; `now` if they are already.
  Instant When(double n, Instant now);

  double rate() const { return rate_; }
  double burst() const { return burst_; }

 private:
  void Refill(Instant now);

  double rate_;
  double burst_;
  double tokens_ = 0;
  Instant refill_at_ = absl::InfinitePast();
};

// What a new flow's admission hook decides (UdpFlowOptions::admit,
// PingOptions::admit). A bool is the egress policy's verdict, so a hook
// that judges only the policy returns true or false as before.
struct Admission {
  enum class Kind : uint8_t {
    kAllow,
    kRefuse,  // the egress policy: ICMP administratively prohibited
    kDrop,    // the new-flow rate: dropped in silence, the guest resends
  };
  Admission(bool allow)  // NOLINT: a policy verdict reads as itself
      : kind(allow ? Kind::kAllow : Kind::kRefuse) {}
  Admission(Kind k) : kind(k) {}  // NOLINT
  Kind kind;
};

struct EgressLimitCounters {
  uint64_t bytes = 0;  // let through: TCP bytes and datagrams' bytes
  // A TCP flow found the budget spent and waited for the timer.
  uint64_t waits = 0;
  // Of `bytes`, the TCP bytes written when the timer resumed a flow that
  // had waited.
  uint64_t bytes_delayed = 0;
  // Datagrams (UDP, echo requests) over the budget, dropped whole.
  uint64_t datagrams_dropped = 0;
  uint64_t bytes_dropped = 0;
};

// The guest's egress bytes. A TCP flow asks Allow before it moves guest
// bytes to its host socket, writes at most that, and reports it with
// Sent. When Allow says 0 the flow calls Wait and moves nothing more until
// `resume` is called for it: from the loop's timer, once min_write()
// bytes are saved up. Waiting flows are served in turn: one that wrote at
// its last resume goes behind those that got nothing. While any flow
// waits, Allow says 0 to the others (outside a resume), so a busy flow
// cannot jump the queue.
class EgressLimiter {
 public:
  // The smallest amount a waiting flow is resumed with (about one MTU's
  // worth), so a slow rate makes few large writes, not many tiny ones.
  static constexpr uint64_t kMinWrite = 1500;

  using Resume = absl::AnyInvocable<void(const transport::FourTuple& flow)>;
  // `rate` and `burst` in bytes (burst >= kMinWrite, as the flag parser
  // makes sure); `timers` is the loop's wheel and must outlive this.
  EgressLimiter(uint64_t rate, uint64_t burst, eventloop::TimerWheel& timers,
                Resume resume);
  EgressLimiter(const EgressLimiter&) = delete;
  EgressLimiter& operator=(const EgressLimiter&) = delete;

  // The bytes a TCP flow may write now; 0: none (call Wait).
  [[nodiscard]] uint64_t Allow(Instant now);
  // `n` bytes of what Allow granted were written.
  void Sent(uint64_t n);
  // `flow` found Allow 0: queued until `resume(flow)` (counted in waits).
  void Wait(const transport::FourTuple& flow, Instant now);
  // A datagram of `n` bytes: true and taken if the budget holds it whole,
  // false (counted, dropped) if not. Never waits. While TCP flows wait,
  // datagrams get at most half the rate (datagram_share_), so neither a
  // UDP flood nor a TCP upload starves the other.
  [[nodiscard]] bool TakeDatagram(size_t n, Instant now);

  uint64_t rate() const { return static_cast<uint64_t>(bucket_.rate()); }
  uint64_t burst() const { return static_cast<uint64_t>(bucket_.burst()); }
  uint64_t min_write() const { return min_write_; }
  // Queue entries now (a flow that ended while queued stays until its
  // turn, when `resume` finds it gone).
  size_t waiting() const { return waiters_.size(); }
  const EgressLimitCounters& counters() const { return counters_; }

 private:
  void OnTimer(Instant now);
  void Arm(Instant now);

  RateBucket bucket_;
  RateBucket datagram_share_;
  const uint64_t min_write_;
  eventloop::TimerWheel& timers_;
  eventloop::Timer timer_;
  Resume resume_;
  // Waiting flows, in turn; during a resume, the batch being resumed and
  // those of it that wrote (they go behind the rest).
  std::vector<transport::FourTuple> waiters_;
  std::vector<transport::FourTuple> batch_;
  std::vector<transport::FourTuple> served_;
  bool resuming_ = false;
  uint64_t bytes_at_resume_ = 0;  // counters_.bytes as this resume began
  EgressLimitCounters counters_;
};

// --new-flow-rate N[/s][,burst=M]: N new outbound flows a second (0: no
// limit), with M saved up (default N: a second's worth). N and M at most
// 1,000,000.
struct NewFlowRate {
  uint32_t per_second = 0;
  uint32_t burst = 0;
};
absl::StatusOr<NewFlowRate> ParseNewFlowRate(std::string_view text);

// --egress-rate RATE[/s][,burst=SIZE]. RATE is a number and a unit that
// says bits or bytes a second: bit, kbit, Mbit, Gbit (SI, the prefix in
// either case), or B, kB (KB), MB, GB (SI) or KiB, MiB, GiB (binary);
// 'Mb' and the like are refused as ambiguous. 0 (no unit) is no limit.
// From 1 kbit/s to 100 Gbit/s. SIZE is bytes with one of the byte units,
// at least kMinWrite; by default a tenth of a second's worth, at least
// 64 KiB (so a largest UDP datagram fits).
struct EgressRate {
  uint64_t bytes_per_second = 0;
  uint64_t burst = 0;
};
absl::StatusOr<EgressRate> ParseEgressRate(std::string_view text);
// "10 Mbit/s (1250000 B/s), burst 131072 B", for the start line.
std::string FormatEgressRate(const EgressRate& r);

}  // namespace netstack::backend

#endif  // NETSTACK_BACKEND_RATE_LIMIT_H_
