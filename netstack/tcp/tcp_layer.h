// The TCP layer of one stack: demultiplexing, listeners, SYN cookies,
// connection lifetimes and the timers of every connection.
//
// Driving it: the stack delivers segments (Deliver, via TransportHandler)
// while it handles a receive batch; the embedder calls Poll(now) once per
// event-loop turn (after Notifier::Dispatch), which runs due timers, sends
// what the batch and the API calls made pending (ACKs, data, window
// updates, SYNs) and ends with Stack::Flush. NextDeadline() says when Poll
// must run next.
#ifndef NETSTACK_TCP_TCP_LAYER_H_
#define NETSTACK_TCP_TCP_LAYER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "netstack/base/time.h"
#include "netstack/base/token_bucket.h"
#include "netstack/buffer/chunk.h"
#include "netstack/buffer/chunk_arena.h"
#include "netstack/buffer/packet.h"
#include "netstack/eventloop/timer_wheel.h"
#include "netstack/stack/stack.h"
#include "netstack/tcp/isn.h"
#include "netstack/tcp/segment.h"
#include "netstack/tcp/syn_cookies.h"
#include "netstack/tcp/tcp_options.h"
#include "netstack/tcp/tcp_socket.h"
#include "netstack/tcp/time_wait.h"
#include "netstack/transport/address.h"
#include "netstack/transport/notifier.h"

namespace netstack::tcp {

struct TcpCounters {
  uint64_t segments_in = 0;
  uint64_t segments_out = 0;  // calls to the IP layer (a super-segment is 1)
  uint64_t active_opens = 0;
  uint64_t passive_opens = 0;
  uint64_t established = 0;
  uint64_t resets_sent = 0;
  uint64_t resets_received = 0;
  uint64_t challenge_acks = 0;
  uint64_t invalid_acks_rate_limited = 0;
  uint64_t syn_cookies_sent = 0;
  uint64_t syn_cookies_accepted = 0;
  uint64_t syn_cookies_rejected = 0;
  uint64_t accept_queue_overflows = 0;
  // Half-open (SYN-RECEIVED) connections dropped, without a RST, because
  // their listener closed (as Linux drops its request socks).
  uint64_t half_open_dropped_listener_closed = 0;
  uint64_t time_wait_recycled = 0;
  // TcpLayerOptions limits: a connection (SYN, cookie ACK or Connect)
  // refused at max_connections; a SYN dropped at max_half_open with SYN
  // cookies off; a connection that closed without TIME_WAIT because
  // max_time_wait entries were held (Linux: TCPTimeWaitOverflow).
  uint64_t connection_limit_refusals = 0;
  uint64_t half_open_limit_drops = 0;
  uint64_t time_wait_overflows = 0;
  uint64_t connections_timed_out = 0;
  // ICMP errors: taken by a connection (PMTU, a hard error while
  // connecting, a soft error kept for a timeout), or ignored (no
  // connection, or a sequence number we have not sent: RFC 5927).
  uint64_t icmp_errors_taken = 0;
  uint64_t icmp_errors_ignored = 0;
  uint64_t pmtu_decreases = 0;
  uint64_t retransmits = 0;  // packets, all connections
  // RTOs that found the bytes at SND.UNA SACKed: the peer reneged on its
  // SACKs (RFC 2018 section 8), or they were forged. Every SACK mark of
  // the connection is forgotten (Linux: TCPSACKReneging).
  uint64_t sack_reneging = 0;
  uint64_t send_failures = 0;  // no packet/chunk, or no route
  // Held SYNs (SetSynHandler): held, retransmissions absorbed while held,
  // accepted (SYN-ACK sent), refused, and dropped at the table's cap.
  uint64_t syns_held = 0;
  uint64_t held_syn_retransmits = 0;
  uint64_t held_syns_accepted = 0;
  uint64_t held_syns_refused = 0;
  uint64_t held_syn_limit_drops = 0;
  // SYNs to a listener dropped over TcpLayerOptions::busy_syn_rate.
  uint64_t syns_shed = 0;
};

// Decides about a SYN that reached no connection and no listener: a
// gateway (netstack/backend) opens a host connection for it first and
// answers the guest only when it knows the outcome.
// What a SynHandler does with a SYN.
enum class SynVerdict : uint8_t {
  // Hold it. The layer sends nothing and keeps the SYN's options (no
  // payload, no chunk) until AcceptHeld or RefuseHeld; a retransmitted
  // SYN of the tuple is absorbed meanwhile, so the handler is asked once
  // per tuple.
  kHold,
  // The usual RST (RFC 9293 3.10.7.1).
  kReset,
  // Nothing at all, and nothing kept (drop.tcp_syn_shed): the sender
  // retransmits after its RTO and is asked about again. For load the
  // handler sheds (a rate of new host connections).
  kDrop,
};

class SynHandler {
 public:
  virtual ~SynHandler() = default;
  virtual SynVerdict OnUnclaimedSyn(const transport::FourTuple& tuple,
                                    Instant now) = 0;
};

// How RefuseHeld answers the guest.
enum class HeldSynRefusal : uint8_t {
  kReset,            // RST, as a closed port (ECONNREFUSED)
  kNetUnreachable,   // ICMP/ICMPv6 destination unreachable (ENETUNREACH)
  kHostUnreachable,  // ... (EHOSTUNREACH)
  kAdminProhibited,  // ... communication administratively prohibited
  kSilent,           // nothing: the guest times out, as behind a black hole
};

class TcpLayer : public stack::TransportHandler {
 public:
  TcpLayer(stack::Stack& stack, buffer::ChunkPool& chunks,
           buffer::PacketPool& packets, transport::Notifier& notifier,
           const TcpLayerOptions& options);
  TcpLayer(const TcpLayer&) = delete;
  TcpLayer& operator=(const TcpLayer&) = delete;
  ~TcpLayer() override;

  std::unique_ptr<TcpSocket> Open(transport::Family family);

  void Poll(Instant now);
  Instant NextDeadline() const;

  std::optional<stack::DropReason> Deliver(const stack::Ipv4Datagram& d,
                                           Instant now) override;
  std::optional<stack::DropReason> Deliver(const stack::Ipv6Datagram& d,
                                           Instant now) override;
  // An ICMP error about a segment we sent, to its connection (RFC 1122
  // 4.2.3.9, RFC 5927 checks).
  void OnIcmpError(const stack::IcmpError& e, Instant now) override;

  const TcpCounters& counters() const { return counters_; }
  std::string FormatCounters() const;
  // Connections the layer holds (any state but LISTEN), incl. TIME_WAIT.
  size_t connection_count() const {
    return connections_.size() + time_wait_.size();
  }
  // TIME_WAIT entries (compact records, time_wait.h).
  size_t time_wait_count() const { return time_wait_.size(); }
  // Half-open (SYN-RECEIVED) connections of all listeners.
  size_t half_open_count() const { return half_open_count_; }
  // Connections that still owe their peer something: a handshake, data
  // queued or not yet acknowledged, or a FIN not yet acknowledged. An
  // embedder about to exit keeps its loop running until this is zero (or
  // a deadline), else what its sockets wrote dies with the process.
  size_t ConnectionsWithPendingOutput() const;
  const TcpLayerOptions& options() const { return options_; }

  // Held SYNs. `handler` is not owned; nullptr (the default) sends RST
  // for every unclaimed SYN. At most TcpLayerOptions::max_half_open SYNs
  // are held; past it a SYN is dropped (held_syn_limit_drops).
  void SetSynHandler(SynHandler* handler) { syn_handler_ = handler; }
  // Answers the held SYN of `tuple` with a SYN-ACK (options negotiated
  // from the SYN as a listener would) and returns its socket, attached to
  // a SYN-RECEIVED connection; kWritable reports ESTABLISHED. NotFound if
  // nothing is held for `tuple`; ConnectionLimit-style errors as Connect.
  absl::StatusOr<std::unique_ptr<TcpSocket>> AcceptHeld(
      const transport::FourTuple& tuple, Instant now);
  // Forgets the held SYN of `tuple` and answers as `how` says. False if
  // nothing was held.
  bool RefuseHeld(const transport::FourTuple& tuple, HeldSynRefusal how,
                  Instant now);
  size_t held_syn_count() const { return held_syns_.size(); }

 private:
  friend class TcpSocket;
  friend class Connection;
  friend class Listener;

  // Parses the TCP header of a datagram the stack delivered (both
  // families) and hands the segment to Receive.
  std::optional<stack::DropReason> DeliverSegment(
      const buffer::PayloadView& l4, uint16_t pseudo_sum, bool verified,
      bool partial, const transport::IpAddress& src,
      const transport::IpAddress& dst, Instant now);
  std::optional<stack::DropReason> Receive(Segment& seg, Instant now);
  // `iss`: the ISS for a SYN that reopens a TIME_WAIT tuple.
  std::optional<stack::DropReason> ReceiveForListener(
      Listener& l, Segment& seg, Instant now,
      std::optional<SeqNum> iss = std::nullopt);
  // A SYN with no listener, offered to syn_handler_. `iss`: as for
  // ReceiveForListener, kept with the held SYN for AcceptHeld.
  std::optional<stack::DropReason> ReceiveUnclaimedSyn(
      Segment& seg, Instant now, std::optional<SeqNum> iss = std::nullopt);
  std::optional<stack::DropReason> ReceiveTimeWait(TimeWaitEntry& tw,
                                                   Segment& seg, Instant now);
  // The listener for `local`, or the wildcard one of its port.
  Listener* FindListener(const transport::SocketAddress& local) const;
  // A SYN cookie was sent recently enough that an ACK may carry a valid
  // one (SynCookies: a cookie lasts kMaxAge periods after its own).
  bool CookiesInUse(Instant now) const;
  // A connection reached TIME_WAIT: the compact record takes its tuple
  // (the Connection is closed and freed). False if the table is full.
  bool EnterTimeWait(Connection& c, const TimeWaitEntry& e, Instant now);
  // Room for one more connection (TcpLayerOptions::max_connections).
  bool ConnectionRoom();
  // RFC 9293 3.10.7.1: the reset for a segment that reached no one.
  void SendResetFor(const Segment& seg, Instant now);
  // Builds and sends one segment (headers prepended; payload views
  // shared). Returns false if it could not be sent (counted).
  bool Transmit(const transport::FourTuple& tuple, const SegmentOut& out,
                Instant now);

  absl::Status BindSocket(TcpSocket& s, const transport::SocketAddress& a);
  absl::StatusOr<uint16_t> AllocateEphemeral(const transport::IpAddress& ip,
                                             const transport::IpAddress& rip,
                                             uint16_t rport);
  bool PortInUse(const transport::SocketAddress& a) const;
  bool IsLocalAddress(const transport::IpAddress& a) const;
  std::optional<transport::IpAddress> SourceFor(
      const transport::IpAddress& dst, uint32_t* mtu, uint32_t* gso) const;

  Connection* NewConnection(const transport::FourTuple& t,
                            const ConnectionOptions& o);
  void Register(Connection* c);
  void Unregister(Connection* c);
  // Frees closed connections nobody references (end of Poll/Deliver).
  void ReapClosed();
  void MarkOutput(Connection* c);

  stack::Stack& stack_;
  buffer::ChunkPool& chunks_;
  // Where every connection's written bytes are copied (send_queue.h):
  // shared, so thousands of connections with a short reply in flight
  // share chunks rather than pinning one each.
  buffer::ChunkArena send_arena_{chunks_};
  // Where receive queues put compact copies (receive_queue.h), shared for
  // the same reason.
  buffer::ChunkArena compact_arena_{chunks_};
  buffer::PacketPool& packets_;
  transport::Notifier& notifier_;
  TcpLayerOptions options_;
  eventloop::TimerWheel timers_;
  IsnGenerator isn_;
  SynCookies cookies_;
  absl::flat_hash_map<transport::FourTuple, Connection*> connections_;
  TimeWaitTable time_wait_;
  size_t half_open_count_ = 0;  // kept by Listener
  Instant last_cookie_sent_ = absl::InfinitePast();
  // TcpLayerOptions::busy_syn_rate, and the stack's RxBatchLimitHits() at
  // the last Poll.
  TokenBucket busy_syns_{static_cast<double>(options_.busy_syn_rate),
                         static_cast<double>(options_.busy_syn_burst)};
  uint64_t limit_hits_at_poll_ = 0;
  absl::flat_hash_map<transport::SocketAddress, Listener*> listeners_;
  // Ports held by bound sockets (not yet connected or listening), by
  // (address, port); counts per port for quick exhaustion checks.
  absl::flat_hash_map<transport::SocketAddress, int> bound_;
  SynHandler* syn_handler_ = nullptr;
  // The SYNs held for syn_handler_: header and options only, and the ISS
  // when the SYN reopened a TIME_WAIT tuple.
  struct HeldSyn {
    wire::TcpRepr syn;
    std::optional<SeqNum> iss;
  };
  absl::flat_hash_map<transport::FourTuple, HeldSyn> held_syns_;
  std::vector<Connection*> pending_output_;
  std::vector<Connection*> output_batch_;
  std::vector<Connection*> closed_;
  uint32_t next_ephemeral_ = 0;
  Instant now_ = absl::InfinitePast();
  TcpCounters counters_;
};

}  // namespace netstack::tcp

#endif  // NETSTACK_TCP_TCP_LAYER_H_
