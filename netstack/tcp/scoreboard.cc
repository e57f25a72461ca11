#include "netstack/tcp/scoreboard.h"

#include <algorithm>

namespace netstack::tcp {

void Scoreboard::Clear() {
  recs_.clear();
  recs_.shrink_to_fit();
  sacked_ = lost_ = lost_retx_ = 0;
  fack_set_ = false;
  rack_xmit_ = absl::InfinitePast();
  rack_rtt_ = absl::ZeroDuration();
  next_lost_from_set_ = false;
}

void Scoreboard::OnSend(SeqNum start, SeqNum end, Instant now, bool fin) {
  recs_.push_back(TxRecord{start, end, now, false, false, false, false, fin});
}

void Scoreboard::OnRetransmit(size_t i, Instant now) {
  TxRecord& r = recs_[i];
  r.xmit_time = now;
  r.retransmitted = true;
  if (r.lost && !r.lost_retransmitted) {
    r.lost_retransmitted = true;
    lost_retx_ += r.len();
  }
}

size_t Scoreboard::Find(SeqNum seq) const {
  size_t lo = 0;
  size_t hi = recs_.size();
  while (hi - lo > 1) {
    const size_t mid = (lo + hi) / 2;
    if (recs_[mid].start <= seq) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return lo;
}

void Scoreboard::Split(size_t i, SeqNum at) {
  TxRecord& r = recs_[i];
  if (at <= r.start || at >= r.end) return;
  TxRecord tail = r;
  tail.start = at;
  r.end = at;
  r.fin = false;
  recs_.insert(i + 1, tail);
}

void Scoreboard::SetLost(TxRecord& r) {
  if (r.lost) {
    if (r.lost_retransmitted) {
      // Lost again after the resend: count it for resending once more.
      r.lost_retransmitted = false;
      lost_retx_ -= r.len();
      if (next_lost_from_set_ && r.start < next_lost_from_) {
        next_lost_from_ = r.start;
      }
    }
    return;
  }
  r.lost = true;
  r.lost_retransmitted = false;
  lost_ += r.len();
  if (next_lost_from_set_ && r.start < next_lost_from_) {
    next_lost_from_ = r.start;
  }
}

void Scoreboard::Deliver(const TxRecord& r, Instant now, Duration min_rtt,
                         bool prior_set, SeqNum prior_fack, AckResult& res) {
  if (!fack_set_ || r.end > fack_) {
    fack_ = r.end;
    fack_set_ = true;
  }
  if (prior_set && r.end <= prior_fack && !r.retransmitted) {
    // An original transmission delivered below data already delivered:
    // the network reordered (RFC 8985 6.2 step 3).
    reordering_seen_ = true;
    res.reordering = true;
  }
  if (r.retransmitted) res.retransmitted_delivered = true;
  if (r.retransmitted && now - r.xmit_time < min_rtt) return;
  if (!r.retransmitted && r.xmit_time > res.rtt_xmit) res.rtt_xmit = r.xmit_time;
  rack_rtt_ = now - r.xmit_time;
  if (r.xmit_time > rack_xmit_ ||
      (r.xmit_time == rack_xmit_ && r.end > rack_end_)) {
    rack_xmit_ = r.xmit_time;
    rack_end_ = r.end;
  }
}

AckResult Scoreboard::OnAck(SeqNum ack,
                            std::span<const wire::TcpSackBlock> sacks,
                            Instant now, Duration min_rtt) {
  AckResult res;
  const bool prior_set = fack_set_;
  const SeqNum prior_fack = fack_;
  // SACK blocks first, so a record both SACKed and acked counts once.
  for (const wire::TcpSackBlock& b : sacks) {
    const SeqNum left(b.left);
    const SeqNum right(b.right);
    if (recs_.empty() || right <= left) continue;
    if (right <= recs_.front().start || left >= recs_.back().end) continue;
    const SeqNum l = Max(left, recs_.front().start);
    const SeqNum r = Min(right, recs_.back().end);
    size_t i = Find(l);
    Split(i, l);
    if (recs_[i].start < l) ++i;
    for (; i < recs_.size() && recs_[i].start < r; ++i) {
      Split(i, r);
      TxRecord& rec = recs_[i];
      if (rec.sacked) continue;
      rec.sacked = true;
      sacked_ += rec.len();
      if (rec.lost) {
        lost_ -= rec.len();
        if (rec.lost_retransmitted) lost_retx_ -= rec.len();
      }
      res.newly_sacked += rec.len();
      res.delivered += rec.len();
      Deliver(rec, now, min_rtt, prior_set, prior_fack, res);
    }
  }
  while (!recs_.empty() && recs_.front().start < ack) {
    TxRecord& rec = recs_.front();
    if (rec.end > ack) {
      // Partly acked (a peer acking inside a segment): keep the rest.
      const uint32_t n = Span(rec.start, ack);
      res.acked_bytes += n;
      if (rec.sacked) {
        sacked_ -= n;
      } else {
        res.delivered += n;
        if (rec.lost) {
          lost_ -= n;
          if (rec.lost_retransmitted) lost_retx_ -= n;
        }
      }
      rec.start = ack;
      break;
    }
    res.acked_bytes += rec.len();
    if (rec.fin) res.fin_acked = true;
    if (rec.sacked) {
      sacked_ -= rec.len();
    } else {
      res.delivered += rec.len();
      if (rec.lost) {
        lost_ -= rec.len();
        if (rec.lost_retransmitted) lost_retx_ -= rec.len();
      }
      Deliver(rec, now, min_rtt, prior_set, prior_fack, res);
    }
    recs_.pop_front();
  }
  return res;
}

uint64_t Scoreboard::MarkLostBySack(uint64_t dupthresh_bytes) {
  if (sacked_ < dupthresh_bytes) return 0;
  // Walk from the top, summing SACKed bytes above each record.
  uint64_t above = 0;
  uint64_t marked = 0;
  for (size_t i = recs_.size(); i > 0; --i) {
    TxRecord& r = recs_[i - 1];
    if (r.sacked) {
      above += r.len();
      continue;
    }
    if (above >= dupthresh_bytes && !r.lost) {
      SetLost(r);
      marked += r.len();
    }
  }
  return marked;
}

uint64_t Scoreboard::RackDetectLoss(Instant now, Duration reo_wnd,
                                    Instant* timeout) {
  *timeout = kNever;
  if (rack_xmit_ == absl::InfinitePast()) return 0;
  uint64_t marked = 0;
  for (size_t i = 0; i < recs_.size(); ++i) {
    TxRecord& r = recs_[i];
    if (r.sacked) continue;
    const bool sent_before = r.xmit_time < rack_xmit_ ||
                             (r.xmit_time == rack_xmit_ && r.end < rack_end_);
    if (!sent_before) {
      // Original transmissions are in send order: none after this one
      // can have been sent before the reference.
      if (!r.retransmitted) break;
      continue;
    }
    if (r.lost && !r.lost_retransmitted) continue;
    const Instant deadline = r.xmit_time + rack_rtt_ + reo_wnd;
    if (deadline <= now) {
      SetLost(r);
      marked += r.len();
    } else {
      *timeout = std::min(*timeout, deadline);
    }
  }
  return marked;
}

uint64_t Scoreboard::MarkFirstLost() {
  for (size_t i = 0; i < recs_.size(); ++i) {
    TxRecord& r = recs_[i];
    if (r.sacked) continue;
    if (r.lost && r.lost_retransmitted) return 0;
    if (r.lost) return 0;
    SetLost(r);
    return r.len();
  }
  return 0;
}

bool Scoreboard::ForgetSacksIfReneged() {
  if (recs_.empty() || !recs_.front().sacked) return false;
  for (size_t i = 0; i < recs_.size(); ++i) {
    TxRecord& r = recs_[i];
    if (!r.sacked) continue;
    // A SACKed record's lost marks were taken out of lost_ and lost_retx_
    // when it was SACKed: clear them, so MarkAllLost counts it afresh.
    r.sacked = false;
    r.lost = false;
    r.lost_retransmitted = false;
  }
  sacked_ = 0;
  next_lost_from_set_ = false;
  return true;
}

uint64_t Scoreboard::MarkAllLost() {
  uint64_t marked = 0;
  for (size_t i = 0; i < recs_.size(); ++i) {
    TxRecord& r = recs_[i];
    if (r.sacked) continue;
    SetLost(r);
    marked += r.len();
  }
  return marked;
}

void Scoreboard::ClearLost() {
  for (size_t i = 0; i < recs_.size(); ++i) {
    recs_[i].lost = false;
    recs_[i].lost_retransmitted = false;
  }
  lost_ = 0;
  lost_retx_ = 0;
}

size_t Scoreboard::NextLost() const {
  if (lost_ == lost_retx_) return recs_.size();  // nothing left to resend
  // Records below the cursor were not waiting when it was set, and only
  // SetLost makes a record wait (it moves the cursor back). Records are
  // contiguous in sequence order, so Find locates the cursor's record.
  size_t i = 0;
  if (next_lost_from_set_ && !recs_.empty() &&
      next_lost_from_ > recs_.front().start) {
    i = Find(next_lost_from_);
  }
  for (; i < recs_.size(); ++i) {
    const TxRecord& r = recs_[i];
    if (r.lost && !r.lost_retransmitted && !r.sacked) {
      next_lost_from_ = r.start;
      next_lost_from_set_ = true;
      return i;
    }
  }
  return recs_.size();
}

}  // namespace netstack::tcp
