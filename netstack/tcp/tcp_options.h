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
  // Caps on what peers can make the layer hold (STYLE.md: every table a
  // peer can grow has a cap). Each refusal is counted (TcpCounters):
  //   max_connections  connections in any state but LISTEN and TIME_WAIT
  //                    (a Connection is a few KiB plus its buffers). A SYN
  //                    or cookie ACK past it is dropped
  //                    (drop.tcp_connection_limit), a Connect fails with
  //                    NoBuffers (connection_limit_refusals).
  //   max_half_open    SYN-RECEIVED connections of all listeners together
  //                    (each listener's backlog caps its own). Past it a
  //                    SYN gets a SYN cookie if syn_cookies is on, else is
  //                    dropped (drop.tcp_half_open_limit).
  //   max_time_wait    TIME_WAIT entries (about 200 bytes each, time_wait.h).
  //                    Past it a connection closes without TIME_WAIT
  //                    (time_wait_overflows), as Linux does past
  //                    tcp_max_tw_buckets.
  uint32_t max_connections = 262144;
  uint32_t max_half_open = 16384;
  uint32_t max_time_wait = 65536;
  // Keys for ISNs and SYN cookies; tests pin them, netstackd draws them
  // from getrandom.
  uint64_t seed = 0;
  // SYNs a listener answers a second (half-open or cookie) while the
  // stack's links are busy: a read of one stopped at its batch limit
  // since the last Poll (Stack::RxBatchLimitHits), the peer sending
  // faster than we read. Past it, with busy_syn_burst saved up, a SYN is
  // dropped (drop.tcp_syn_shed, syns_shed) and the peer retransmits it.
  // A SYN flood then costs us a read, not a SYN-ACK written and the RST
  // it draws read back, and the established connections keep the link.
  // 0 (the default): every SYN is answered, as Linux does.
  uint32_t busy_syn_rate = 0;
  uint32_t busy_syn_burst = 0;
  // Ephemeral ports for Connect without Bind.
  uint16_t ephemeral_low = 32768;
  uint16_t ephemeral_high = 60999;
};

}  // namespace netstack::tcp

#endif  // NETSTACK_TCP_TCP_OPTIONS_H_
