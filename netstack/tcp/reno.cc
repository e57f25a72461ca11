#include "netstack/tcp/reno.h"

#include <algorithm>
#include <cstdint>

namespace netstack::tcp {
namespace {

// RFC 5681 equations 4 (RTO) and the fast-retransmit step of section 3.2:
// ssthresh = max(FlightSize / 2, 2 * SMSS).
uint32_t HalfFlight(uint32_t in_flight) { return std::max(in_flight / 2, 2u); }

}  // namespace

void NewReno::OnAck(const AckEvent& e) {
  // RFC 5681 section 3.2 suspends growth during fast recovery; RFC 7661
  // forbids growing a window the application did not fill.
  if (e.in_recovery || e.app_limited || e.delivered_packets == 0) return;
  uint32_t delivered = e.delivered_packets;
  if (InSlowStart()) {
    delivered = SlowStart(delivered);
    if (delivered == 0) return;
  }
  // Congestion avoidance, RFC 5681 section 3.1 in the byte-counting form of
  // RFC 3465 section 2.1: one packet more per cwnd packets delivered, i.e.
  // one per RTT, however the receiver groups its ACKs.
  ca_delivered_ += delivered;
  if (ca_delivered_ >= cwnd_) {
    const uint32_t grow = ca_delivered_ / cwnd_;
    ca_delivered_ -= grow * cwnd_;
    cwnd_ = std::min(cwnd_ + grow, kMaxCwnd);
  }
}

void NewReno::OnCongestionEvent(Instant now, uint32_t in_flight) {
  Save();
  ssthresh_ = HalfFlight(in_flight);
  cwnd_ = ssthresh_;
  ca_delivered_ = 0;
  recovering_ = true;
}

void NewReno::OnRecoveryEnd(Instant now) {
  // RFC 6582 section 3.2 step 3: deflate to ssthresh.
  if (!recovering_) return;
  recovering_ = false;
  cwnd_ = ssthresh_;
}

void NewReno::OnRetransmitTimeout(Instant now, uint32_t in_flight) {
  Save();
  ssthresh_ = HalfFlight(in_flight);
  cwnd_ = 1;  // the loss window, RFC 5681 section 3.1
  ca_delivered_ = 0;
  recovering_ = false;
}

void NewReno::Undo() {
  if (!undo_.has_value()) return;
  cwnd_ = undo_->cwnd;
  ssthresh_ = undo_->ssthresh;
  undo_.reset();
  ca_delivered_ = 0;
  recovering_ = false;
}

void NewReno::OnIdleRestart(Instant now) {
  RestartAfterIdle();
  ca_delivered_ = 0;
}

}  // namespace netstack::tcp
