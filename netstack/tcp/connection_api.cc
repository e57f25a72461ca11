// Connection: the application side (reads, writes, shutdown, close,
// options and statistics).
#include <algorithm>

#include "absl/strings/str_format.h"
#include "netstack/tcp/connection.h"
#include "netstack/tcp/tcp_layer.h"
#include "netstack/transport/errors.h"

namespace netstack::tcp {

namespace ev = transport::event;

size_t Connection::Read(std::span<uint8_t> out, bool* eof) {
  const size_t n = rcvq_.Read(out);
  *eof = n == 0 && fin_received_ && rcvq_.ready_bytes() == 0;
  if (n > 0) {
    app_read_ = true;
    AutotuneReceive(n, layer_.now_);
    if (WindowUpdateDue()) MarkOutput();
  }
  return n;
}

size_t Connection::ReadViews(std::span<buffer::PayloadView> out,
                             size_t max_bytes, size_t* views, bool* eof) {
  const size_t n = rcvq_.ReadViews(out, max_bytes, views);
  *eof = n == 0 && fin_received_ && rcvq_.ready_bytes() == 0;
  if (n > 0) {
    app_read_ = true;
    AutotuneReceive(n, layer_.now_);
    if (WindowUpdateDue()) MarkOutput();
  }
  return n;
}

bool Connection::writable() const {
  const bool open = state_ == TcpState::kEstablished ||
                    state_ == TcpState::kCloseWait;
  return open && !fin_queued_ && sendq_.size() < options_.send_buffer;
}

size_t Connection::Write(std::span<const uint8_t> data) {
  if (!writable()) return 0;
  const size_t room = options_.send_buffer - sendq_.size();
  const size_t n = sendq_.Append(data, room, layer_.send_arena_);
  if (n > 0) MarkOutput();
  return n;
}

bool Connection::WriteView(buffer::PayloadView view) {
  if (!writable()) return false;
  sendq_.AppendView(std::move(view), layer_.send_arena_);
  MarkOutput();
  return true;
}

void Connection::ShutdownRead() {
  read_shutdown_ = true;
  rcvq_.DiscardReady();
  app_read_ = true;
  if (WindowUpdateDue()) MarkOutput();
}

void Connection::ShutdownWrite() {
  if (fin_queued_) return;
  switch (state_) {
    case TcpState::kEstablished:
      fin_queued_ = true;
      SetState(TcpState::kFinWait1);
      break;
    case TcpState::kCloseWait:
      fin_queued_ = true;
      SetState(TcpState::kLastAck);
      break;
    case TcpState::kSynReceived:
      // Sent once established (RFC 9293 3.10.4).
      fin_queued_ = true;
      break;
    default:
      return;
  }
  MarkOutput();
}

void Connection::Close(Instant now) {
  attached_ = false;
  switch (state_) {
    case TcpState::kClosed:
      return;
    case TcpState::kSynSent:
      SetState(TcpState::kClosed);
      return;
    default:
      break;
  }
  if (rcvq_.ready_bytes() > 0) {
    // RFC 2525 2.17 / Linux: closing with unread data resets.
    return Abort(now);
  }
  if (state_ == TcpState::kFinWait2 && fin_received_ == false) {
    layer_.timers_.Schedule(keepalive_timer_, now + 2 * options_.msl);
  }
  ShutdownWrite();
}

void Connection::Abort(Instant now) {
  attached_ = false;
  switch (state_) {
    case TcpState::kClosed:
    case TcpState::kSynSent:
      break;
    default:
      SendRst(now);
      break;
  }
  if (listener_ != nullptr) listener_->Forget(this);
  sendq_.Reset(snd_nxt_);
  sb_.Clear();
  error_ = transport::ConnectionAborted();
  if (state_ != TcpState::kClosed) SetState(TcpState::kClosed);
}

uint32_t Connection::Events() const {
  uint32_t e = 0;
  if (rcvq_.ready_bytes() > 0 || fin_received_ || !error_.ok() ||
      state_ == TcpState::kClosed) {
    e |= ev::kReadable;
  }
  if (writable() || !error_.ok()) e |= ev::kWritable;
  if (!error_.ok()) e |= ev::kError;
  if (state_ == TcpState::kClosed || (fin_received_ && fin_queued_)) {
    e |= ev::kHangup;
  }
  return e;
}

absl::Status Connection::TakeError() {
  absl::Status e = std::move(error_);
  error_ = absl::OkStatus();
  return e;
}

void Connection::SetNoDelay(bool on) {
  options_.nodelay = on;
  if (on) MarkOutput();
}

void Connection::SetCork(bool on) {
  options_.cork = on;
  if (!on) MarkOutput();
}

void Connection::SetKeepalive(bool on, Duration idle, Duration interval,
                              uint32_t probes) {
  options_.keepalive = on;
  options_.keepalive_idle = idle;
  options_.keepalive_interval = interval;
  options_.keepalive_probes = probes;
  if (state_ == TcpState::kEstablished || state_ == TcpState::kCloseWait) {
    ArmKeepalive(layer_.now_);
  }
}

TcpInfo Connection::Info() const {
  TcpInfo i = stats_;
  i.state = state_;
  i.mss = mss_;
  i.peer_mss = peer_mss_;
  i.snd_wscale = snd_wscale_;
  i.rcv_wscale = rcv_wscale_;
  i.sack = sack_ok_;
  i.timestamps = ts_ok_;
  i.rtt = rtt_.srtt();
  i.rttvar = rtt_.rttvar();
  i.min_rtt = rtt_.min_rtt();
  i.rto = rtt_.Rto();
  i.cwnd = cc_->cwnd();
  i.ssthresh = cc_->ssthresh();
  i.bytes_in_flight = sb_.InFlight(snd_una_, snd_nxt_);
  i.snd_wnd = snd_wnd_;
  i.rcv_wnd = Span(rcvq_.rcv_nxt(), rcv_adv_);
  i.rcv_buffer = rcv_buf_;
  i.sacked_bytes = sb_.sacked_bytes();
  i.lost_bytes = sb_.lost_bytes();
  i.reorder_window_mult = reo_wnd_mult_;
  return i;
}

const char* StateName(TcpState s) {
  switch (s) {
    case TcpState::kClosed: return "CLOSED";
    case TcpState::kListen: return "LISTEN";
    case TcpState::kSynSent: return "SYN_SENT";
    case TcpState::kSynReceived: return "SYN_RECEIVED";
    case TcpState::kEstablished: return "ESTABLISHED";
    case TcpState::kFinWait1: return "FIN_WAIT_1";
    case TcpState::kFinWait2: return "FIN_WAIT_2";
    case TcpState::kCloseWait: return "CLOSE_WAIT";
    case TcpState::kClosing: return "CLOSING";
    case TcpState::kLastAck: return "LAST_ACK";
    case TcpState::kTimeWait: return "TIME_WAIT";
  }
  return "?";
}

std::string TcpInfo::ToString() const {
  return absl::StrFormat(
      "state=%s mss=%u rtt=%.3fms rttvar=%.3fms min_rtt=%.3fms rto=%.0fms "
      "cwnd=%u ssthresh=%u in_flight=%u snd_wnd=%u rcv_wnd=%u rcv_buf=%u "
      "sent=%u retrans_bytes=%u acked=%u received=%u segs_out=%u segs_in=%u "
      "retransmits=%u fast_recoveries=%u timeouts=%u tlp=%u "
      "undone=%u idle_restarts=%u dupacks=%u dsacks=%u "
      "ooo=%u zwp=%u keepalives=%u acks=%u delayed_acks=%u "
      "delivery_rate=%.1fMbit/s",
      StateName(state), mss, absl::ToDoubleMilliseconds(rtt),
      absl::ToDoubleMilliseconds(rttvar),
      min_rtt == absl::InfiniteDuration() ? 0.0
                                          : absl::ToDoubleMilliseconds(min_rtt),
      absl::ToDoubleMilliseconds(rto), cwnd, ssthresh, bytes_in_flight,
      snd_wnd, rcv_wnd, rcv_buffer, bytes_sent, bytes_retransmitted,
      bytes_acked, bytes_received, segments_sent, segments_received,
      retransmits, fast_retransmits, timeouts, tail_loss_probes,
      spurious_recoveries, idle_restarts, dup_acks_received, dsacks_received, ooo_segments, zero_window_probes, keepalive_probes,
      acks_sent, delayed_acks, delivery_rate_bps / 1e6);
}

}  // namespace netstack::tcp
