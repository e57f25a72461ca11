// The send buffer: application bytes from the oldest unacknowledged one
// to the last one written, as payload views addressed by sequence number.
// Segments (and their retransmissions) take sub-views of it, so payload is
// never copied after the application's Write, and never at all for
// WriteView.
#ifndef NETSTACK_TCP_SEND_QUEUE_H_
#define NETSTACK_TCP_SEND_QUEUE_H_

#include <cstddef>
#include <cstdint>
#include <span>

#include "netstack/base/ring.h"
#include "netstack/buffer/chunk.h"
#include "netstack/buffer/chunk_arena.h"
#include "netstack/buffer/payload_view.h"
#include "netstack/tcp/seqnum.h"

namespace netstack::tcp {

class SendQueue {
 public:
  // `head` is the sequence number of the first byte (ISS + 1).
  void Reset(SeqNum head) {
    views_.clear();
    views_.shrink_to_fit();
    head_ = head;
    size_ = 0;
  }

  SeqNum head() const { return head_; }
  SeqNum end() const { return head_ + static_cast<uint32_t>(size_); }
  size_t size() const { return size_; }

  // Copies up to `limit` bytes of `data` into the layer's shared arena
  // (chunk_arena.h: a connection with a few unacknowledged bytes does not
  // pin a chunk of its own). Consecutive writes that land next to each
  // other become one view. Returns the bytes taken (less when the arena's
  // pool refuses: only its receive reserve is left).
  size_t Append(std::span<const uint8_t> data, size_t limit,
                buffer::ChunkArena& arena);
  // Appends a view as is (zero copy). A view that continues the last one
  // in the same chunk extends it. A small view (at most kCoalesceMax
  // bytes) is copied into the arena instead, when it has room: a packet
  // holds at most 16 views, and a one-byte view would pin a whole chunk
  // for as long as it is unacknowledged.
  void AppendView(buffer::PayloadView view, buffer::ChunkArena& arena);
  static constexpr uint32_t kCoalesceMax = 512;

  // Views covering [seq, seq + len), at most out.size() of them; returns
  // how many were written and sets *bytes to the bytes they cover (less
  // than len only if out.size() views were not enough).
  size_t Gather(SeqNum seq, uint32_t len, std::span<buffer::PayloadView> out,
                uint32_t* bytes) const;

  // Drops bytes before `seq` (acknowledged).
  void ReleaseTo(SeqNum seq);

 private:
  struct Entry {
    SeqNum start;
    buffer::PayloadView view;
  };
  // Index of the entry containing `seq`.
  size_t Find(SeqNum seq) const;

  Ring<Entry> views_;
  SeqNum head_;
  size_t size_ = 0;
};

}  // namespace netstack::tcp

#endif  // NETSTACK_TCP_SEND_QUEUE_H_
