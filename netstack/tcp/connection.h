// One TCP connection (the TCB of RFC 9293 section 3.3.1) and its state
// machine. Input (segments from TcpLayer) is in connection.cc, output and
// timers in connection_output.cc, the application side in
// connection_api.cc.
//
// The connection never reads a clock: every entry point takes `now`, and
// its timers live in the layer's TimerWheel.
#ifndef NETSTACK_TCP_CONNECTION_H_
#define NETSTACK_TCP_CONNECTION_H_

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>

#include "absl/status/status.h"
#include "boost/intrusive/list.hpp"
#include "netstack/base/time.h"
#include "netstack/eventloop/timer_wheel.h"
#include "netstack/stack/counters.h"
#include "netstack/stack/stack.h"
#include "netstack/tcp/congestion_control.h"
#include "netstack/tcp/receive_queue.h"
#include "netstack/tcp/rtt_estimator.h"
#include "netstack/tcp/scoreboard.h"
#include "netstack/tcp/segment.h"
#include "netstack/tcp/send_queue.h"
#include "netstack/tcp/seqnum.h"
#include "netstack/tcp/syn_cookies.h"
#include "netstack/tcp/tcp_info.h"
#include "netstack/tcp/tcp_options.h"
#include "netstack/transport/address.h"
#include "netstack/transport/notifier.h"

namespace netstack::tcp {

class TcpLayer;
class Listener;

class Connection {
 public:
  Connection(TcpLayer& layer, const transport::FourTuple& tuple,
             const ConnectionOptions& options);
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;
  ~Connection();

  // Opening.
  void StartActive(Instant now);
  void StartPassive(const Segment& syn, Listener* listener, SeqNum iss,
                    Instant now);
  // The final ACK of a SYN-cookie handshake.
  void StartFromCookie(const Segment& ack, Listener* listener, SeqNum iss,
                       uint16_t mss, const CookieOptions& cookie_opts,
                       Instant now);

  // A segment addressed to this connection (checksum verified, header
  // parsed). nullopt: accepted; else the drop reason.
  std::optional<stack::DropReason> OnSegment(Segment& seg, Instant now);
  // An ICMP error about the segment that started at `seq` (RFC 1122
  // 4.2.3.9): a smaller path MTU, a hard error while connecting (the
  // connect fails with it), or a soft error kept to report if the
  // connection times out. False if ignored: `seq` is not one we have sent
  // and not yet had acknowledged (RFC 5927 section 4.1).
  bool OnIcmpError(stack::IcmpErrorKind kind, uint32_t mtu, SeqNum seq,
                   Instant now);
  // Sends what is pending: handshake, retransmissions, new data, FIN,
  // ACKs and window updates. Called by the layer's Poll.
  void Output(Instant now);

  // Application side (TcpSocket forwards here).
  size_t Read(std::span<uint8_t> out, bool* eof);
  size_t ReadViews(std::span<buffer::PayloadView> out, size_t max_bytes,
                   size_t* views, bool* eof);
  size_t Write(std::span<const uint8_t> data);
  bool WriteView(buffer::PayloadView view);
  void ShutdownRead();
  void ShutdownWrite();
  // Socket gone: graceful close (or abort with unread data).
  void Close(Instant now);
  void Abort(Instant now);
  uint32_t Events() const;
  absl::Status TakeError();
  TcpInfo Info() const;
  size_t readable_bytes() const { return rcvq_.ready_bytes(); }
  size_t unsent_bytes() const { return sendq_.size(); }
  // Output would send at most one packet of data: nothing to resend and
  // at most an MSS not yet sent (and whatever ACK or FIN is due). The
  // layer's Poll sends such connections' packets first.
  bool OutputIsSmall() const;
  bool writable() const;
  // How many SACK blocks (D-SACK included) the next segment we send will
  // carry, so that a data segment can size its payload for the options it
  // really carries (RFC 6691). No side effect.
  size_t SackBlocksToSend() const;

  void SetNoDelay(bool on);
  void SetCork(bool on);
  void SetKeepalive(bool on, Duration idle, Duration interval,
                    uint32_t probes);
  void SetUserTimeout(Duration d) { options_.user_timeout = d; }

  TcpState state() const { return state_; }
  const transport::FourTuple& tuple() const { return tuple_; }
  transport::Notifiable& notifiable() { return notifiable_; }
  bool attached() const { return attached_; }
  void set_attached(bool a) { attached_ = a; }
  // The listener whose SYN queue or accept queue holds this connection
  // (null once Accept()ed, or for an active open).
  Listener* listener() const { return listener_; }
  // Closed and not referenced by a socket: the layer may free it.
  bool Reapable() const { return state_ == TcpState::kClosed && !attached_; }
  // The connection reached TIME_WAIT and handed its tuple to the layer's
  // TIME_WAIT table (time_wait.h); it is CLOSED itself since.
  bool entered_time_wait() const { return entered_time_wait_; }
  bool read_shutdown() const { return read_shutdown_; }

 private:
  friend class TcpLayer;
  friend class Listener;

  // The listener went away (Listener's destructor, which has already
  // unlinked us): a half-open connection is dropped without a RST, one
  // waiting for Accept is reset.
  void OnListenerClosed(Instant now);

  // --- input (connection.cc) ---
  std::optional<stack::DropReason> OnSynSent(Segment& seg, Instant now);
  std::optional<stack::DropReason> OnSynchronized(Segment& seg, Instant now);
  bool Acceptable(const Segment& seg) const;
  void NegotiateFromSyn(const wire::TcpRepr& syn, Instant now);
  std::optional<stack::DropReason> ProcessAck(Segment& seg, Instant now);
  // Queues the payload; a drop reason if it could not be held.
  std::optional<stack::DropReason> ProcessData(Segment& seg, Instant now);
  void QueueDsack(wire::TcpSackBlock b);
  // SACK blocks that fit in a segment besides the other options we send
  // (40 option bytes; timestamps take 12).
  size_t SackRoom() const { return ts_ok_ ? 3 : 4; }
  void ProcessFin(Instant now);
  void OnReset(Instant now);
  void AckInvalid(const Segment& seg, Instant now);
  void EnterEstablished(Instant now);
  void EnterTimeWait(Instant now);
  void SetState(TcpState s);
  void Fail(absl::Status error);
  // What a connection that gives up reports: the last soft ICMP error if
  // there was one (host unreachable says more than a timeout), else
  // ETIMEDOUT.
  absl::Status TimeoutError() const;
  void UpdateRtt(const Segment& seg, const AckResult& res, Instant now);
  // PAWS (RFC 7323 5.3) with Linux's tolerances; the segment has TSopt.
  bool PawsReject(const Segment& seg, Instant now) const;
  // The RTT of a passive open's handshake (SYN-ACK to its ACK).
  void SampleHandshakeRtt(const Segment& seg, Instant now);
  void DetectLoss(uint64_t prior_in_flight,
                  SeqNum prior_una, bool dupack, Instant now);
  void AutotuneReceive(size_t copied, Instant now);
  // RFC 8985 6.2 step 4: the reordering window.
  Duration ReorderWindow() const;
  // A D-SACK (RFC 2883) reports a spurious retransmission: widen the
  // reordering window (RFC 8985 7.2, reo_wnd_mult).
  void OnDsack(uint32_t dsack_bytes);
  // The last congestion response was spurious (Eifel / D-SACK): restore
  // cwnd and ssthresh, leave recovery, forget the loss marks.
  void UndoCongestionResponse();

  // --- output (connection_output.cc) ---
  void SendSyn(Instant now);
  void SendData(Instant now);
  // New data, at most `limit` bytes of it (SendAllowance: what cwnd, or
  // PRR in recovery, allows).
  bool SendNewData(Instant now, uint64_t limit);
  // Bytes cwnd (or, in recovery, PRR, RFC 6937) lets go out now.
  uint64_t SendAllowance(uint64_t pipe) const;
  // Starts fast recovery: ssthresh, PRR's state, the first retransmission.
  void EnterRecovery(uint64_t prior_in_flight, Instant now);
  // Resends at most max_len bytes from the start of record i (cutting the
  // record there). False if nothing could be sent.
  bool Retransmit(size_t record, uint32_t max_len, Instant now);
  // What SendSegment really sent: less than asked when the payload needs
  // more views than a packet holds, or when the segment's options leave
  // less room per packet; the FIN only if the last byte went too.
  struct Sent {
    bool ok = false;
    uint32_t len = 0;
    bool fin = false;
    uint32_t packets = 0;
    uint32_t packet_payload = 0;  // the most one packet of it could carry
  };
  [[nodiscard]] Sent SendSegment(SeqNum seq, uint32_t len, bool fin,
                                 Instant now);
  // Payload per wire packet for a segment with r's options (RFC 6691).
  uint32_t PacketPayload(const wire::TcpRepr& r) const;
  void SendAck(Instant now);
  void SendRst(Instant now);
  void SendProbe(Instant now);  // seq snd_una - 1, no data
  void FillCommon(wire::TcpRepr& r, Instant now);
  uint16_t WindowField();
  // Our MSS option: the path MTU less the IP and TCP headers.
  uint16_t MssForMtuOption() const;
  uint32_t ReceiveWindow() const;
  bool WindowUpdateDue() const;
  uint32_t MaxPayload() const;
  // The largest super-segment the pacing rate asks for (tcp_tso_autosize).
  uint64_t AutosizeBytes() const;
  uint32_t Packets(uint64_t bytes) const {
    return static_cast<uint32_t>((bytes + mss_ - 1) / mss_);
  }
  void ArmRetransmit(Instant now);
  // The RTO at `deadline`, clamped to the user timeout (RFC 5482).
  void ScheduleRto(Instant deadline);
  void CancelRetransmit();
  void ArmTlp(Instant now);
  void ArmKeepalive(Instant now);
  void OnRetransmitTimer(Instant now);
  void OnPersistTimer(Instant now);
  // The persist timer, when nothing is in flight and none is scheduled:
  // a zero window's probe, or a too-small window's override timeout.
  void ArmPersistIfIdle(Instant now);
  void OnTlpTimer(Instant now);
  void OnDelayedAckTimer(Instant now);
  void OnRackTimer(Instant now);
  void OnKeepaliveTimer(Instant now);
  void OnFinWait2Timer(Instant now);
  void MarkOutput();
  void Notify(uint32_t events);
  uint32_t TsNow(Instant now) const;
  void CancelTimers();

  TcpLayer& layer_;
  transport::FourTuple tuple_;
  ConnectionOptions options_;
  TcpState state_ = TcpState::kClosed;
  // Set while a Listener's half_open_ or accept_queue_ links listen_hook_
  // (which one: accept_queued_). The listener clears both when it goes,
  // and ~Connection unlinks itself, so neither outlives the other.
  Listener* listener_ = nullptr;
  boost::intrusive::list_member_hook<> listen_hook_;
  bool accept_queued_ = false;
  bool attached_ = false;
  bool entered_time_wait_ = false;
  transport::Notifiable notifiable_;
  absl::Status error_;
  // The last soft ICMP error (host unreachable...): what a timeout
  // reports instead of ETIMEDOUT, as Linux's sk_err_soft.
  absl::Status soft_error_;

  // Send sequence space (RFC 9293 3.3.1). Retransmissions come from the
  // scoreboard, so snd_nxt_ is also the highest sequence sent.
  SeqNum iss_;
  SeqNum snd_una_;
  SeqNum snd_nxt_;
  uint32_t snd_wnd_ = 0;
  uint32_t max_snd_wnd_ = 0;
  SeqNum snd_wl1_;
  SeqNum snd_wl2_;
  // Receive sequence space.
  SeqNum irs_;
  SeqNum rcv_adv_;  // right edge of the window we advertised
  SeqNum last_ack_sent_;

  // Negotiated.
  uint8_t snd_wscale_ = 0;
  uint8_t rcv_wscale_ = 0;
  bool ws_ok_ = false;
  bool ts_ok_ = false;
  bool sack_ok_ = false;
  uint16_t peer_mss_ = 536;
  uint32_t mss_ = 536;  // payload per wire packet (options excluded)
  uint32_t path_mtu_ = 1500;
  uint32_t gso_max_ = 0;
  uint32_t ts_recent_ = 0;
  Instant ts_recent_at_;
  uint32_t ts_offset_ = 0;

  SendQueue sendq_;
  bool fin_queued_ = false;  // the application shut down writing
  bool fin_sent_ = false;
  ReceiveQueue rcvq_;
  bool fin_received_ = false;
  bool ooo_fin_set_ = false;  // a FIN that arrived beyond a hole
  SeqNum ooo_fin_;
  // End of the last sub-MSS segment sent: Nagle holds a small segment
  // only while such a segment is unacknowledged (Minshall's variant, as
  // Linux), not while any data is.
  bool small_sent_ = false;
  SeqNum small_end_;
  bool read_shutdown_ = false;
  uint32_t rcv_buf_ = 0;

  Scoreboard sb_;
  RttEstimator rtt_;
  std::unique_ptr<CongestionControl> cc_;
  bool in_recovery_ = false;
  SeqNum recovery_point_;
  bool rto_recovery_ = false;
  uint32_t dupacks_ = 0;
  uint32_t reo_wnd_mult_ = 1;
  uint32_t reo_wnd_persist_ = 0;  // recoveries left before mult resets
  SeqNum dsack_round_;            // one mult increase per round trip
  bool dsack_round_set_ = false;
  bool tlp_outstanding_ = false;
  // PRR (RFC 6937): the flight size at the start of recovery, bytes
  // delivered and sent since, and the last ACK's delivered bytes.
  uint64_t recover_fs_ = 0;
  uint64_t prr_delivered_ = 0;
  uint64_t prr_out_ = 0;
  uint64_t last_delivered_ = 0;
  // Undo of a spurious congestion response: our TSval when the episode's
  // first retransmission went out (an ACK echoing an older one was for
  // the original, RFC 3522 / Linux tcp_packet_delayed), and the packets
  // retransmitted in it not yet reported duplicate by D-SACK (RFC 3708).
  uint32_t undo_tsval_ = 0;
  uint32_t undo_retrans_ = 0;
  Instant last_send_at_ = absl::InfinitePast();  // new data, for idle restart
  Instant first_unacked_at_ = kNever;  // user timeout reference
  uint32_t syn_retries_ = 0;

  // ACK decision, at the end of a batch (Output).
  bool ack_pending_ = false;
  bool ack_now_ = false;
  uint32_t unacked_bytes_ = 0;  // received since our last ACK
  uint32_t quick_acks_ = 0;
  bool output_marked_ = false;
  // The application read since our last ACK: only then can a window
  // update be due (Linux's __tcp_cleanup_rbuf rule; a passive open's
  // first ACK does not draw a pure window update).
  bool app_read_ = false;
  // Duplicate segments to report, one first in each ACK (RFC 2883), the
  // oldest first; a full queue drops the oldest.
  static constexpr size_t kDsackQueue = 4;
  std::array<wire::TcpSackBlock, kDsackQueue> dsacks_{};
  size_t dsack_count_ = 0;

  // Receive-buffer auto-tuning (bytes read per RTT, like Linux DRS).
  uint64_t rcv_space_copied_ = 0;
  Instant rcv_space_at_ = absl::InfinitePast();

  Instant last_invalid_ack_ = absl::InfinitePast();
  uint32_t keepalive_sent_ = 0;
  Instant last_recv_ = absl::InfinitePast();

  eventloop::Timer rtx_timer_;    // RTO; also persist and TLP (mode_)
  Instant rto_deadline_ = kNever;  // the RTO's, even while a TLP is armed
  enum class RtxMode : uint8_t { kRto, kPersist, kTlp } rtx_mode_ =
      RtxMode::kRto;
  uint32_t persist_backoff_ = 0;
  // Set while OnPersistTimer sends: less than a segment may go into a
  // small window (RFC 9293 3.8.6.2.1, the override timeout).
  bool sws_override_ = false;
  // Zero-window probes sent since the peer last said anything (Linux's
  // icsk_probes_out): max_retransmits of them abort the connection.
  uint32_t persist_unanswered_ = 0;
  Instant persist_probe_at_ = absl::InfinitePast();
  eventloop::Timer delack_timer_;
  eventloop::Timer rack_timer_;
  eventloop::Timer keepalive_timer_;  // keepalive; orphaned FIN_WAIT_2

  TcpInfo stats_;  // counters part of Info()
};

// A listening socket's queues (the socket-facing side is TcpSocket).
//
// Ownership: the layer owns every Connection; a Listener only links them,
// through Connection::listen_hook_, into its SYN queue (half-open,
// SYN-RECEIVED) or its accept queue (established, not yet Accept()ed).
// Each linked connection points back at the listener. Whoever goes first
// unlinks: ~Connection calls Forget, ~Listener clears both queues (and
// every back pointer) before it is freed, so no connection ever holds a
// dangling Listener* (issue 12 item 2).
class Listener {
 public:
  Listener(TcpLayer& layer, const transport::SocketAddress& local,
           uint32_t backlog, const ConnectionOptions& options)
      : layer_(layer), local_(local), backlog_(backlog), options_(options) {}
  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;
  // Drops the half-open connections silently (Linux drops its request
  // socks the same way: the peer's final ACK then meets no listener and
  // draws a RST) and resets the ones waiting for Accept.
  ~Listener();

  const transport::SocketAddress& local() const { return local_; }
  const ConnectionOptions& options() const { return options_; }
  bool Full() const {
    return half_open_.size() + accept_queue_.size() >= backlog_;
  }
  bool AcceptQueueFull() const { return accept_queue_.size() >= backlog_; }
  // A new SYN-RECEIVED connection joins the SYN queue.
  void AddHalfOpen(Connection* c);
  // Established (from the SYN queue, or straight from a SYN cookie): to
  // the accept queue.
  void Ready(Connection* c);
  // Died (or is being freed) before Accept: leaves whichever queue.
  void Forget(Connection* c);
  Connection* PopAccepted();
  size_t pending() const { return accept_queue_.size(); }
  size_t half_open() const { return half_open_.size(); }
  transport::Notifiable& notifiable() { return notifiable_; }

 private:
  using Queue = boost::intrusive::list<
      Connection,
      boost::intrusive::member_hook<Connection,
                                    boost::intrusive::list_member_hook<>,
                                    &Connection::listen_hook_>,
      boost::intrusive::constant_time_size<true>>;
  // Unlinks `c` from its queue and clears its back pointer.
  void Unlink(Connection* c);

  TcpLayer& layer_;
  transport::SocketAddress local_;
  uint32_t backlog_;
  ConnectionOptions options_;
  Queue half_open_;
  Queue accept_queue_;
  transport::Notifiable notifiable_;
};

}  // namespace netstack::tcp

#endif  // NETSTACK_TCP_CONNECTION_H_
