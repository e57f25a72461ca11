#include "netstack/tcp/send_queue.h"

#include <algorithm>
#include <cstring>

namespace netstack::tcp {

size_t SendQueue::Append(std::span<const uint8_t> data, size_t limit,
                         buffer::ChunkArena& arena) {
  // A write shorter than this is not split across two chunks: it takes a
  // fresh one rather than the last few bytes of the current one.
  constexpr size_t kMinPiece = 1024;
  size_t taken = 0;
  const size_t want = std::min(data.size(), limit);
  while (taken < want) {
    const auto room = arena.Room(
        static_cast<uint32_t>(std::min(want - taken, kMinPiece)));
    if (room.empty()) break;
    const uint32_t n =
        static_cast<uint32_t>(std::min(want - taken, room.size()));
    std::memcpy(room.data(), data.data() + taken, n);
    const bool extend = !views_.empty() && arena.Continues(views_.back().view);
    buffer::PayloadView v = arena.Commit(n);
    if (extend) {
      Entry& last = views_.back();
      last.view = buffer::PayloadView(v.chunk(), last.view.offset(),
                                      last.view.size() + n);
    } else {
      views_.push_back(Entry{end(), std::move(v)});
    }
    taken += n;
    size_ += n;
  }
  return taken;
}

void SendQueue::AppendView(buffer::PayloadView view,
                           buffer::ChunkArena& arena) {
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
    const size_t n = Append(view.bytes(), view.size(), arena);
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
}

}  // namespace netstack::tcp
