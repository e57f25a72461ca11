#include "netstack/tcp/receive_queue.h"

#include <algorithm>
#include <cstring>

namespace netstack::tcp {

namespace {
// A view is worth copying when a compact copy would cost at most half its
// charge (Linux tcp_collapse skips skbs whose truesize is already tight).
bool Wasteful(size_t charge, uint32_t len) { return charge >= 2 * size_t{len}; }
}  // namespace

ReceiveQueue::~ReceiveQueue() {
  Reset(rcv_nxt_);
  free_pieces_.clear_and_dispose([](Piece* p) { delete p; });
  for (Run* r : free_runs_) delete r;
}

void ReceiveQueue::Reset(SeqNum rcv_nxt) {
  while (!ready_.empty()) FreePiece(&ready_.front());
  while (!runs_.empty()) {
    Run& r = *runs_.begin();
    while (!r.pieces.empty()) FreePiece(&r.pieces.front());
    FreeRun(&r);
  }
  ready_bytes_ = 0;
  ooo_bytes_ = 0;
  rcv_nxt_ = rcv_nxt;
  recent_set_ = false;
  rotate_after_ = rcv_nxt;
  compact_last_ = nullptr;
}

// --- nodes ---

ReceiveQueue::Piece* ReceiveQueue::NewPiece(SeqNum seq,
                                            buffer::PayloadView view,
                                            uint32_t slot) {
  Piece* p;
  if (!free_pieces_.empty()) {
    p = &free_pieces_.front();
    p->hook.unlink();
  } else {
    p = new Piece;
  }
  p->seq = seq;
  p->slot = slot;
  p->view = std::move(view);
  charge_ += p->Charge();
  if (slot > 0 && Wasteful(p->Charge(), p->view.size())) {
    wasteful_.push_back(*p);
  } else if (slot == 0 && p->view.size() < kViewOverhead) {
    // Tiny views merge when copied next to their neighbour.
    wasteful_.push_back(*p);
  }
  return p;
}

void ReceiveQueue::FreePiece(Piece* p) {
  charge_ -= p->Charge();
  p->hook.unlink();
  p->waste.unlink();
  p->view = buffer::PayloadView();
  if (p == compact_last_) compact_last_ = nullptr;
  free_pieces_.push_back(*p);
}

ReceiveQueue::Run* ReceiveQueue::NewRun(SeqNum start) {
  Run* r;
  if (!free_runs_.empty()) {
    r = free_runs_.back();
    free_runs_.pop_back();
  } else {
    r = new Run;
  }
  r->start = start;
  r->end = start;
  return r;
}

void ReceiveQueue::FreeRun(Run* r) {
  NETSTACK_DCHECK(r->pieces.empty());
  runs_.erase(runs_.iterator_to(*r));
  free_runs_.push_back(r);
}

// --- insertion ---

ReceiveQueue::InsertResult ReceiveQueue::Insert(SeqNum seq,
                                                buffer::PayloadView data) {
  InsertResult res;
  // Trim what we already have in order.
  if (seq < rcv_nxt_) {
    const uint32_t dup = Span(seq, rcv_nxt_);
    res.duplicate = true;
    res.dup = wire::TcpSackBlock{
        seq.value(), (seq + std::min<uint32_t>(dup, data.size())).value()};
    if (dup >= data.size()) return res;
    data.TrimFront(dup);
    seq = rcv_nxt_;
  }
  if (data.empty()) return res;
  uint32_t slot = data.chunk() ? data.chunk()->slot_size() : 0;
  if (seq != rcv_nxt_ && arena_ != nullptr && slot > 0 &&
      Wasteful(size_t{slot} + kViewOverhead, data.size())) {
    // Out of order, a few bytes in a big receive slot (a TAP with host
    // GSO receives every frame into a whole chunk): it may wait for the
    // hole for a while, so hold a compact copy in the shared arena and
    // let the slot go at once. Across thousands of flows, each with a
    // segment beyond a hole, that is the difference between a few chunks
    // and a chunk per flow. Loss recovery, not the fast path.
    (void)Compact(data, slot);
  }
  if (!MakeRoom(seq, data, slot, &res)) {
    res.dropped = true;
    return res;
  }
  if (seq != rcv_nxt_) {
    recent_ = seq;
    recent_set_ = true;
    InsertIntoRuns(seq, data, slot, &res);
    return res;
  }
  // In order. The fast path: nothing held beyond it.
  const SeqNum end = seq + data.size();
  if (runs_.empty() || end < runs_.begin()->start) {
    res.filled_hole = !runs_.empty();
    ready_.push_back(*NewPiece(seq, std::move(data), slot));
    res.readable = Span(seq, end);
    ready_bytes_ += res.readable;
    rcv_nxt_ = end;
    return res;
  }
  InsertIntoRuns(seq, data, slot, &res);
  res.readable = PullReady();
  res.new_run = false;
  res.filled_hole = true;
  return res;
}

void ReceiveQueue::InsertIntoRuns(SeqNum seq, const buffer::PayloadView& data,
                                  uint32_t slot, InsertResult* res) {
  const SeqNum end = seq + data.size();
  // The first run that touches [seq, end): it ends at or after seq.
  auto it = runs_.upper_bound(seq, RunLess());
  if (it != runs_.begin() && std::prev(it)->end >= seq) --it;
  const bool below_held = !runs_.empty() && seq < runs_.rbegin()->end;
  Run* into = nullptr;  // the run everything merges into
  SeqNum cur = seq;
  bool slot_charged = false;  // the slot is charged to one piece only
  auto add_piece = [&](SeqNum from, SeqNum to, PieceList& list,
                       PieceList::iterator before) {
    const uint32_t off = Span(seq, from);
    Piece* p = NewPiece(from, data.Subview(off, Span(from, to)),
                        slot_charged ? 0 : slot);
    slot_charged = true;
    list.insert(before, *p);
    ooo_bytes_ += p->view.size();
  };
  while (cur < end) {
    if (it == runs_.end() || end < it->start) {
      // Nothing held in [cur, end): the rest goes at the end of `into`,
      // or becomes a new run.
      if (into == nullptr) {
        into = NewRun(cur);
        runs_.insert(it, *into);
        res->new_run = true;
      }
      add_piece(cur, end, into->pieces, into->pieces.end());
      into->end = end;
      break;
    }
    Run& r = *it;
    const SeqNum overlap_from = Max(cur, r.start);
    const SeqNum overlap_to = Min(end, r.end);
    if (overlap_from < overlap_to && !res->duplicate) {
      res->duplicate = true;
      res->dup = wire::TcpSackBlock{overlap_from.value(), overlap_to.value()};
    }
    if (cur < r.start) {
      // The gap before r: a piece in front of r's pieces. r's start moves
      // down, which keeps the tree's order (the previous run ends before
      // cur, else it would have been `into`).
      add_piece(cur, r.start, r.pieces, r.pieces.begin());
      r.start = cur;
      res->filled_hole = true;
    }
    if (into != nullptr) {
      // r touches `into`: merge r into it.
      into->pieces.splice(into->pieces.end(), r.pieces);
      into->end = r.end;
      ++it;
      FreeRun(&r);
      res->filled_hole = true;
    } else {
      into = &r;
      ++it;
    }
    cur = Max(cur, into->end);
  }
  if (below_held && !res->new_run) res->filled_hole = true;
}

size_t ReceiveQueue::PullReady() {
  if (runs_.empty() || runs_.begin()->start != rcv_nxt_) return 0;
  Run& r = *runs_.begin();
  const size_t n = Span(r.start, r.end);
  ready_.splice(ready_.end(), r.pieces);
  ooo_bytes_ -= n;
  ready_bytes_ += n;
  rcv_nxt_ = r.end;
  FreeRun(&r);
  if (runs_.empty()) rotate_after_ = rcv_nxt_;
  return n;
}

SeqNum ReceiveQueue::ooo_end() const {
  return runs_.empty() ? rcv_nxt_ : runs_.rbegin()->end;
}

// --- memory ---

size_t ReceiveQueue::Limit() const {
  if (limit_ == 0) return SIZE_MAX;
  // Pressure mode (like Linux's tcp_mem pressure): once the shared pool
  // passes seven eighths of its chunks, every flow keeps half its usual
  // share, so that one flow cannot take the last chunks from the others.
  if (pool_ != nullptr &&
      pool_->stats().in_use * 8 >= pool_->max_chunks() * 7) {
    return limit_ / 2;
  }
  return limit_;
}

bool ReceiveQueue::MakeRoom(SeqNum seq, buffer::PayloadView& data,
                            uint32_t& slot, InsertResult* res) {
  const uint32_t len = data.size();
  size_t charge = std::max<size_t>(len, slot) + kViewOverhead;
  if (!OverLimit(charge)) return true;
  Collapse();
  if (!OverLimit(charge)) return true;
  // The segment itself is wasteful: hold a compact copy of it instead.
  if (arena_ != nullptr && Wasteful(charge, len) && Compact(data, slot)) {
    charge = size_t{len} + kViewOverhead;
    if (!OverLimit(charge)) return true;
  }
  res->pruned = PruneAbove(seq, charge);
  return !OverLimit(charge);
}

bool ReceiveQueue::Compact(buffer::PayloadView& data, uint32_t& slot) {
  const uint32_t n = data.size();
  if (arena_ == nullptr || n == 0 || n > buffer::kChunkSize) return false;
  const auto room = arena_->Room(n);
  if (room.empty()) return false;
  std::memcpy(room.data(), data.bytes().data(), n);
  data = arena_->Commit(n);
  slot = 0;
  ++collapsed_;
  return true;
}

void ReceiveQueue::Collapse() {
  while (!wasteful_.empty()) {
    Piece& p = wasteful_.front();
    p.waste.unlink();
    const uint32_t n = p.view.size();
    const auto room =
        arena_ != nullptr ? arena_->Room(n) : std::span<uint8_t>();
    if (room.empty()) {
      wasteful_.push_front(p);  // no chunk: prune instead, retry later
      return;
    }
    Piece* q = compact_last_;
    const bool extend =
        q != nullptr && q->end() == p.seq && arena_->Continues(q->view);
    std::memcpy(room.data(), p.view.bytes().data(), n);
    buffer::PayloadView copy = arena_->Commit(n);
    ++collapsed_;
    if (extend) {
      // The data just before p is the last compact copy: extend that
      // view, so contiguous data becomes one view. Equal sequence
      // numbers mean the same list (runs are maximal, and the ready list
      // ends at rcv_nxt, below every run).
      charge_ += n;
      q->view = buffer::PayloadView(q->view.chunk(), q->view.offset(),
                                    q->view.size() + n);
      FreePiece(&p);
      continue;
    }
    charge_ -= p.Charge();
    p.view = std::move(copy);
    p.slot = 0;
    charge_ += p.Charge();
    compact_last_ = &p;
  }
}

uint32_t ReceiveQueue::PruneAbove(SeqNum seq, size_t extra) {
  uint32_t pruned = 0;
  while (OverLimit(extra) && !runs_.empty()) {
    Run& top = *runs_.rbegin();
    Piece& p = top.pieces.back();
    // If the new segment would land last, keep what is below it (Linux).
    if (seq > p.seq) break;
    ooo_bytes_ -= p.view.size();
    top.end = p.seq;
    FreePiece(&p);
    ++pruned;
    if (top.pieces.empty()) FreeRun(&top);
  }
  if (recent_set_ && (runs_.empty() || recent_ >= ooo_end())) {
    recent_set_ = false;
  }
  return pruned;
}

// --- reading ---

size_t ReceiveQueue::Read(std::span<uint8_t> out) {
  size_t n = 0;
  while (n < out.size() && !ready_.empty()) {
    Piece& p = ready_.front();
    const size_t take = std::min<size_t>(p.view.size(), out.size() - n);
    std::memcpy(out.data() + n, p.view.bytes().data(), take);
    n += take;
    if (take == p.view.size()) {
      FreePiece(&p);
    } else {
      charge_ -= p.Charge();
      p.view.TrimFront(static_cast<uint32_t>(take));
      p.seq += static_cast<uint32_t>(take);
      charge_ += p.Charge();
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
    Piece& p = ready_.front();
    const uint32_t take =
        static_cast<uint32_t>(std::min<size_t>(p.view.size(), max_bytes - n));
    out[k++] = p.view.Subview(0, take);
    n += take;
    if (take == p.view.size()) {
      FreePiece(&p);
    } else {
      charge_ -= p.Charge();
      p.view.TrimFront(take);
      p.seq += take;
      charge_ += p.Charge();
    }
  }
  ready_bytes_ -= n;
  *views = k;
  return n;
}

void ReceiveQueue::DiscardReady() {
  while (!ready_.empty()) FreePiece(&ready_.front());
  ready_bytes_ = 0;
}

// --- SACK ---

size_t ReceiveQueue::SackBlocks(std::span<wire::TcpSackBlock> out) {
  if (runs_.empty() || out.empty()) return 0;
  size_t n = 0;
  auto put = [&](const Run& r) {
    out[n++] = wire::TcpSackBlock{r.start.value(), r.end.value()};
  };
  // RFC 2018 section 4: the first block MUST hold the most recent segment.
  const Run* recent = nullptr;
  if (recent_set_) {
    auto it = runs_.upper_bound(recent_, RunLess());
    if (it != runs_.begin() && recent_ < std::prev(it)->end) {
      recent = &*std::prev(it);
      put(*recent);
    }
  }
  // Then the run next to rcv_nxt: the hole the sender must fill first.
  const Run* lowest = &*runs_.begin();
  if (lowest != recent && n < out.size()) put(*lowest);
  // Then the others in turn (RFC 2018 section 4 asks each block to be
  // repeated in several ACKs): those after the last one rotated out.
  if (rotate_after_ < rcv_nxt_) rotate_after_ = rcv_nxt_;
  auto it = runs_.upper_bound(rotate_after_, RunLess());
  for (size_t steps = 0; n < out.size() && steps < runs_.size(); ++steps) {
    if (it == runs_.end()) it = runs_.begin();
    if (&*it != recent && &*it != lowest) {
      put(*it);
      rotate_after_ = it->start;
    }
    ++it;
  }
  return n;
}

}  // namespace netstack::tcp
