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

bool Connection::OutputIsSmall() const {
  if (sb_.NextLost() < sb_.size()) return false;
  const SeqNum end = sendq_.end();
  return end <= snd_nxt_ || Span(snd_nxt_, end) <= mss_;
}

void Connection::Notify(uint32_t events) {
  if (attached_) layer_.notifier_.Mark(notifiable_, events);
}

uint32_t Connection::MaxPayload() const {
  if (gso_max_ == 0) return mss_;
  const uint32_t hdrs = (tuple_.remote.ip.is_v6() ? 40 : 20) + 20 +
                        (ts_ok_ ? 12 : 0);
  const uint32_t room = gso_max_ > hdrs ? gso_max_ - hdrs : mss_;
  const uint64_t cap = std::min<uint64_t>(room, AutosizeBytes());
  return std::max<uint32_t>(mss_, static_cast<uint32_t>(cap / mss_ * mss_));
}

uint64_t Connection::AutosizeBytes() const {
  // Linux's tcp_tso_autosize: a super-segment carries about 1 ms of data
  // at the connection's pacing rate (cwnd / srtt, doubled in slow start and
  // x1.2 after, as tcp_update_pacing_rate sets it), at least two packets,
  // plus gso_max >> (min_rtt in us >> 9) (tcp_tso_rtt_log), so that a path
  // under half a millisecond keeps whole 64 KiB super-segments. A slow or
  // long path so gets small bursts, not 45 back-to-back packets that one
  // queue overflow takes together.
  if (!rtt_.has_sample()) return UINT64_MAX;
  const int64_t srtt_us =
      std::max<int64_t>(absl::ToInt64Microseconds(rtt_.srtt()), 1);
  const uint64_t cwnd_bytes = uint64_t{cc_->cwnd()} * mss_;
  const uint64_t ratio = cc_->InSlowStart() ? 200 : 120;  // percent
  const uint64_t rate = cwnd_bytes * ratio * 10'000 / uint64_t(srtt_us);
  uint64_t bytes = rate >> 10;  // ~1 ms (1/1024 s), sk_pacing_shift 10
  const int64_t min_rtt_us = absl::ToInt64Microseconds(rtt_.min_rtt());
  const int shift = static_cast<int>(
      std::min<int64_t>(std::max<int64_t>(min_rtt_us, 0) >> 9, 63));
  bytes += uint64_t{gso_max_} >> shift;
  return std::max<uint64_t>(bytes, 2 * uint64_t{mss_});
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

uint32_t Connection::PacketPayload(const wire::TcpRepr& r) const {
  // RFC 6691: the peer's MSS (and ours) counts no TCP options, so a packet
  // carries the MSS less the options it really has (Linux's
  // tcp_current_mss). mss_ already leaves room for timestamps; SACK blocks
  // (4 + 8 per block) come off on top, or the packet would exceed the MTU
  // and, with DF set, never arrive (nor would the ACK riding on it).
  const uint32_t base = mss_ + (ts_ok_ ? 12 : 0);
  const uint32_t opts =
      static_cast<uint32_t>(r.BufferLen()) - wire::TcpHeader::kHeaderLen;
  const uint32_t room = base > opts ? base - opts : 0;
  return std::max<uint32_t>(room, std::min<uint32_t>(mss_, 64));
}

Connection::Sent Connection::SendSegment(SeqNum seq, uint32_t len, bool fin,
                                         Instant now) {
  SegmentOut out;
  wire::TcpRepr& r = out.tcp;
  r.seq = seq.value();
  FillCommon(r, now);
  const uint32_t pkt = PacketPayload(r);
  if (len > pkt && pkt < mss_) {
    // The options this segment carries shrank its packets: keep whole
    // packets only; the rest goes in the next segment.
    len = gso_max_ == 0 ? pkt : len / pkt * pkt;
    fin = false;
  }
  if (len > 0) {
    uint32_t got = 0;
    out.views = static_cast<uint32_t>(
        sendq_.Gather(seq, len, out.payload, &got));
    if (got < len) {
      // More views than a packet holds: send what they cover, in whole
      // packets if that is more than one (the caller records exactly this
      // much), and the FIN only with the last byte.
      len = got > pkt ? got / pkt * pkt : got;
      fin = false;
      if (len < got) {
        out.views = static_cast<uint32_t>(
            sendq_.Gather(seq, len, out.payload, &got));
      }
    }
    out.payload_len = len;
    r.flags |= flag::kPsh;
  }
  if (fin) r.flags |= flag::kFin;
  out.packets = len > pkt ? (len + pkt - 1) / pkt : 1;
  if (out.packets > 1) out.gso_size = static_cast<uint16_t>(pkt);
  if (!layer_.Transmit(tuple_, out, now)) return Sent{};
  stats_.segments_sent += out.packets;
  stats_.bytes_sent += len;
  return Sent{true, len, fin, out.packets, pkt};
}

bool Connection::Retransmit(size_t i, uint32_t max_len, Instant now) {
  const TxRecord rec = sb_.at(i);
  const uint32_t data = rec.len() - (rec.fin ? 1 : 0);
  const uint32_t want = std::min(data, std::max<uint32_t>(max_len, 1));
  const bool fin = rec.fin && want == data;
  const Sent s = SendSegment(rec.start, want, fin, now);
  if (!s.ok) return false;
  const uint32_t sent_len = s.len + (s.fin ? 1 : 0);
  if (sent_len == 0) return false;
  // Record exactly what went out again: a record longer than what was
  // resent is cut, so the rest stays lost and is resent on its own.
  if (sent_len < rec.len()) sb_.SplitAt(i, rec.start + sent_len);
  sb_.OnRetransmit(i, now);
  stats_.retransmits += s.packets;
  stats_.bytes_retransmitted += s.len;
  layer_.counters_.retransmits += s.packets;
  prr_out_ += sent_len;
  if (in_recovery_ || rto_recovery_) undo_retrans_ += s.packets;
  return true;
}

bool Connection::SendNewData(Instant now, uint64_t limit) {
  const uint32_t avail = Span(snd_nxt_, sendq_.end());
  const bool fin_pending = fin_queued_ && !fin_sent_;
  if (avail == 0 && !fin_pending) return false;
  const uint64_t cwnd_room = limit;
  const SeqNum wnd_edge = snd_una_ + snd_wnd_;
  const uint32_t usable = Span(snd_nxt_, wnd_edge);
  uint32_t len = static_cast<uint32_t>(std::min<uint64_t>(
      {avail, usable, cwnd_room, MaxPayload()}));
  if (avail > 0 && len == 0) {
    // Zero window and nothing in flight: probe (RFC 9293 3.8.6.1).
    if (usable == 0) ArmPersistIfIdle(now);
    return false;
  }
  if (len < avail) {
    // Not everything fits: send only full segments (sender SWS
    // avoidance, RFC 9293 3.8.6.2.1), unless the window is the limit and
    // it is at least half the largest window the peer offered, or the
    // override timeout fired (OnPersistTimer).
    if (len >= mss_) {
      if (len > mss_) len = len / mss_ * mss_;
    } else if (!(len == usable && len >= max_snd_wnd_ / 2 && len > 0) &&
               !sws_override_) {
      // With nothing in flight no ACK will come to widen the window if
      // the peer's window update was lost (a guest's ACK of a 64 KiB
      // segment says 1 KiB, its update to 64 KiB is dropped): without a
      // timer the connection would wait forever.
      if (len == usable) ArmPersistIfIdle(now);
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
  if (snd_una_ == snd_nxt_ && last_send_at_ != absl::InfinitePast() &&
      now - last_send_at_ > rtt_.Rto()) {
    // RFC 5681 section 4.1: after an idle period longer than the RTO the
    // ACK clock is gone; restart from the restart window.
    cc_->OnIdleRestart(now);
    ++stats_.idle_restarts;
  }
  const Sent s = SendSegment(snd_nxt_, len, fin, now);
  if (!s.ok) return false;
  // What really went out, which may be less than asked for (more views
  // than a packet holds, or SACK options that shrank the packets).
  len = s.len;
  if (len == 0 && !s.fin) return false;
  sb_.OnSend(snd_nxt_, snd_nxt_ + len + (s.fin ? 1 : 0), now, s.fin);
  if (len > 0 && len < s.packet_payload && len == avail) {
    // A small segment for Nagle: short because the data ran out, not
    // because the options or the views cut it.
    small_sent_ = true;
    small_end_ = snd_nxt_ + len;
  }
  if (first_unacked_at_ == kNever) first_unacked_at_ = now;
  snd_nxt_ += len + (s.fin ? 1 : 0);
  if (s.fin) fin_sent_ = true;
  last_send_at_ = now;
  if (in_recovery_) prr_out_ += len + (s.fin ? 1 : 0);
  if (rto_deadline_ == kNever || rtx_mode_ == RtxMode::kPersist) {
    ArmRetransmit(now);
  } else {
    ArmTlp(now);  // RFC 8985 7.2: re-arm the PTO on each transmission
  }
  return true;
}

uint64_t Connection::SendAllowance(uint64_t pipe) const {
  const uint64_t cwnd = uint64_t{cc_->cwnd()} * mss_;
  if (!in_recovery_) return cwnd > pipe ? cwnd - pipe : 0;
  // RFC 6937 (PRR): in recovery, send in proportion to what is delivered,
  // so that when recovery ends the pipe is at ssthresh, without a burst
  // and without waiting for the pipe to drain.
  const uint64_t ssthresh = uint64_t{cc_->ssthresh()} * mss_;
  uint64_t sndcnt = 0;
  if (pipe > ssthresh) {
    const uint64_t fs = std::max<uint64_t>(recover_fs_, 1);
    const uint64_t target = (prr_delivered_ * ssthresh + fs - 1) / fs;
    sndcnt = target > prr_out_ ? target - prr_out_ : 0;
  } else {
    // PRR-SSRB: grow back towards ssthresh by at most one MSS more than
    // was delivered.
    const uint64_t owed =
        prr_delivered_ > prr_out_ ? prr_delivered_ - prr_out_ : 0;
    const uint64_t limit = std::max<uint64_t>(owed, last_delivered_) + mss_;
    sndcnt = std::min(ssthresh - pipe, limit);
  }
  return sndcnt;
}

void Connection::SendData(Instant now) {
  // Loss recovery first (RFC 6675 NextSeg rule 1), then new data, within
  // what cwnd (or, in recovery, PRR) allows. A retransmission resends only
  // as many whole packets as that allows, not the whole super-segment
  // record (RFC 5681 / RFC 8985). Bounded by the packets one call emits.
  for (int guard = 0; guard < 4096; ++guard) {
    const uint64_t pipe = sb_.InFlight(snd_una_, snd_nxt_);
    const uint64_t allowance = SendAllowance(pipe);
    const size_t lost = sb_.NextLost();
    if (lost < sb_.size()) {
      if (allowance < mss_) return;
      const uint32_t max_len = static_cast<uint32_t>(std::min<uint64_t>(
          allowance / mss_ * mss_, MaxPayload()));
      if (!Retransmit(lost, max_len, now)) return;
      if (rto_deadline_ == kNever) ArmRetransmit(now);
      continue;
    }
    if (!SendNewData(now, allowance)) return;
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
  const bool sent_new =
      SendNewData(now, SendAllowance(sb_.InFlight(snd_una_, snd_nxt_)));
  if (!sent_new && !sb_.empty()) {
    // Only the last packet of the last segment (RFC 8985 7.3, as Linux's
    // tcp_send_loss_probe): a probe, not a burst.
    const size_t last = sb_.size() - 1;
    const TxRecord rec = sb_.at(last);
    const uint32_t data = rec.len() - (rec.fin ? 1 : 0);
    size_t i = last;
    if (data > mss_) {
      sb_.SplitAt(last, rec.start + (data - 1) / mss_ * mss_);
      i = last + 1;
    }
    (void)Retransmit(i, mss_, now);
  }
  ScheduleRto(now + rtt_.Rto());
}

void Connection::OnRetransmitTimer(Instant now) {
  if (state_ == TcpState::kSynSent || state_ == TcpState::kSynReceived) {
    if (++syn_retries_ > options_.syn_retries) {
      ++layer_.counters_.connections_timed_out;
      return Fail(TimeoutError());
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
    Fail(TimeoutError());
      return;
  }
  ++stats_.timeouts;
  if (!rto_recovery_) {
    if (!in_recovery_) {
      undo_tsval_ = TsNow(now);
      undo_retrans_ = 0;
    }
    // First expiry of an episode: congestion response (RFC 5681 eq. 4).
    cc_->OnRetransmitTimeout(now,
                             Packets(sb_.InFlight(snd_una_, snd_nxt_)));
  }
  rto_recovery_ = true;
  in_recovery_ = false;
  recovery_point_ = snd_nxt_;
  tlp_outstanding_ = false;
  dupacks_ = 0;
  if (sb_.ForgetSacksIfReneged()) ++layer_.counters_.sack_reneging;
  sb_.MarkAllLost();
  rtt_.Backoff();
  // Retransmit one packet of the first lost segment regardless of cwnd
  // (RFC 5681 3.1: the loss window is one segment); the ACKs that follow
  // clock out the rest in slow start.
  const size_t i = sb_.NextLost();
  if (i < sb_.size()) (void)Retransmit(i, mss_, now);
  ScheduleRto(now + rtt_.Rto());
}

void Connection::ArmPersistIfIdle(Instant now) {
  if (snd_una_ != snd_nxt_ || rtx_timer_.scheduled()) return;
  rto_deadline_ = kNever;
  rtx_mode_ = RtxMode::kPersist;
  layer_.timers_.Schedule(rtx_timer_, now + rtt_.Rto());
}

void Connection::OnPersistTimer(Instant now) {
  if (sendq_.end() == snd_nxt_) {
    MarkOutput();
    return;
  }
  if (snd_wnd_ > 0) {
    // The window is open, but less of it than sender SWS avoidance waits
    // for, and nothing is in flight: RFC 9293 3.8.6.2.1's override
    // timeout. Send what fits (Linux: tcp_write_wakeup from the probe
    // timer); its ACK brings the window as it is now.
    sws_override_ = true;
    SendData(now);
    sws_override_ = false;
    return;
  }
  if (options_.user_timeout > absl::ZeroDuration() &&
      first_unacked_at_ != kNever &&
      now - first_unacked_at_ >= options_.user_timeout) {
    SendRst(now);
    return Fail(TimeoutError());
  }
  // A peer that answers a probe (with its window still zero) is alive;
  // one that answers none for max_retransmits probes is gone, as an RTO
  // would have found out had it not closed its window first.
  if (last_recv_ > persist_probe_at_) persist_unanswered_ = 0;
  if (persist_unanswered_ >= options_.max_retransmits) {
    ++layer_.counters_.connections_timed_out;
    SendRst(now);
    return Fail(TimeoutError());
  }
  ++persist_unanswered_;
  persist_probe_at_ = now;
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
      EnterRecovery(sb_.InFlight(snd_una_, snd_nxt_), now);
    }
    SendData(now);
  }
}

void Connection::EnterRecovery(uint64_t prior_in_flight, Instant now) {
  in_recovery_ = true;
  recovery_point_ = snd_nxt_;
  ++stats_.fast_retransmits;
  cc_->OnCongestionEvent(now, Packets(prior_in_flight));
  recover_fs_ = prior_in_flight;
  prr_delivered_ = 0;
  prr_out_ = 0;
  undo_tsval_ = TsNow(now);
  undo_retrans_ = 0;
  // RFC 5681 3.2 step 4, RFC 6675 5 (4.3): one packet of the first lost
  // segment goes out at once, whatever PRR allows (RFC 6937 section 3).
  const size_t first = sb_.NextLost();
  if (first < sb_.size() && Retransmit(first, mss_, now)) ArmRetransmit(now);
}

void Connection::ArmKeepalive(Instant now) {
  // An orphan's FIN_WAIT_2 timeout shares the slot: a segment from the
  // peer must not move it.
  if (state_ == TcpState::kFinWait2 && !attached_) return;
  if (!options_.keepalive) {
    layer_.timers_.Cancel(keepalive_timer_);
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
    Fail(TimeoutError());
      return;
  }
  ++keepalive_sent_;
  ++stats_.keepalive_probes;
  SendProbe(now);
  layer_.timers_.Schedule(keepalive_timer_,
                          now + options_.keepalive_interval);
}

}  // namespace netstack::tcp
