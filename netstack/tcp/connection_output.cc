// Connection: what goes out (handshake, data in super-segments, loss
// recovery, ACKs and window updates) and the timers (RTO, persist, TLP,
// delayed ACK, RACK reordering, keepalive, TIME_WAIT).
#include <algorithm>

#include "netstack/tcp/connection.h"
#include "netstack/tcp/tcp_layer.h"
#include "netstack/transport/errors.h"

namespace netstack::tcp {

namespace flag = wire::tcp_flag;

namespace {
// RFC 8985 7.2: the worst-case delayed-ACK time added to a PTO when only
// one segment is in flight.
constexpr Duration kMaxAckDelay = absl::Milliseconds(200);
constexpr Duration kMaxPersist = absl::Seconds(60);
}  // namespace

void Connection::MarkOutput() { layer_.MarkOutput(this); }

void Connection::Notify(uint32_t events) {
  if (attached_) layer_.notifier_.Mark(notifiable_, events);
}

uint32_t Connection::MaxPayload() const {
  if (gso_max_ == 0) return mss_;
  const uint32_t hdrs = (tuple_.remote.ip.is_v6() ? 40 : 20) + 20 +
                        (ts_ok_ ? 12 : 0);
  const uint32_t room = gso_max_ > hdrs ? gso_max_ - hdrs : mss_;
  return std::max(mss_, room / mss_ * mss_);
}

uint32_t Connection::ReceiveWindow() const {
  const size_t held = rcvq_.ready_bytes() + rcvq_.ooo_bytes();
  return held >= rcv_buf_ ? 0 : static_cast<uint32_t>(rcv_buf_ - held);
}

bool Connection::WindowUpdateDue() const {
  // Receiver SWS avoidance (RFC 9293 3.8.6.2.2): move the right edge only
  // by at least min(buffer / 2, MSS); announce it at once when that much
  // opened up (at least two MSS, as Linux does, to avoid tiny updates).
  // Only what the 16-bit field can say counts: without window scaling a
  // buffer above 64 KiB would otherwise make every Output an "update".
  const uint32_t max_field = 65535u << rcv_wscale_;
  const SeqNum edge =
      rcvq_.rcv_nxt() + std::min(ReceiveWindow(), max_field);
  if (edge <= rcv_adv_) return false;
  const uint32_t grow = Span(rcv_adv_, edge);
  const uint32_t open = Span(rcvq_.rcv_nxt(), rcv_adv_);
  return grow >= std::min(rcv_buf_ / 2, 2 * mss_) ||
         (open < mss_ && grow >= std::min(rcv_buf_ / 2, mss_));
}

uint16_t Connection::WindowField() {
  const SeqNum rcv_nxt = rcvq_.rcv_nxt();
  uint32_t wnd = ReceiveWindow();
  const SeqNum edge = rcv_nxt + wnd;
  // Never move the right edge left (RFC 9293 3.8.6), and move it right
  // only in SWS-safe steps.
  if (edge <= rcv_adv_) {
    wnd = Span(rcv_nxt, rcv_adv_);
  } else {
    const uint32_t grow = Span(rcv_adv_, edge);
    if (grow < std::min(rcv_buf_ / 2, mss_) && rcv_adv_ > rcv_nxt) {
      wnd = Span(rcv_nxt, rcv_adv_);
    }
  }
  // Round up to the scale so the edge never retreats.
  uint32_t field = (wnd + (1u << rcv_wscale_) - 1) >> rcv_wscale_;
  field = std::min<uint32_t>(field, 65535);
  rcv_adv_ = Max(rcv_adv_, rcv_nxt + (field << rcv_wscale_));
  if (rcv_adv_ < rcv_nxt) rcv_adv_ = rcv_nxt;
  return static_cast<uint16_t>(field);
}

void Connection::FillCommon(wire::TcpRepr& r, Instant now) {
  r.flags |= flag::kAck;
  r.ack = rcvq_.rcv_nxt().value();
  r.window = WindowField();
  if (ts_ok_) r.timestamps = wire::TcpTimestamps{TsNow(now), ts_recent_};
  if (sack_ok_) {
    // RFC 2883: one pending D-SACK first; then the runs we hold, chosen
    // by the receive queue (RFC 2018 section 4). SackBlocksToSend() says
    // in advance how many this makes.
    const size_t room = SackRoom();
    size_t n = 0;
    if (dsack_count_ > 0) {
      r.sack_blocks[n++] = dsacks_[0];
      std::copy(dsacks_.begin() + 1, dsacks_.begin() + dsack_count_,
                dsacks_.begin());
      --dsack_count_;
    }
    if (rcvq_.has_ooo()) {
      n += rcvq_.SackBlocks(std::span<wire::TcpSackBlock>(
          r.sack_blocks.data() + n, room - n));
    }
    r.sack_count = static_cast<uint8_t>(n);
  }
  last_ack_sent_ = rcvq_.rcv_nxt();
  ack_pending_ = false;
  ack_now_ = false;
  app_read_ = false;
  unacked_bytes_ = 0;
  if (quick_acks_ > 0) --quick_acks_;
  layer_.timers_.Cancel(delack_timer_);
}

size_t Connection::SackBlocksToSend() const {
  if (!sack_ok_) return 0;
  const size_t room = SackRoom();
  const size_t dsack = dsack_count_ > 0 ? 1 : 0;
  return dsack + rcvq_.SackBlockCount(room - dsack);
}

void Connection::SendSyn(Instant now) {
  SegmentOut out;
  wire::TcpRepr& r = out.tcp;
  r.seq = iss_.value();
  r.flags = flag::kSyn;
  r.mss = MssForMtuOption();
  if (options_.window_scaling && (state_ == TcpState::kSynSent || ws_ok_)) {
    r.window_scale = rcv_wscale_;
  }
  if (options_.sack && (state_ == TcpState::kSynSent || sack_ok_)) {
    r.sack_permitted = true;
  }
  if (options_.timestamps && (state_ == TcpState::kSynSent || ts_ok_)) {
    r.timestamps = wire::TcpTimestamps{TsNow(now), ts_recent_};
  }
  if (state_ == TcpState::kSynReceived) {
    r.flags |= flag::kAck;
    r.ack = rcvq_.rcv_nxt().value();
    last_ack_sent_ = rcvq_.rcv_nxt();
    ack_pending_ = ack_now_ = false;
  }
  r.window = static_cast<uint16_t>(std::min<uint32_t>(rcv_buf_, 65535));
  if (state_ == TcpState::kSynReceived) rcv_adv_ = rcvq_.rcv_nxt() + r.window;
  if (snd_nxt_ == iss_) snd_nxt_ = iss_ + 1;
  if (first_unacked_at_ == kNever) first_unacked_at_ = now;
  if (layer_.Transmit(tuple_, out, now)) ++stats_.segments_sent;
  ArmRetransmit(now);
}

uint16_t Connection::MssForMtuOption() const {
  return MssForMtu(path_mtu_, tuple_.remote.ip.is_v6());
}

bool Connection::SendSegment(SeqNum seq, uint32_t len, bool fin,
                             Instant now) {
  SegmentOut out;
  wire::TcpRepr& r = out.tcp;
  r.seq = seq.value();
  if (len > 0) {
    uint32_t got = 0;
    out.views = static_cast<uint32_t>(
        sendq_.Gather(seq, len, out.payload, &got));
    if (got < len) {
      len = got;
      fin = false;  // the FIN goes with the last byte only
    }
    out.payload_len = len;
    r.flags |= flag::kPsh;
  }
  if (fin) r.flags |= flag::kFin;
  FillCommon(r, now);
  out.packets = len > mss_ ? (len + mss_ - 1) / mss_ : 1;
  if (out.packets > 1) out.gso_size = static_cast<uint16_t>(mss_);
  if (!layer_.Transmit(tuple_, out, now)) return false;
  stats_.segments_sent += out.packets;
  stats_.bytes_sent += len;
  return true;
}

bool Connection::Retransmit(size_t i, Instant now) {
  const TxRecord rec = sb_.at(i);
  uint32_t len = rec.len() - (rec.fin ? 1 : 0);
  if (!SendSegment(rec.start, len, rec.fin, now)) return false;
  sb_.OnRetransmit(i, now);
  const uint32_t packets = std::max<uint32_t>(1, Packets(len));
  stats_.retransmits += packets;
  stats_.bytes_retransmitted += len;
  layer_.counters_.retransmits += packets;
  return true;
}

bool Connection::SendNewData(Instant now) {
  const uint32_t avail = Span(snd_nxt_, sendq_.end());
  const bool fin_pending = fin_queued_ && !fin_sent_;
  if (avail == 0 && !fin_pending) return false;
  const uint64_t pipe = sb_.InFlight(snd_una_, snd_nxt_);
  const uint64_t cwnd = uint64_t{cc_->cwnd()} * mss_;
  const uint64_t cwnd_room = cwnd > pipe ? cwnd - pipe : 0;
  const SeqNum wnd_edge = snd_una_ + snd_wnd_;
  const uint32_t usable = Span(snd_nxt_, wnd_edge);
  uint32_t len = static_cast<uint32_t>(std::min<uint64_t>(
      {avail, usable, cwnd_room, MaxPayload()}));
  if (avail > 0 && len == 0) {
    if (usable == 0 && snd_una_ == snd_nxt_ && !rtx_timer_.scheduled()) {
      // Zero window and nothing in flight: probe (RFC 9293 3.8.6.1).
      rto_deadline_ = kNever;
      rtx_mode_ = RtxMode::kPersist;
      layer_.timers_.Schedule(rtx_timer_, now + rtt_.Rto());
    }
    return false;
  }
  if (len < avail) {
    // Not everything fits: send only full segments (sender SWS
    // avoidance, RFC 9293 3.8.6.2.1), unless the window is the limit and
    // it is at least half the largest window the peer offered.
    if (len >= mss_) {
      if (len > mss_) len = len / mss_ * mss_;
    } else if (!(len == usable && len >= max_snd_wnd_ / 2 && len > 0)) {
      return false;
    }
  } else if (len < mss_ && avail > 0) {
    // A small tail: Nagle (RFC 896, with Minshall's refinement: only an
    // unacknowledged *small* segment holds it) and cork.
    if (options_.cork && !fin_pending) return false;
    if (!options_.nodelay && small_sent_ && small_end_ > snd_una_ &&
        !fin_pending) {
      return false;
    }
  }
  const bool fin = fin_pending && len == avail;
  if (len == 0 && !fin) return false;
  if (!SendSegment(snd_nxt_, len, fin, now)) return false;
  sb_.OnSend(snd_nxt_, snd_nxt_ + len + (fin ? 1 : 0), now, fin);
  if (len > 0 && len < mss_) {
    small_sent_ = true;
    small_end_ = snd_nxt_ + len;
  }
  if (first_unacked_at_ == kNever) first_unacked_at_ = now;
  snd_nxt_ += len + (fin ? 1 : 0);
  if (fin) fin_sent_ = true;
  if (rto_deadline_ == kNever || rtx_mode_ == RtxMode::kPersist) {
    ArmRetransmit(now);
  } else {
    ArmTlp(now);  // RFC 8985 7.2: re-arm the PTO on each transmission
  }
  return true;
}

void Connection::SendData(Instant now) {
  // Loss recovery first (RFC 6675 NextSeg rule 1), within cwnd; then new
  // data. Bounded by the packets one call may emit.
  for (int guard = 0; guard < 4096; ++guard) {
    const size_t lost = sb_.NextLost();
    if (lost < sb_.size()) {
      const uint64_t pipe = sb_.InFlight(snd_una_, snd_nxt_);
      const uint64_t cwnd = uint64_t{cc_->cwnd()} * mss_;
      if (pipe < cwnd) {
        if (!Retransmit(lost, now)) return;
        if (rto_deadline_ == kNever) ArmRetransmit(now);
        continue;
      }
      return;
    }
    if (!SendNewData(now)) return;
  }
}

void Connection::SendAck(Instant now) {
  SegmentOut out;
  out.tcp.seq = snd_nxt_.value();
  FillCommon(out.tcp, now);
  if (layer_.Transmit(tuple_, out, now)) {
    ++stats_.acks_sent;
    ++stats_.segments_sent;
  }
}

void Connection::SendProbe(Instant now) {
  // seq = SND.UNA - 1: the peer answers with an ACK carrying its window.
  SegmentOut out;
  out.tcp.seq = (snd_una_ - 1).value();
  FillCommon(out.tcp, now);
  if (layer_.Transmit(tuple_, out, now)) ++stats_.segments_sent;
}

void Connection::SendRst(Instant now) {
  SegmentOut out;
  out.tcp.seq = snd_nxt_.value();
  out.tcp.ack = rcvq_.rcv_nxt().value();
  out.tcp.flags = flag::kRst | flag::kAck;
  (void)layer_.Transmit(tuple_, out, now);
  ++layer_.counters_.resets_sent;
}

void Connection::Output(Instant now) {
  switch (state_) {
    case TcpState::kSynSent:
      if (snd_nxt_ == iss_) SendSyn(now);
      return;
    case TcpState::kSynReceived:
      SendSyn(now);
      return;
    case TcpState::kClosed:
    case TcpState::kListen:
      return;
    case TcpState::kTimeWait:
      if (ack_pending_) SendAck(now);
      return;
    default:
      break;
  }
  SendData(now);
  if (app_read_ && WindowUpdateDue()) ack_now_ = ack_pending_ = true;
  if (!ack_pending_) return;
  // What the batch still owes (ProcessData already sent the ACKs that
  // could not wait): immediately when RFC 5681/9293 say so (every second
  // full-sized segment, out-of-order data, FIN, a window update,
  // quick-ACK mode), otherwise after the delayed-ACK time.
  if (ack_now_ || unacked_bytes_ >= 2 * mss_ || quick_acks_ > 0) {
    SendAck(now);
    // Each duplicate the batch brought gets its D-SACK (RFC 2883), as
    // each would have drawn its own ACK.
    for (size_t i = 0; i < kDsackQueue && dsack_count_ > 0; ++i) {
      SendAck(now);
    }
  } else if (!delack_timer_.scheduled()) {
    layer_.timers_.Schedule(delack_timer_, now + options_.delayed_ack);
  }
}

// --- timers ---

void Connection::ArmRetransmit(Instant now) {
  if (snd_una_ == snd_nxt_ && state_ != TcpState::kSynSent &&
      state_ != TcpState::kSynReceived) {
    CancelRetransmit();
    return;
  }
  ScheduleRto(now + rtt_.Rto());
  ArmTlp(now);
}

void Connection::ScheduleRto(Instant deadline) {
  if (options_.user_timeout > absl::ZeroDuration() &&
      first_unacked_at_ != kNever) {
    // Fire no later than the user timeout (Linux
    // tcp_clamp_rto_to_user_timeout), so the abort is on time.
    deadline = std::min(deadline, first_unacked_at_ + options_.user_timeout);
  }
  rto_deadline_ = deadline;
  rtx_mode_ = RtxMode::kRto;
  layer_.timers_.Schedule(rtx_timer_, deadline);
}

void Connection::CancelRetransmit() {
  rto_deadline_ = kNever;
  layer_.timers_.Cancel(rtx_timer_);
}

void Connection::ArmTlp(Instant now) {
  // RFC 8985 7.2: a probe timeout shorter than the RTO, when not in
  // recovery and not already probing.
  if (!options_.rack || !sack_ok_ || in_recovery_ || rto_recovery_ ||
      tlp_outstanding_ || !rtt_.has_sample() || rto_deadline_ == kNever ||
      state_ == TcpState::kSynSent || state_ == TcpState::kSynReceived) {
    return;
  }
  Duration pto = 2 * rtt_.srtt();
  if (sb_.InFlight(snd_una_, snd_nxt_) <= mss_) pto += kMaxAckDelay;
  pto = std::max(pto, absl::Milliseconds(10));
  // A PTO past the RTO probes at the RTO's time instead (RFC 8985 7.2).
  const Instant at = std::min(now + pto, rto_deadline_);
  rtx_mode_ = RtxMode::kTlp;
  layer_.timers_.Schedule(rtx_timer_, at);
}

void Connection::OnTlpTimer(Instant now) {
  ++stats_.tail_loss_probes;
  tlp_outstanding_ = true;
  // New data if the window allows, else the last segment again.
  const bool sent_new = SendNewData(now);
  if (!sent_new && !sb_.empty()) {
    (void)Retransmit(sb_.size() - 1, now);
  }
  ScheduleRto(now + rtt_.Rto());
}

void Connection::OnRetransmitTimer(Instant now) {
  if (state_ == TcpState::kSynSent || state_ == TcpState::kSynReceived) {
    if (++syn_retries_ > options_.syn_retries) {
      ++layer_.counters_.connections_timed_out;
      return Fail(transport::TimedOut());
    }
    rtt_.Backoff();
    ++stats_.timeouts;
    ++stats_.retransmits;
    SendSyn(now);
      return;
  }
  if (snd_una_ == snd_nxt_) return;
  const bool user_timeout =
      options_.user_timeout > absl::ZeroDuration() &&
      first_unacked_at_ != kNever &&
      now - first_unacked_at_ >= options_.user_timeout;
  if (user_timeout || rtt_.backoff() >= options_.max_retransmits) {
    ++layer_.counters_.connections_timed_out;
    SendRst(now);
    Fail(transport::TimedOut());
      return;
  }
  ++stats_.timeouts;
  if (!rto_recovery_) {
    // First expiry of an episode: congestion response (RFC 5681 eq. 4).
    cc_->OnRetransmitTimeout(now,
                             Packets(sb_.InFlight(snd_una_, snd_nxt_)));
  }
  rto_recovery_ = true;
  in_recovery_ = false;
  recovery_point_ = snd_nxt_;
  tlp_outstanding_ = false;
  dupacks_ = 0;
  sb_.MarkAllLost();
  rtt_.Backoff();
  // Retransmit the first lost segment regardless of cwnd.
  const size_t i = sb_.NextLost();
  if (i < sb_.size()) (void)Retransmit(i, now);
  ScheduleRto(now + rtt_.Rto());
}

void Connection::OnPersistTimer(Instant now) {
  if (snd_wnd_ > 0 || sendq_.end() == snd_nxt_) {
    MarkOutput();
    return;
  }
  if (options_.user_timeout > absl::ZeroDuration() &&
      first_unacked_at_ != kNever &&
      now - first_unacked_at_ >= options_.user_timeout) {
    SendRst(now);
    return Fail(transport::TimedOut());
  }
  if (first_unacked_at_ == kNever) first_unacked_at_ = now;
  ++stats_.zero_window_probes;
  SendProbe(now);
  ++persist_backoff_;
  Duration next = rtt_.Rto();
  for (uint32_t i = 0; i < persist_backoff_ && next < kMaxPersist; ++i) {
    next *= 2;
  }
  next = std::min(next, kMaxPersist);
  rto_deadline_ = kNever;
  rtx_mode_ = RtxMode::kPersist;
  layer_.timers_.Schedule(rtx_timer_, now + next);
}

void Connection::OnDelayedAckTimer(Instant now) {
  if (!ack_pending_) return;
  ++stats_.delayed_acks;
  SendAck(now);
}

void Connection::OnRackTimer(Instant now) {
  Instant timeout;
  const uint64_t marked = sb_.RackDetectLoss(now, ReorderWindow(), &timeout);
  layer_.timers_.Schedule(rack_timer_, timeout);
  if (marked > 0) {
    if (!in_recovery_ && !rto_recovery_) {
      in_recovery_ = true;
      recovery_point_ = snd_nxt_;
      ++stats_.fast_retransmits;
      cc_->OnCongestionEvent(now, Packets(sb_.InFlight(snd_una_, snd_nxt_)));
      // As in DetectLoss: the first lost segment goes out at once.
      const size_t first = sb_.NextLost();
      if (first < sb_.size() && Retransmit(first, now)) ArmRetransmit(now);
    }
    SendData(now);
    }
}

void Connection::ArmKeepalive(Instant now) {
  if (!options_.keepalive) {
    if (state_ != TcpState::kTimeWait && state_ != TcpState::kFinWait2) {
      layer_.timers_.Cancel(keepalive_timer_);
    }
    return;
  }
  layer_.timers_.Schedule(keepalive_timer_, now + options_.keepalive_idle);
}

void Connection::OnKeepaliveTimer(Instant now) {
  if (!options_.keepalive) return;
  const Instant idle_end = last_recv_ + options_.keepalive_idle;
  if (keepalive_sent_ == 0 && now < idle_end) {
    layer_.timers_.Schedule(keepalive_timer_, idle_end);
    return;
  }
  if (keepalive_sent_ > 0 && last_recv_ + options_.keepalive_idle > now) {
    keepalive_sent_ = 0;  // the peer answered
    layer_.timers_.Schedule(keepalive_timer_, idle_end);
    return;
  }
  if (keepalive_sent_ >= options_.keepalive_probes) {
    ++layer_.counters_.connections_timed_out;
    SendRst(now);
    Fail(transport::TimedOut());
      return;
  }
  ++keepalive_sent_;
  ++stats_.keepalive_probes;
  SendProbe(now);
  layer_.timers_.Schedule(keepalive_timer_,
                          now + options_.keepalive_interval);
}

}  // namespace netstack::tcp
