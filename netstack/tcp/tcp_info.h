// Per-connection statistics in the spirit of Linux's TCP_INFO.
#ifndef NETSTACK_TCP_TCP_INFO_H_
#define NETSTACK_TCP_TCP_INFO_H_

#include <cstdint>
#include <string>

#include "netstack/base/time.h"

namespace netstack::tcp {

enum class TcpState : uint8_t {
  kClosed,
  kListen,
  kSynSent,
  kSynReceived,
  kEstablished,
  kFinWait1,
  kFinWait2,
  kCloseWait,
  kClosing,
  kLastAck,
  kTimeWait,
};
const char* StateName(TcpState s);

struct TcpInfo {
  TcpState state = TcpState::kClosed;
  uint32_t mss = 0;         // payload bytes per wire packet we send
  uint32_t peer_mss = 0;    // the peer's MSS option
  uint8_t snd_wscale = 0;   // applied to the peer's windows
  uint8_t rcv_wscale = 0;   // applied to ours
  bool sack = false;
  bool timestamps = false;

  Duration rtt;             // smoothed
  Duration rttvar;
  Duration min_rtt;
  Duration rto;
  uint32_t cwnd = 0;        // packets
  uint32_t ssthresh = 0;    // packets
  uint64_t bytes_in_flight = 0;
  uint32_t snd_wnd = 0;     // bytes, scaled
  uint32_t rcv_wnd = 0;     // bytes we advertise
  uint32_t rcv_buffer = 0;  // current (auto-tuned) receive buffer

  uint64_t bytes_sent = 0;        // including retransmissions
  uint64_t bytes_retransmitted = 0;
  uint64_t bytes_acked = 0;
  uint64_t bytes_received = 0;    // in order, delivered to the buffer
  uint64_t segments_sent = 0;     // wire packets (a super-segment counts
                                  // as the packets it becomes)
  uint64_t segments_received = 0;
  uint64_t retransmits = 0;       // retransmitted packets
  uint64_t fast_retransmits = 0;  // recovery episodes
  uint64_t timeouts = 0;          // RTO expirations
  uint64_t tail_loss_probes = 0;
  uint64_t spurious_recoveries = 0;  // congestion responses undone
  uint64_t idle_restarts = 0;     // cwnd restarted after idle (RFC 5681 4.1)
  uint64_t dsacks_received = 0;   // D-SACKs: spurious retransmissions
  uint32_t reorder_window_mult = 1;
  uint64_t dup_acks_received = 0;
  uint64_t sacked_bytes = 0;      // currently SACKed
  uint64_t lost_bytes = 0;        // currently marked lost
  uint64_t ooo_segments = 0;      // received out of order
  uint64_t zero_window_probes = 0;
  uint64_t keepalive_probes = 0;
  uint64_t acks_sent = 0;
  uint64_t delayed_acks = 0;      // ACKs sent by the delayed-ACK timer
  double delivery_rate_bps = 0;   // latest delivery-rate sample, bits/s

  std::string ToString() const;
};

}  // namespace netstack::tcp

#endif  // NETSTACK_TCP_TCP_INFO_H_
