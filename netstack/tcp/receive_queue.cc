#include "netstack/tcp/receive_queue.h"

#include <algorithm>
#include <cstring>

namespace netstack::tcp {

size_t ReceiveQueue::Insert(SeqNum seq, buffer::PayloadView data) {
  // Trim what we already have in order.
  if (seq < rcv_nxt_) {
    const uint32_t dup = Span(seq, rcv_nxt_);
    if (dup >= data.size()) return 0;
    data.TrimFront(dup);
    seq = rcv_nxt_;
  }
  if (data.empty()) return 0;
  if (seq != rcv_nxt_) {
    InsertOoo(seq, std::move(data));
    return 0;
  }
  size_t added = data.size();
  rcv_nxt_ += data.size();
  ready_bytes_ += data.size();
  ready_.push_back(std::move(data));
  // Pull what the hole was holding back.
  size_t i = 0;
  while (i < ooo_.size() && ooo_[i].start <= rcv_nxt_) {
    Ooo& o = ooo_[i];
    ooo_bytes_ -= o.view.size();
    if (o.end() > rcv_nxt_) {
      buffer::PayloadView v = o.view;
      v.TrimFront(Span(o.start, rcv_nxt_));
      rcv_nxt_ += v.size();
      ready_bytes_ += v.size();
      added += v.size();
      ready_.push_back(std::move(v));
    }
    ++i;
  }
  ooo_.erase(ooo_.begin(), ooo_.begin() + static_cast<ptrdiff_t>(i));
  return added;
}

void ReceiveQueue::InsertOoo(SeqNum seq, buffer::PayloadView data) {
  NoteRecent(seq);
  // Keep the bytes we already hold; insert only the gaps of [seq, end).
  SeqNum end = seq + data.size();
  auto it = std::lower_bound(
      ooo_.begin(), ooo_.end(), seq,
      [](const Ooo& o, SeqNum s) { return o.end() <= s; });
  // `it` is the first entry ending after seq.
  while (seq < end) {
    if (it == ooo_.end() || end <= it->start) {
      // No overlap left: one piece.
      const uint32_t len = Span(seq, end);
      buffer::PayloadView v = data;
      v.TrimFront(static_cast<uint32_t>(data.size() - len));
      ooo_bytes_ += len;
      ooo_.insert(it, Ooo{seq, std::move(v)});
      return;
    }
    if (seq < it->start) {
      // The piece before *it.
      const uint32_t len = Span(seq, it->start);
      buffer::PayloadView v =
          data.Subview(static_cast<uint32_t>(data.size() - Span(seq, end)),
                       len);
      ooo_bytes_ += len;
      it = ooo_.insert(it, Ooo{seq, std::move(v)});
      ++it;
    }
    // Skip what *it covers.
    seq = Max(seq, it->end());
    ++it;
  }
}

void ReceiveQueue::NoteRecent(SeqNum seq) {
  // Move-to-front list of recent starts.
  size_t i = 0;
  for (; i < recent_count_; ++i) {
    if (recent_[i] == seq) break;
  }
  if (i == recent_count_) {
    if (recent_count_ < recent_.size()) ++recent_count_;
    i = recent_count_ - 1;
  }
  for (; i > 0; --i) recent_[i] = recent_[i - 1];
  recent_[0] = seq;
}

SeqNum ReceiveQueue::ooo_end() const {
  return ooo_.empty() ? rcv_nxt_ : ooo_.back().end();
}

size_t ReceiveQueue::Read(std::span<uint8_t> out) {
  size_t n = 0;
  while (n < out.size() && !ready_.empty()) {
    buffer::PayloadView& v = ready_.front();
    const size_t take = std::min<size_t>(v.size(), out.size() - n);
    std::memcpy(out.data() + n, v.bytes().data(), take);
    n += take;
    if (take == v.size()) {
      ready_.pop_front();
    } else {
      v.TrimFront(static_cast<uint32_t>(take));
    }
  }
  ready_bytes_ -= n;
  return n;
}

size_t ReceiveQueue::ReadViews(std::span<buffer::PayloadView> out,
                               size_t max_bytes, size_t* views) {
  size_t n = 0;
  size_t k = 0;
  while (k < out.size() && n < max_bytes && !ready_.empty()) {
    buffer::PayloadView& v = ready_.front();
    const uint32_t take =
        static_cast<uint32_t>(std::min<size_t>(v.size(), max_bytes - n));
    out[k++] = v.Subview(0, take);
    n += take;
    if (take == v.size()) {
      ready_.pop_front();
    } else {
      v.TrimFront(take);
    }
  }
  ready_bytes_ -= n;
  *views = k;
  return n;
}

void ReceiveQueue::DiscardReady() {
  ready_.clear();
  ready_bytes_ = 0;
}

size_t ReceiveQueue::SackBlocks(std::span<wire::TcpSackBlock> out) const {
  if (ooo_.empty() || out.empty()) return 0;
  // Contiguous runs of ooo_, as [first index, last index].
  auto run_of = [&](SeqNum s, SeqNum* left, SeqNum* right) -> bool {
    auto it = std::lower_bound(
        ooo_.begin(), ooo_.end(), s,
        [](const Ooo& o, SeqNum x) { return o.end() <= x; });
    if (it == ooo_.end() || s < it->start) return false;
    auto lo = it;
    while (lo != ooo_.begin() && (lo - 1)->end() == lo->start) --lo;
    auto hi = it;
    while (hi + 1 != ooo_.end() && hi->end() == (hi + 1)->start) ++hi;
    *left = lo->start;
    *right = hi->end();
    return true;
  };
  size_t n = 0;
  auto add = [&](SeqNum l, SeqNum r) {
    for (size_t i = 0; i < n; ++i) {
      if (out[i].left == l.value()) return;
    }
    if (n < out.size()) out[n++] = wire::TcpSackBlock{l.value(), r.value()};
  };
  for (size_t i = 0; i < recent_count_ && n < out.size(); ++i) {
    SeqNum l;
    SeqNum r;
    if (run_of(recent_[i], &l, &r)) add(l, r);
  }
  // Then the others, highest first.
  for (size_t i = ooo_.size(); i > 0 && n < out.size(); --i) {
    SeqNum l;
    SeqNum r;
    if (run_of(ooo_[i - 1].start, &l, &r)) add(l, r);
  }
  return n;
}

}  // namespace netstack::tcp
