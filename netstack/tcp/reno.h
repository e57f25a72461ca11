// NewReno congestion control: slow start and congestion avoidance of
// RFC 5681 with Appropriate Byte Counting (RFC 3465), counted in packets.
// The loss-recovery half of NewReno (RFC 6582: partial ACKs, the recovery
// point) is the sender's; this class only owns cwnd and ssthresh.
#ifndef NETSTACK_TCP_RENO_H_
#define NETSTACK_TCP_RENO_H_

#include <cstdint>
#include <optional>

#include "netstack/base/time.h"
#include "netstack/tcp/congestion_control.h"

namespace netstack::tcp {

class NewReno final : public CongestionControl {
 public:
  explicit NewReno(uint32_t initial_cwnd) : CongestionControl(initial_cwnd) {}

  CongestionAlgorithm algorithm() const override {
    return CongestionAlgorithm::kNewReno;
  }
  void OnAck(const AckEvent& e) override;
  void OnCongestionEvent(Instant now, uint32_t in_flight) override;
  void OnRecoveryEnd(Instant now) override;
  void OnRetransmitTimeout(Instant now, uint32_t in_flight) override;
  void Undo() override;
  void OnIdleRestart(Instant now) override;

 private:
  struct Saved {
    uint32_t cwnd;
    uint32_t ssthresh;
  };
  void Save() { undo_ = Saved{cwnd_, ssthresh_}; }

  // Packets delivered in congestion avoidance since cwnd last grew: cwnd
  // grows by one each time a whole cwnd's worth has been delivered.
  uint32_t ca_delivered_ = 0;
  // Between OnCongestionEvent and OnRecoveryEnd (cleared by an RTO or an
  // undo, after which recovery end must not touch cwnd).
  bool recovering_ = false;
  std::optional<Saved> undo_;
};

}  // namespace netstack::tcp

#endif  // NETSTACK_TCP_RENO_H_
