#include "netstack/tcp/send_queue.h"

#include <algorithm>
#include <cstring>

namespace netstack::tcp {

size_t SendQueue::Append(std::span<const uint8_t> data, size_t limit,
                         buffer::ChunkPool& pool) {
  size_t taken = 0;
  const size_t want = std::min(data.size(), limit);
  while (taken < want) {
    if (!tail_chunk_ || tail_used_ == buffer::kChunkSize) {
      tail_chunk_ = pool.Allocate();
      tail_used_ = 0;
      if (!tail_chunk_) break;
    }
    const uint32_t n = static_cast<uint32_t>(
        std::min<size_t>(want - taken, buffer::kChunkSize - tail_used_));
    std::memcpy(tail_chunk_->unshared_tail(tail_used_).data(),
                data.data() + taken, n);
    // Extend the last view when it ends where this write starts.
    if (!views_.empty()) {
      Entry& last = views_.back();
      if (last.view.chunk().get() == tail_chunk_.get() &&
          last.view.offset() + last.view.size() == tail_used_) {
        last.view = buffer::PayloadView(tail_chunk_, last.view.offset(),
                                        last.view.size() + n);
        tail_used_ += n;
        taken += n;
        size_ += n;
        continue;
      }
    }
    views_.push_back(Entry{end(), buffer::PayloadView(tail_chunk_, tail_used_,
                                                      n)});
    tail_used_ += n;
    taken += n;
    size_ += n;
  }
  return taken;
}

void SendQueue::AppendView(buffer::PayloadView view,
                           buffer::ChunkPool& pool) {
  if (view.empty()) return;
  if (!views_.empty()) {
    Entry& last = views_.back();
    if (last.view.chunk().get() == view.chunk().get() &&
        last.view.offset() + last.view.size() == view.offset()) {
      // The next bytes of the same chunk (a relay passing on what it
      // read in one go): one view, no copy.
      last.view = buffer::PayloadView(last.view.chunk(), last.view.offset(),
                                      last.view.size() + view.size());
      size_ += view.size();
      return;
    }
  }
  if (view.size() <= kCoalesceMax) {
    const size_t n = Append(view.bytes(), view.size(), pool);
    if (n == view.size()) return;
    // The pool ran dry part-way: keep the rest as a view.
    view.TrimFront(static_cast<uint32_t>(n));
  }
  const SeqNum start = end();
  size_ += view.size();
  views_.push_back(Entry{start, std::move(view)});
}

size_t SendQueue::Find(SeqNum seq) const {
  // Binary search on start: entries are in sequence order.
  size_t lo = 0;
  size_t hi = views_.size();
  while (hi - lo > 1) {
    const size_t mid = (lo + hi) / 2;
    if (views_[mid].start <= seq) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return lo;
}

size_t SendQueue::Gather(SeqNum seq, uint32_t len,
                         std::span<buffer::PayloadView> out,
                         uint32_t* bytes) const {
  *bytes = 0;
  if (len == 0 || views_.empty() || seq < head_ || seq >= end()) return 0;
  len = std::min<uint32_t>(len, Span(seq, end()));
  size_t n = 0;
  for (size_t i = Find(seq); i < views_.size() && *bytes < len && n < out.size();
       ++i) {
    const Entry& e = views_[i];
    const uint32_t skip = Span(e.start, seq + *bytes);
    const uint32_t take = std::min(e.view.size() - skip, len - *bytes);
    out[n++] = e.view.Subview(skip, take);
    *bytes += take;
  }
  return n;
}

void SendQueue::ReleaseTo(SeqNum seq) {
  while (!views_.empty() && seq > head_) {
    Entry& e = views_.front();
    const uint32_t drop = std::min(Span(head_, seq), e.view.size());
    if (drop == e.view.size()) {
      head_ += drop;
      size_ -= drop;
      views_.pop_front();
      continue;
    }
    e.view.TrimFront(drop);
    e.start += drop;
    head_ += drop;
    size_ -= drop;
    break;
  }
  if (views_.empty() && seq > head_) head_ = seq;  // the FIN
  if (views_.empty()) {
    // Everything is acknowledged: an idle connection pins no chunk (a
    // gateway holds thousands of them). The next small write takes a
    // fresh one.
    tail_chunk_ = buffer::ChunkRef();
    tail_used_ = 0;
  }
}

}  // namespace netstack::tcp
