// Connection: opening, segment arrival (RFC 9293 section 3.10.7), ACK
// processing with SACK, RACK and congestion control, and the receive side.
#include "netstack/tcp/connection.h"

#include <algorithm>

#include "netstack/base/dcheck.h"
#include "netstack/tcp/tcp_layer.h"
#include "netstack/transport/errors.h"

namespace netstack::tcp {

namespace flag = wire::tcp_flag;
using stack::DropReason;

namespace {
// Largest window shift (RFC 7323 section 2.3).
constexpr uint8_t kMaxWindowShift = 14;
constexpr uint32_t kDupThresh = 3;
// PAWS tolerance in ticks of the peer's clock (Linux TCP_PAWS_WINDOW).
constexpr int32_t kPawsWindow = 1;
}  // namespace

Connection::Connection(TcpLayer& layer, const transport::FourTuple& tuple,
                       const ConnectionOptions& options)
    : layer_(layer),
      tuple_(tuple),
      options_(options),
      rtt_(options.rtt),
      cc_(MakeCongestionControl(options.congestion, options.initial_cwnd)),
      rtx_timer_([this](Instant now) {
        switch (rtx_mode_) {
          case RtxMode::kRto:
            return OnRetransmitTimer(now);
          case RtxMode::kPersist:
            return OnPersistTimer(now);
          case RtxMode::kTlp:
            return OnTlpTimer(now);
        }
      }),
      delack_timer_([this](Instant now) { OnDelayedAckTimer(now); }),
      rack_timer_([this](Instant now) { OnRackTimer(now); }),
      keepalive_timer_([this](Instant now) {
        // The slot is the orphan's FIN_WAIT_2 timeout once the
        // application let go; an attached half-closed socket keeps its
        // keepalive.
        if (state_ == TcpState::kFinWait2 && !attached_) {
          OnFinWait2Timer(now);
        } else {
          OnKeepaliveTimer(now);
        }
      }) {
  rcv_buf_ = options_.receive_buffer;
  quick_acks_ = options_.quick_acks;
  if (options_.window_scaling) {
    const uint32_t max_buf =
        std::max(options_.max_receive_buffer, options_.receive_buffer);
    while (rcv_wscale_ < kMaxWindowShift && (max_buf >> rcv_wscale_) > 65535) {
      ++rcv_wscale_;
    }
  }
  uint32_t gso = 0;
  if (layer_.SourceFor(tuple_.remote.ip, &path_mtu_, &gso)) gso_max_ = gso;
}

Connection::~Connection() {
  CancelTimers();
  if (listener_ != nullptr) listener_->Forget(this);
}

void Connection::CancelTimers() {
  auto& w = layer_.timers_;
  w.Cancel(rtx_timer_);
  w.Cancel(delack_timer_);
  w.Cancel(rack_timer_);
  w.Cancel(keepalive_timer_);
}

void Connection::SetState(TcpState s) {
  state_ = s;
  if (s == TcpState::kClosed) {
    CancelTimers();
    layer_.closed_.push_back(this);
  }
}

uint32_t Connection::TsNow(Instant now) const {
  // A 1 ms clock (RFC 7323 section 5.4 allows 1 ms to 1 s per tick).
  return static_cast<uint32_t>(absl::ToUnixMillis(now)) + ts_offset_;
}

void Connection::StartActive(Instant now) {
  iss_ = layer_.isn_.Next(tuple_, now);
  ts_offset_ = iss_.value() * 2654435761u;  // per-connection, not the ISN
  snd_una_ = iss_;
  snd_nxt_ = iss_;
  sendq_.Reset(iss_ + 1);
  SetState(TcpState::kSynSent);
  ++layer_.counters_.active_opens;
  MarkOutput();
}

void Connection::NegotiateFromSyn(const wire::TcpRepr& syn, Instant now) {
  irs_ = SeqNum(syn.seq);
  rcvq_.Reset(irs_ + 1);
  peer_mss_ = syn.mss.value_or(536);  // RFC 9293 3.7.1 default for IPv4
  if (tuple_.remote.ip.is_v6() && !syn.mss) peer_mss_ = 1220;
  ws_ok_ = options_.window_scaling && syn.window_scale.has_value();
  if (ws_ok_) {
    snd_wscale_ = std::min<uint8_t>(*syn.window_scale, kMaxWindowShift);
  } else {
    snd_wscale_ = 0;
    rcv_wscale_ = 0;
  }
  sack_ok_ = options_.sack && syn.sack_permitted;
  ts_ok_ = options_.timestamps && syn.timestamps.has_value();
  if (ts_ok_) {
    ts_recent_ = syn.timestamps->tsval;
    ts_recent_at_ = now;
  }
  // RFC 6691: the MSS option counts no TCP options; our payload per
  // packet leaves room for the ones we send on every segment.
  const uint32_t own = MssForMtuOption();
  mss_ = std::min<uint32_t>(peer_mss_, own);
  if (ts_ok_) mss_ -= 12;
  mss_ = std::max<uint32_t>(mss_, 64);
  snd_wnd_ = syn.window;  // never scaled in a SYN (RFC 7323 2.2)
  max_snd_wnd_ = snd_wnd_;
}

void Connection::StartPassive(const Segment& syn, Listener* listener,
                              SeqNum iss, Instant now) {
  if (listener != nullptr) listener->AddHalfOpen(this);  // the SYN queue
  iss_ = iss;
  ts_offset_ = iss_.value() * 2654435761u;
  snd_una_ = iss_;
  snd_nxt_ = iss_;
  sendq_.Reset(iss_ + 1);
  NegotiateFromSyn(syn.tcp, now);
  snd_wl1_ = syn.seq();
  snd_wl2_ = iss_;
  SetState(TcpState::kSynReceived);
  ++layer_.counters_.passive_opens;
  last_recv_ = now;
  MarkOutput();
}

void Connection::StartFromCookie(const Segment& ack, Listener* listener,
                                 SeqNum iss, uint16_t mss,
                                 const CookieOptions& cookie_opts,
                                 Instant now) {
  // Rebuild the SYN the cookie stands for.
  wire::TcpRepr syn;
  syn.seq = ack.tcp.seq - 1;
  syn.window = ack.tcp.window;
  syn.mss = mss;
  if (ack.tcp.timestamps) {
    syn.timestamps = wire::TcpTimestamps{ack.tcp.timestamps->tsval, 0};
    syn.window_scale = cookie_opts.wscale;
    syn.sack_permitted = cookie_opts.sack;
  }
  // Half-open for a moment: EnterEstablished moves it to the accept queue.
  if (listener != nullptr) listener->AddHalfOpen(this);
  iss_ = iss;
  ts_offset_ = 0;  // our TSval carried the options; keep its clock
  snd_una_ = iss_ + 1;
  snd_nxt_ = iss_ + 1;
  sendq_.Reset(iss_ + 1);
  NegotiateFromSyn(syn, now);
  // The ACK's window is scaled: it is not a SYN.
  snd_wnd_ = static_cast<uint32_t>(ack.tcp.window) << snd_wscale_;
  max_snd_wnd_ = snd_wnd_;
  snd_wl1_ = ack.seq();
  snd_wl2_ = ack.ack();
  rcv_adv_ = rcvq_.rcv_nxt() + std::min<uint32_t>(rcv_buf_, 65535u << rcv_wscale_);
  ++layer_.counters_.passive_opens;
  ++layer_.counters_.syn_cookies_accepted;
  last_recv_ = now;
  EnterEstablished(now);
}

void Connection::EnterEstablished(Instant now) {
  SetState(TcpState::kEstablished);
  ++layer_.counters_.established;
  if (listener_ != nullptr) {
    listener_->Ready(this);
  } else {
    Notify(transport::event::kWritable);
  }
  ArmKeepalive(now);
}

void Connection::Fail(absl::Status error) {
  error_ = std::move(error);
  if (listener_ != nullptr) listener_->Forget(this);
  sendq_.Reset(snd_nxt_);
  sb_.Clear();
  SetState(TcpState::kClosed);
  Notify(transport::event::kError | transport::event::kHangup |
         transport::event::kReadable | transport::event::kWritable);
}

absl::Status Connection::TimeoutError() const {
  return soft_error_.ok() ? transport::TimedOut() : soft_error_;
}

bool Connection::OnIcmpError(stack::IcmpErrorKind kind, uint32_t mtu,
                             SeqNum seq, Instant now) {
  // RFC 5927 4.1: the quoted sequence number must be one in flight, or a
  // blind attacker could reset or slow connections with forged errors.
  if (state_ == TcpState::kSynSent) {
    if (seq != iss_) return false;
  } else if (seq < snd_una_ || seq >= snd_nxt_) {
    return false;
  }
  using K = stack::IcmpErrorKind;
  if (kind == K::kFragmentationNeeded) {
    // RFC 1191 / RFC 8201: a smaller path MTU. Never below what IPv4
    // (576, like Linux's min_pmtu 552 rounded to the RFC 1122 minimum)
    // or IPv6 (1280) must carry; a missing MTU (a pre-RFC 1191 router)
    // steps down to the minimum.
    const uint32_t floor = tuple_.remote.ip.is_v6() ? 1280 : 576;
    const uint32_t next = std::max(mtu == 0 ? floor : mtu, floor);
    if (next >= path_mtu_) return true;  // nothing smaller to learn
    path_mtu_ = next;
    const uint32_t base = std::min<uint32_t>(peer_mss_, MssForMtuOption());
    mss_ = std::max<uint32_t>(base - (ts_ok_ ? 12 : 0), 64);
    ++layer_.counters_.pmtu_decreases;
    // What is in flight went out in packets too big for the path: resend
    // it at the new size, without a congestion response (Linux's
    // tcp_simple_retransmit; RFC 8201 5.4 does not count it as loss).
    if (!sb_.empty()) {
      sb_.MarkAllLost();
      MarkOutput();
    }
    return true;
  }
  absl::Status err;
  bool hard = false;
  switch (kind) {
    case K::kPortUnreachable:
      err = transport::ConnectionRefused();
      hard = true;
      break;
    case K::kProtocolUnreachable:
      err = transport::ProtocolUnavailable();
      hard = true;
      break;
    case K::kNetUnreachable:
      err = transport::NetworkUnreachable(tuple_.remote.ip.ToString());
      break;
    case K::kAdminProhibited:
      err = transport::HostUnreachable("administratively prohibited");
      hard = true;
      break;
    default:
      err = transport::HostUnreachable(tuple_.remote.ip.ToString());
      break;
  }
  // RFC 1122 4.2.3.9 makes only port and protocol unreachable hard
  // errors; while connecting, Linux (tcp_v4_err) gives up on any of
  // them, so a connect to an unreachable host fails at once instead of
  // after its SYN retransmissions time out.
  if (state_ == TcpState::kSynSent) {
    Fail(std::move(err));
    return true;
  }
  if (hard && state_ == TcpState::kSynReceived) {
    Fail(std::move(err));
    return true;
  }
  // Synchronized: a soft error (routes flap; TCP's own timers decide),
  // reported only if the connection then times out.
  soft_error_ = std::move(err);
  (void)now;
  return true;
}

void Connection::OnReset(Instant now) {
  ++layer_.counters_.resets_received;
  switch (state_) {
    case TcpState::kSynSent:
      return Fail(transport::ConnectionRefused());
    case TcpState::kSynReceived:
      if (listener_ != nullptr) {
        // Passive open: back to LISTEN means forgetting it (RFC 9293).
        listener_->Forget(this);
        error_ = transport::ConnectionReset();
        SetState(TcpState::kClosed);
        return;
      }
      return Fail(transport::ConnectionRefused());
    case TcpState::kClosing:
    case TcpState::kLastAck:
      SetState(TcpState::kClosed);
      Notify(transport::event::kHangup);
      return;
    default:
      return Fail(transport::ConnectionReset());
  }
}

std::optional<DropReason> Connection::OnSegment(Segment& seg, Instant now) {
  ++stats_.segments_received;
  if (state_ == TcpState::kSynSent) return OnSynSent(seg, now);
  if (state_ == TcpState::kClosed) return DropReason::kTcpClosedState;
  return OnSynchronized(seg, now);
}

std::optional<DropReason> Connection::OnSynSent(Segment& seg, Instant now) {
  // RFC 9293 3.10.7.3.
  if (seg.has(flag::kAck)) {
    if (seg.ack() <= iss_ || seg.ack() > snd_nxt_) {
      if (!seg.has(flag::kRst)) layer_.SendResetFor(seg, now);
      return DropReason::kTcpAckUnsent;
    }
  }
  if (seg.has(flag::kRst)) {
    if (!seg.has(flag::kAck)) return DropReason::kTcpRstInvalid;
    OnReset(now);
    return std::nullopt;
  }
  if (!seg.has(flag::kSyn)) return DropReason::kTcpBadFlags;
  NegotiateFromSyn(seg.tcp, now);
  rcv_adv_ = rcvq_.rcv_nxt() + std::min<uint32_t>(rcv_buf_, 65535);
  last_recv_ = now;
  if (seg.has(flag::kAck)) {
    // SYN-ACK: the options we did not offer must not come back.
    snd_una_ = seg.ack();
    if (syn_retries_ == 0) rtt_.Sample(now - first_unacked_at_, now);
    first_unacked_at_ = kNever;
    CancelRetransmit();
    rtt_.ResetBackoff();
    snd_wnd_ = static_cast<uint32_t>(seg.tcp.window) << snd_wscale_;
    max_snd_wnd_ = snd_wnd_;
    snd_wl1_ = seg.seq();
    snd_wl2_ = seg.ack();
    ack_pending_ = true;
    ack_now_ = true;
    EnterEstablished(now);
    if (seg.payload.size() > 0) (void)ProcessData(seg, now);
    if (seg.has(flag::kFin)) ProcessFin(now);
    MarkOutput();
    return std::nullopt;
  }
  // Simultaneous open: SYN_RECEIVED, answer with SYN-ACK (same ISS).
  snd_wl1_ = seg.seq();
  SetState(TcpState::kSynReceived);
  MarkOutput();
  return std::nullopt;
}

bool Connection::Acceptable(const Segment& seg) const {
  // RFC 9293 3.10.7.4 first check, with the window we advertised.
  const SeqNum rcv_nxt = rcvq_.rcv_nxt();
  const uint32_t wnd = Span(rcv_nxt, rcv_adv_);
  const uint32_t len = seg.len();
  const SeqNum seq = seg.seq();
  if (len == 0) {
    if (wnd == 0) return seq == rcv_nxt;
    return InRange(seq, rcv_nxt, rcv_nxt + wnd);
  }
  if (wnd == 0) return false;
  return InRange(seq, rcv_nxt, rcv_nxt + wnd) ||
         InRange(seq + (len - 1), rcv_nxt, rcv_nxt + wnd);
}

void Connection::AckInvalid(const Segment& seg, Instant now) {
  // An ACK in answer to an unacceptable segment. Two stacks that disagree
  // about the sequence space (after a forged FIN, say) would otherwise
  // trade such ACKs forever: like Linux (tcp_oow_rate_limited), answer
  // data-less segments at most once per 500 ms per connection.
  if ((seg.payload.size() == 0 || seg.has(flag::kSyn)) &&
      now - last_invalid_ack_ < absl::Milliseconds(500)) {
    ++layer_.counters_.invalid_acks_rate_limited;
    return;
  }
  last_invalid_ack_ = now;
  ack_pending_ = ack_now_ = true;
  MarkOutput();
}

std::optional<DropReason> Connection::OnSynchronized(Segment& seg,
                                                     Instant now) {
  const SeqNum rcv_nxt = rcvq_.rcv_nxt();
  // PAWS (RFC 7323 section 5.3), not for RST.
  if (ts_ok_ && seg.tcp.timestamps && !seg.has(flag::kRst) &&
      PawsReject(seg, now)) {
    AckInvalid(seg, now);
    return DropReason::kTcpPawsRejected;
  }
  // Simultaneous open (RFC 9293 3.5, figure 8): in SYN-RECEIVED the
  // peer's SYN-ACK repeats its SYN (SEG.SEQ = IRS, just below RCV.NXT, so
  // the first check would refuse it) and acknowledges ours. It completes
  // the handshake, as in Linux's tcp_validate_incoming; refusing it left
  // both ends trading SYN-ACKs (conformance scenario simultaneous_open).
  if (state_ == TcpState::kSynReceived && seg.has(flag::kSyn) &&
      seg.has(flag::kAck) && !seg.has(flag::kRst) && !seg.has(flag::kFin) &&
      seg.payload.size() == 0 && seg.seq() == irs_ && seg.ack() == snd_nxt_) {
    last_recv_ = now;
    SampleHandshakeRtt(seg, now);
    // A SYN's window is never scaled (RFC 7323 2.2).
    snd_wnd_ = seg.tcp.window;
    max_snd_wnd_ = std::max(max_snd_wnd_, snd_wnd_);
    snd_wl1_ = seg.seq();
    snd_wl2_ = seg.ack();
    EnterEstablished(now);
    return ProcessAck(seg, now);
  }
  // TIME_WAIT is not a Connection state any more: the layer's TIME_WAIT
  // table (time_wait.h) takes those segments.
  if (!Acceptable(seg)) {
    // Entirely below RCV.NXT: old data again (our ACK was lost, or the
    // sender retransmitted too early). Answered, and counted apart from
    // real out-of-window segments: in a clean run these are the peer's
    // spurious retransmissions, not trouble.
    const bool duplicate =
        seg.len() > 0 && seg.seq() + seg.len() <= rcv_nxt;
    if (!seg.has(flag::kRst)) {
      // Report it in a D-SACK (RFC 2883) so the sender can tell (RFC
      // 8985 widens its reordering window on it).
      if (sack_ok_ && seg.payload.size() > 0 && seg.seq() < rcv_nxt) {
        QueueDsack(wire::TcpSackBlock{
            seg.seq().value(),
            Min(seg.seq() + seg.payload.size(), rcv_nxt).value()});
      }
      AckInvalid(seg, now);
    }
    return duplicate && !seg.has(flag::kRst) ? DropReason::kTcpDuplicateData
                                             : DropReason::kTcpOutOfWindow;
  }
  if (seg.has(flag::kRst)) {
    // RFC 5961 section 3.2: only an exact match resets.
    if (seg.seq() == rcv_nxt) {
      OnReset(now);
      return std::nullopt;
    }
    ++layer_.counters_.challenge_acks;
    AckInvalid(seg, now);
    return DropReason::kTcpChallengeAck;
  }
  if (seg.has(flag::kSyn)) {
    if (state_ == TcpState::kSynReceived && seg.seq() == irs_ &&
        !seg.has(flag::kAck)) {
      // Our SYN-ACK was lost: send it again.
      MarkOutput();
      return std::nullopt;
    }
    // RFC 5961 section 4.2: challenge ACK, whatever the sequence number.
    ++layer_.counters_.challenge_acks;
    AckInvalid(seg, now);
    return DropReason::kTcpChallengeAck;
  }
  if (!seg.has(flag::kAck)) return DropReason::kTcpBadFlags;
  last_recv_ = now;
  keepalive_sent_ = 0;

  if (state_ == TcpState::kSynReceived) {
    if (seg.ack() <= snd_una_ || seg.ack() > snd_nxt_) {
      layer_.SendResetFor(seg, now);
      return DropReason::kTcpAckUnsent;
    }
    SampleHandshakeRtt(seg, now);
    snd_wnd_ = static_cast<uint32_t>(seg.tcp.window) << snd_wscale_;
    max_snd_wnd_ = std::max(max_snd_wnd_, snd_wnd_);
    snd_wl1_ = seg.seq();
    snd_wl2_ = seg.ack();
    EnterEstablished(now);
  }
  if (auto drop = ProcessAck(seg, now)) return drop;
  if (state_ == TcpState::kClosed) return std::nullopt;  // LAST_ACK done

  std::optional<DropReason> data_drop;
  if (seg.payload.size() > 0) {
    switch (state_) {
      case TcpState::kEstablished:
      case TcpState::kFinWait1:
      case TcpState::kFinWait2:
        data_drop = ProcessData(seg, now);
        break;
      default:
        break;  // after the peer's FIN: ignore (RFC 9293)
    }
  }
  if (seg.has(flag::kFin) &&
      seg.seq() + seg.payload.size() == rcvq_.rcv_nxt() && !fin_received_) {
    ProcessFin(now);
  } else if (seg.has(flag::kFin) && !fin_received_) {
    // A FIN beyond a hole, on the last data: keep it (as the data is
    // kept) and take it once the hole fills, so the peer need not send it
    // again. A bare FIN beyond a hole is not kept: it costs the peer only
    // a retransmission, and keeping it would let a blind in-window
    // forgery end the stream.
    const SeqNum fin_seq = seg.seq() + seg.payload.size();
    if (seg.payload.size() > 0 && fin_seq > rcvq_.rcv_nxt() &&
        fin_seq <= rcv_adv_ &&
        rcvq_.ooo_end() <= fin_seq) {
      ooo_fin_ = fin_seq;
      ooo_fin_set_ = true;
    }
    ack_pending_ = ack_now_ = true;  // dup ACK with SACK
  }
  if (ooo_fin_set_ && !fin_received_ && rcvq_.rcv_nxt() == ooo_fin_) {
    ooo_fin_set_ = false;
    ProcessFin(now);
  }
  MarkOutput();
  return data_drop;
}

std::optional<DropReason> Connection::ProcessAck(Segment& seg, Instant now) {
  const SeqNum ack = seg.ack();
  if (ack > snd_nxt_) {
    // RFC 9293 / RFC 5961 5.2: ACK of unsent data: ACK and drop.
    AckInvalid(seg, now);
    return DropReason::kTcpAckUnsent;
  }
  if (ack < snd_una_ - std::max<uint32_t>(max_snd_wnd_, 1)) {
    AckInvalid(seg, now);
    return DropReason::kTcpOldAck;
  }
  // Timestamps: remember the peer's clock (RFC 7323 section 4.3), but
  // only from a segment whose ACK is acceptable (Linux's
  // FLAG_UPDATE_TS_RECENT): a forged in-window segment with a far-future
  // TSval would otherwise make PAWS reject every genuine one.
  if (ts_ok_ && seg.tcp.timestamps && seg.seq() <= last_ack_sent_ &&
      static_cast<int32_t>(seg.tcp.timestamps->tsval - ts_recent_) >= 0) {
    ts_recent_ = seg.tcp.timestamps->tsval;
    ts_recent_at_ = now;
  }
  const uint32_t new_wnd = static_cast<uint32_t>(seg.tcp.window)
                           << snd_wscale_;
  const bool window_changed = new_wnd != snd_wnd_;
  if (snd_wl1_ < seg.seq() || (snd_wl1_ == seg.seq() && snd_wl2_ <= ack)) {
    const bool was_zero = snd_wnd_ == 0;
    snd_wnd_ = new_wnd;
    max_snd_wnd_ = std::max(max_snd_wnd_, snd_wnd_);
    snd_wl1_ = seg.seq();
    snd_wl2_ = ack;
    if (was_zero && snd_wnd_ > 0 && rtx_mode_ == RtxMode::kPersist) {
      CancelRetransmit();
      persist_backoff_ = 0;
    }
  }

  // SACK blocks inside (ack, snd_nxt]; D-SACKs (below ack) are ignored.
  std::array<wire::TcpSackBlock, wire::TcpRepr::kMaxSackBlocks> blocks;
  size_t nblocks = 0;
  if (sack_ok_ && seg.tcp.sack_count > 0) {
    // RFC 2883: a first block below the cumulative ACK, or inside the
    // second block, reports a duplicate (D-SACK).
    const wire::TcpSackBlock& b0 = seg.tcp.sack_blocks[0];
    const bool dsack =
        SeqNum(b0.right) <= ack ||
        (seg.tcp.sack_count > 1 &&
         SeqNum(seg.tcp.sack_blocks[1].left) <= SeqNum(b0.left) &&
         SeqNum(b0.right) <= SeqNum(seg.tcp.sack_blocks[1].right));
    if (dsack && SeqNum(b0.left) < SeqNum(b0.right)) {
      OnDsack(Span(SeqNum(b0.left), SeqNum(b0.right)));
    }
  }
  if (sack_ok_) {
    for (uint8_t i = 0; i < seg.tcp.sack_count; ++i) {
      const wire::TcpSackBlock& b = seg.tcp.sack_blocks[i];
      const SeqNum l(b.left);
      const SeqNum r(b.right);
      if (r <= l || l < ack || r > snd_nxt_ || l < snd_una_) continue;
      blocks[nblocks++] = b;
    }
  }

  const SeqNum prior_una = snd_una_;
  const uint64_t prior_in_flight = sb_.InFlight(snd_una_, snd_nxt_);
  const AckResult res = sb_.OnAck(
      ack, std::span<const wire::TcpSackBlock>(blocks.data(), nblocks), now,
      rtt_.min_rtt() == absl::InfiniteDuration() ? absl::ZeroDuration()
                                                 : rtt_.min_rtt());
  const bool dupack = ack == snd_una_ && seg.payload.size() == 0 &&
                      !seg.has(flag::kFin) && !window_changed &&
                      snd_nxt_ != snd_una_;
  if (dupack) {
    ++dupacks_;
    ++stats_.dup_acks_received;
  }
  last_delivered_ = res.delivered;
  if (in_recovery_) prr_delivered_ += res.delivered;
  if (ack > snd_una_ && (in_recovery_ || rto_recovery_) && ts_ok_ &&
      seg.tcp.timestamps && seg.tcp.timestamps->tsecr != 0 &&
      static_cast<int32_t>(seg.tcp.timestamps->tsecr - undo_tsval_) < 0) {
    // The ACK that moves snd_una echoes a TSval older than our first
    // retransmission: the original arrived, the loss was not real (Eifel,
    // RFC 3522; Linux tcp_packet_delayed).
    UndoCongestionResponse();
  }
  if (ack > snd_una_) {
    const uint32_t acked = Span(snd_una_, ack);
    stats_.bytes_acked += acked;
    sendq_.ReleaseTo(ack);
    snd_una_ = ack;
    dupacks_ = 0;
    tlp_outstanding_ = false;
    UpdateRtt(seg, res, now);
    rtt_.ResetBackoff();
    first_unacked_at_ = snd_una_ == snd_nxt_ ? kNever : now;
    if (rtx_mode_ != RtxMode::kPersist || snd_una_ == snd_nxt_) {
      CancelRetransmit();
      // RFC 6298 5.3: restart the timer for what is still outstanding.
      if (snd_una_ != snd_nxt_) ArmRetransmit(now);
    }
    if (writable()) Notify(transport::event::kWritable);
    if (rto_recovery_ && ack >= recovery_point_) rto_recovery_ = false;
  } else if (res.newly_sacked > 0) {
    UpdateRtt(seg, res, now);
  }
  stats_.sacked_bytes = sb_.sacked_bytes();

  DetectLoss(prior_in_flight, prior_una, dupack, now);

  if (res.delivered > 0) {
    AckEvent e;
    e.now = now;
    e.delivered_packets = Packets(res.delivered);
    e.prior_in_flight = Packets(prior_in_flight);
    if (rtt_.has_sample()) {
      e.rtt = rtt_.latest_rtt();
      e.min_rtt = rtt_.min_rtt();
    }
    // App-limited: we had less in flight than cwnd allowed.
    e.app_limited = Packets(prior_in_flight) + 1 < cc_->cwnd() &&
                    sendq_.end() == snd_nxt_;
    e.in_recovery = in_recovery_;
    cc_->OnAck(e);
    // Delivery rate: bytes delivered over the RTT of this sample.
    if (rtt_.has_sample() && rtt_.latest_rtt() > absl::ZeroDuration()) {
      stats_.delivery_rate_bps =
          static_cast<double>(prior_in_flight) * 8 /
          absl::ToDoubleSeconds(rtt_.latest_rtt());
    }
  }

  // Our FIN acknowledged?
  if (fin_sent_ && snd_una_ == snd_nxt_) {
    switch (state_) {
      case TcpState::kFinWait1:
        SetState(TcpState::kFinWait2);
        if (!attached_) {
          // Orphaned: do not wait forever for the peer (Linux
          // tcp_fin_timeout).
          layer_.timers_.Schedule(keepalive_timer_, now + 2 * options_.msl);
        }
        break;
      case TcpState::kClosing:
        EnterTimeWait(now);
        break;
      case TcpState::kLastAck:
        SetState(TcpState::kClosed);
        Notify(transport::event::kHangup);
        return std::nullopt;
      default:
        break;
    }
  }
  if (snd_una_ != snd_nxt_ || sendq_.end() != snd_nxt_) MarkOutput();
  return std::nullopt;
}

bool Connection::PawsReject(const Segment& seg, Instant now) const {
  const uint32_t tsval = seg.tcp.timestamps->tsval;
  const int32_t behind = static_cast<int32_t>(ts_recent_ - tsval);
  // One tick of tolerance (Linux's TCP_PAWS_WINDOW): a sender that stamps
  // data at its pacing time and ACKs at the current time emits ACKs that
  // look a tick older than the data before them.
  if (behind <= kPawsWindow) return false;
  // RFC 7323 5.5: TS.Recent is invalid after 24 days of idleness.
  if (now - ts_recent_at_ >= absl::Hours(24 * 24)) return false;
  // A reordered duplicate ACK (Linux's tcp_disordered_ack): a pure ACK at
  // rcv_nxt, acking snd_una, not moving the window, and no older than an
  // RTO. Dropping it is harmless, but it is not an attack either; taking
  // it keeps the dupack count right.
  const bool pure_dup = seg.payload.size() == 0 && !seg.has(flag::kFin) &&
                        !seg.has(flag::kSyn) && seg.seq() == rcvq_.rcv_nxt() &&
                        seg.ack() == snd_una_ &&
                        (static_cast<uint32_t>(seg.tcp.window) << snd_wscale_) ==
                            snd_wnd_;
  if (pure_dup &&
      behind <= static_cast<int32_t>(absl::ToInt64Milliseconds(rtt_.Rto()))) {
    return false;
  }
  return true;
}

void Connection::SampleHandshakeRtt(const Segment& seg, Instant now) {
  // A passive open's first RTT sample: the SYN-ACK to the ACK that
  // completes the handshake (Linux's tcp_synack_rtt_meas). Karn's rule:
  // after a retransmitted SYN-ACK only the echoed timestamp can tell.
  // A zero reading (an instant answer on a fake clock) is no sample: it
  // would pin min_rtt, and with it RACK's reordering window, at zero.
  if (syn_retries_ == 0 && first_unacked_at_ != kNever) {
    if (now > first_unacked_at_) rtt_.Sample(now - first_unacked_at_, now);
  } else if (ts_ok_ && seg.tcp.timestamps && seg.tcp.timestamps->tsecr != 0) {
    const int32_t ms =
        static_cast<int32_t>(TsNow(now) - seg.tcp.timestamps->tsecr);
    if (ms > 0) rtt_.Sample(absl::Milliseconds(ms), now);
  }
  rtt_.ResetBackoff();
}

void Connection::UpdateRtt(const Segment& seg, const AckResult& res,
                           Instant now) {
  // The scoreboard's sample (send time of the newest delivered original
  // transmission) is exact, unless a retransmission was acked by the same
  // cumulative ACK (Karn's rule). Timestamps then still give a sample
  // (RFC 7323 section 4.1), at 1 ms granularity.
  if (res.rtt_xmit != absl::InfinitePast() &&
      !(res.retransmitted_delivered && res.newly_sacked == 0)) {
    rtt_.Sample(now - res.rtt_xmit, now);
    return;
  }
  if (ts_ok_ && seg.tcp.timestamps && seg.tcp.timestamps->tsecr != 0 &&
      res.acked_bytes > 0) {
    const int32_t ms =
        static_cast<int32_t>(TsNow(now) - seg.tcp.timestamps->tsecr);
    // A 0 ms reading only says "under a millisecond": no sample (it would
    // pin min_rtt, and with it RACK's reordering window, at zero).
    if (ms > 0) rtt_.Sample(absl::Milliseconds(ms), now);
  }
}

void Connection::UndoCongestionResponse() {
  cc_->Undo();
  ++stats_.spurious_recoveries;
  in_recovery_ = false;
  rto_recovery_ = false;
  undo_retrans_ = 0;
  // What was marked lost is in the network after all: do not resend it.
  sb_.ClearLost();
}

void Connection::OnDsack(uint32_t dsack_bytes) {
  ++stats_.dsacks_received;
  // RFC 3708: when every retransmission of an episode is reported
  // duplicate, none was needed: undo the congestion response.
  if (undo_retrans_ > 0) {
    const uint32_t pkts = std::max<uint32_t>(1, Packets(dsack_bytes));
    undo_retrans_ -= std::min(undo_retrans_, pkts);
    if (undo_retrans_ == 0) UndoCongestionResponse();
  }
  sb_.set_reordering_seen();
  if (!dsack_round_set_ || snd_una_ >= dsack_round_) {
    reo_wnd_mult_ = std::min<uint32_t>(reo_wnd_mult_ + 1, 16);
    dsack_round_ = snd_nxt_;
    dsack_round_set_ = true;
  }
  reo_wnd_persist_ = 16;
}

Duration Connection::ReorderWindow() const {
  const Duration min_rtt = rtt_.min_rtt();
  if (min_rtt == absl::InfiniteDuration()) return absl::ZeroDuration();
  if (!sb_.reordering_seen() &&
      (in_recovery_ || sb_.sacked_bytes() >= kDupThresh * mss_)) {
    return absl::ZeroDuration();
  }
  return std::min(min_rtt / 4 * reo_wnd_mult_, rtt_.srtt());
}

void Connection::DetectLoss(uint64_t prior_in_flight,
                            SeqNum prior_una, bool dupack, Instant now) {
  uint64_t marked = 0;
  if (sack_ok_) {
    if (options_.rack) {
      Instant timeout;
      marked += sb_.RackDetectLoss(now, ReorderWindow(), &timeout);
      layer_.timers_.Schedule(rack_timer_, timeout);
    }
    // RFC 6675 DupThresh: three segments SACKed above a hole.
    if (!sb_.reordering_seen()) {
      marked += sb_.MarkLostBySack(static_cast<uint64_t>(kDupThresh) * mss_);
    }
  } else {
    if (dupack && dupacks_ == kDupThresh && !in_recovery_) {
      marked += sb_.MarkFirstLost();
    } else if (in_recovery_ && snd_una_ > prior_una &&
               snd_una_ < recovery_point_) {
      // RFC 6582 partial ACK: the next hole is lost too.
      marked += sb_.MarkFirstLost();
    }
  }
  if (marked > 0 && !in_recovery_ && !rto_recovery_) {
    EnterRecovery(prior_in_flight, now);
  }
  if (in_recovery_ && snd_una_ >= recovery_point_) {
    in_recovery_ = false;
    cc_->OnRecoveryEnd(now);
    // RFC 8985 6.2: the widened window lasts 16 recoveries.
    if (reo_wnd_persist_ > 0 && --reo_wnd_persist_ == 0) reo_wnd_mult_ = 1;
  }
  if (sb_.NextLost() < sb_.size()) MarkOutput();
}

std::optional<DropReason> Connection::ProcessData(Segment& seg,
                                                  Instant now) {
  if (fin_received_) return std::nullopt;
  SeqNum seq = seg.seq();
  buffer::PayloadView data = seg.payload;
  // Trim to the window we advertised.
  const SeqNum right = rcv_adv_;
  if (seq + data.size() > right) {
    data.Truncate(Span(seq, right));
  }
  if (data.empty()) {
    ack_pending_ = ack_now_ = true;
    return std::nullopt;
  }
  // What the queue may pin: twice the buffer, as Linux's rcvbuf is about
  // twice the window it offers (docs/TCP.md "Receive memory").
  rcvq_.SetMemory(&layer_.chunks_, &layer_.compact_arena_,
                  2 * size_t{rcv_buf_});
  const bool in_order = seq <= rcvq_.rcv_nxt();
  const ReceiveQueue::InsertResult res = rcvq_.Insert(seq, std::move(data));
  for (uint32_t i = 0; i < res.pruned; ++i) {
    layer_.stack_.CountDrop(DropReason::kTcpOfoPruned);
  }
  if (res.duplicate && sack_ok_) QueueDsack(res.dup);
  if (res.dropped) {
    // Not held: the ACK tells the peer what we have (its SACK blocks no
    // longer list what was pruned).
    ack_pending_ = ack_now_ = true;
    return DropReason::kTcpReceiveMemory;
  }
  stats_.bytes_received += res.readable;
  if (read_shutdown_) rcvq_.DiscardReady();
  ack_pending_ = true;
  unacked_bytes_ += static_cast<uint32_t>(seg.payload.size());
  if (!in_order) ++stats_.ooo_segments;
  if (res.readable > 0) Notify(transport::event::kReadable);
  // The ACK policy (RFC 5681 4.2, RFC 2018 4). An ACK of its own, queued
  // now (it still leaves in this turn's burst), when the sender learns
  // something it needs at once: a new out-of-order run or a (partly)
  // filled hole, so that no SACK state is lost between ACKs; a duplicate
  // (D-SACK); every second full segment; and each GRO super-frame of two
  // segments or more, which stands for that many ACKs. Otherwise one ACK
  // for the batch (out-of-order data extending a run), or a delayed one.
  const bool gro_frame = seg.payload.size() >= 2 * mss_;
  if (res.new_run || res.filled_hole || res.duplicate || gro_frame ||
      unacked_bytes_ >= 2 * mss_) {
    if (seg.has(wire::tcp_flag::kFin) ||
        (ooo_fin_set_ && rcvq_.rcv_nxt() == ooo_fin_)) {
      ack_now_ = true;  // the FIN's ACK at the end of the batch covers it
    } else {
      SendAck(now);
    }
  } else if (!in_order) {
    ack_now_ = true;
  }
  return std::nullopt;
}

void Connection::QueueDsack(wire::TcpSackBlock b) {
  for (size_t i = 0; i < dsack_count_; ++i) {
    if (dsacks_[i].left == b.left && dsacks_[i].right == b.right) return;
  }
  if (dsack_count_ == kDsackQueue) {
    std::copy(dsacks_.begin() + 1, dsacks_.end(), dsacks_.begin());
    --dsack_count_;
  }
  dsacks_[dsack_count_++] = b;
}

void Connection::ProcessFin(Instant now) {
  fin_received_ = true;
  rcvq_.Advance(1);
  ack_pending_ = ack_now_ = true;
  Notify(transport::event::kReadable);
  switch (state_) {
    case TcpState::kSynReceived:
    case TcpState::kEstablished:
      SetState(TcpState::kCloseWait);
      break;
    case TcpState::kFinWait1:
      if (fin_sent_ && snd_una_ == snd_nxt_) {
        EnterTimeWait(now);
      } else {
        SetState(TcpState::kClosing);
      }
      break;
    case TcpState::kFinWait2:
      EnterTimeWait(now);
      break;
    default:
      break;
  }
}

void Connection::EnterTimeWait(Instant now) {
  // The ACK of the peer's FIN, if owed, leaves now: the connection closes
  // below, and from here on the compact TIME_WAIT entry answers for the
  // tuple (retransmitted FINs, SYNs, RFC 1337), and ends it after 2 MSL.
  if (ack_pending_) SendAck(now);
  TimeWaitEntry e;
  e.tuple = tuple_;
  e.snd_nxt = snd_nxt_;
  e.rcv_nxt = rcvq_.rcv_nxt();
  e.ts_ok = ts_ok_;
  e.ts_recent = ts_recent_;
  e.ts_offset = ts_offset_;
  e.window = WindowField();
  e.two_msl_ms = static_cast<uint32_t>(
      std::min<int64_t>(absl::ToInt64Milliseconds(2 * options_.msl),
                        UINT32_MAX));
  entered_time_wait_ = layer_.EnterTimeWait(*this, e, now);
  sendq_.Reset(snd_nxt_);
  sb_.Clear();
  SetState(TcpState::kClosed);
  Notify(transport::event::kHangup);
}

void Connection::OnFinWait2Timer(Instant now) {
  // An orphaned FIN_WAIT_2 gave up waiting for the peer's FIN: reset, as
  // Linux does. (TIME_WAIT lives in the layer's table, not here.)
  SendRst(now);
  SetState(TcpState::kClosed);
  Notify(transport::event::kHangup);
}

void Connection::AutotuneReceive(size_t copied, Instant now) {
  if (!options_.receive_autotuning) return;
  rcv_space_copied_ += copied;
  const Duration rtt = rtt_.has_sample() ? rtt_.srtt() : absl::Milliseconds(1);
  if (rcv_space_at_ == absl::InfinitePast()) rcv_space_at_ = now;
  if (now - rcv_space_at_ < rtt) return;
  // The application drained this much in one RTT: let the window carry
  // twice that, so the sender is never limited by us (Linux DRS idea).
  const uint64_t want = 2 * rcv_space_copied_ + 16 * uint64_t{mss_};
  if (want > rcv_buf_) {
    rcv_buf_ = static_cast<uint32_t>(
        std::min<uint64_t>(want, options_.max_receive_buffer));
  }
  rcv_space_copied_ = 0;
  rcv_space_at_ = now;
}

// --- Listener ---

void Connection::OnListenerClosed(Instant now) {
  if (state_ == TcpState::kSynReceived) {
    ++layer_.counters_.half_open_dropped_listener_closed;
    error_ = transport::ConnectionAborted();
    SetState(TcpState::kClosed);
    return;
  }
  Abort(now);  // RST: the peer thinks it is connected
}

Listener::~Listener() {
  for (Queue* q : {&half_open_, &accept_queue_}) {
    while (!q->empty()) {
      Connection* c = &q->front();
      Unlink(c);
      c->OnListenerClosed(layer_.now_);
    }
  }
}

void Listener::AddHalfOpen(Connection* c) {
  NETSTACK_DCHECK(c->listener_ == nullptr);
  c->listener_ = this;
  c->accept_queued_ = false;
  half_open_.push_back(*c);
  ++layer_.half_open_count_;
}

void Listener::Unlink(Connection* c) {
  NETSTACK_DCHECK(c->listener_ == this);
  Queue& q = c->accept_queued_ ? accept_queue_ : half_open_;
  q.erase(q.iterator_to(*c));
  if (&q == &half_open_) --layer_.half_open_count_;
  c->listener_ = nullptr;
  c->accept_queued_ = false;
}

void Listener::Ready(Connection* c) {
  // A cookie's connection was never half-open: it is not linked yet.
  if (c->listener_ == this) Unlink(c);
  c->listener_ = this;
  c->accept_queued_ = true;
  accept_queue_.push_back(*c);
  layer_.notifier_.Mark(notifiable_, transport::event::kReadable);
}

void Listener::Forget(Connection* c) {
  if (c->listener_ == this) Unlink(c);
}

Connection* Listener::PopAccepted() {
  if (accept_queue_.empty()) return nullptr;
  Connection* c = &accept_queue_.front();
  Unlink(c);
  return c;
}

}  // namespace netstack::tcp
