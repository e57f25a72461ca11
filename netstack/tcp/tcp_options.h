// Tunables of the TCP layer. TcpLayerOptions sets defaults for every
// endpoint; a socket can override the per-connection ones before it
// connects or listens (TcpSocket::Set*).
#ifndef NETSTACK_TCP_TCP_OPTIONS_H_
#define NETSTACK_TCP_TCP_OPTIONS_H_

#include <cstdint>

#include "netstack/base/time.h"
#include "netstack/tcp/congestion_control.h"
#include "netstack/tcp/rtt_estimator.h"

namespace netstack::tcp {

struct ConnectionOptions {
  // Send buffer: bytes the application may queue beyond what is acked.
  uint32_t send_buffer = 4 << 20;
  // Receive buffer: the initial and the largest auto-tuned size. The
  // window we advertise is the free part of the current size.
  uint32_t receive_buffer = 256 << 10;
  uint32_t max_receive_buffer = 6 << 20;
  bool receive_autotuning = true;

  // Options we offer in a SYN (and accept in a SYN).
  bool sack = true;
  bool timestamps = true;
  bool window_scaling = true;

  CongestionAlgorithm congestion = CongestionAlgorithm::kCubic;
  uint32_t initial_cwnd = 10;
  RttOptions rtt;
  bool rack = true;  // RACK-TLP loss detection (RFC 8985)

  bool nodelay = false;  // TCP_NODELAY: no Nagle
  bool cork = false;     // TCP_CORK: only full segments until uncorked

  // Delayed ACK: at most this long; quick ACKs for the first segments of a
  // connection (Linux's quickack mode) and after out-of-order data.
  Duration delayed_ack = absl::Milliseconds(40);
  uint32_t quick_acks = 16;

  bool keepalive = false;
  Duration keepalive_idle = absl::Hours(2);
  Duration keepalive_interval = absl::Seconds(75);
  uint32_t keepalive_probes = 9;

  // Abort a connection whose data stays unacknowledged this long (RFC
  // 5482 TCP_USER_TIMEOUT); zero: after max_retransmits backoffs.
  Duration user_timeout = absl::ZeroDuration();
  uint32_t max_retransmits = 15;  // Linux tcp_retries2
  uint32_t syn_retries = 6;

  // TIME_WAIT lasts 2 * MSL.
  Duration msl = absl::Seconds(30);
};

struct TcpLayerOptions {
  ConnectionOptions connection;
  // Listen backlog cap (SOMAXCONN); Listen(n) uses min(n, this).
  uint32_t max_backlog = 4096;
  bool syn_cookies = true;
  // Keys for ISNs and SYN cookies; tests pin them, netstackd draws them
  // from getrandom.
  uint64_t seed = 0;
  // Ephemeral ports for Connect without Bind.
  uint16_t ephemeral_low = 32768;
  uint16_t ephemeral_high = 60999;
};

}  // namespace netstack::tcp

#endif  // NETSTACK_TCP_TCP_OPTIONS_H_
