// Payload chunks: fixed 64 KiB blocks, refcounted, recycled by a pool.
//
// A chunk holds payload bytes: a received frame, or the data of a TCP send
// queue that one super-segment (up to 64 KiB) and all its retransmissions
// refer to. Views (payload_view.h) share a chunk without copying its bytes.
//
// Threading: a pool and its chunks belong to one event loop (one stack
// instance is single-threaded, docs/ARCHITECTURE.md), so the refcount is a
// plain integer, not an atomic.
#ifndef NETSTACK_BUFFER_CHUNK_H_
#define NETSTACK_BUFFER_CHUNK_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>

#include "boost/intrusive/slist.hpp"
#include "netstack/base/dcheck.h"

namespace netstack::buffer {

// Large enough for one 64 KiB super-segment's payload, or one GRO'd frame.
inline constexpr size_t kChunkSize = 64 * 1024;

class ChunkPool;
class ChunkRef;

class Chunk {
 public:
  Chunk(const Chunk&) = delete;
  Chunk& operator=(const Chunk&) = delete;

  std::span<const uint8_t> data() const { return data_; }
  // Writing is for the owner that filled a fresh chunk; once views are
  // shared, the bytes are immutable by convention (checked in debug).
  std::span<uint8_t> mutable_data() {
    NETSTACK_DCHECK(refs_ == 1);
    return data_;
  }
  // Append-only writing for a chunk whose front is already shared: the
  // caller guarantees that no view covers [from, kChunkSize) (a send queue
  // filling the tail of its last chunk does). Not checkable; use sparingly.
  std::span<uint8_t> unshared_tail(size_t from) {
    NETSTACK_DCHECK(from <= kChunkSize);
    return std::span<uint8_t>(data_).subspan(from);
  }
  uint32_t refs() const { return refs_; }

  // The receive slot this chunk was carved into by a link (RxSlots), in
  // bytes, or 0 when nobody said (a chunk filled densely, or by our own
  // code). Each view of a slotted chunk pins at least a whole slot, which
  // is what a TCP receive queue charges for it (like Linux's skb
  // truesize; docs/TCP.md "Receive memory"). Set by the owner of a fresh
  // chunk; reset when the chunk returns to its pool.
  uint32_t slot_size() const { return slot_size_; }
  void set_slot_size(uint32_t bytes) {
    NETSTACK_DCHECK(bytes <= kChunkSize);
    slot_size_ = bytes;
  }

 private:
  friend class ChunkPool;
  friend class ChunkRef;
  explicit Chunk(ChunkPool* pool) : pool_(pool) {}

  boost::intrusive::slist_member_hook<> free_hook_;
  ChunkPool* const pool_;
  uint32_t refs_ = 0;
  uint32_t slot_size_ = 0;
  alignas(64) uint8_t data_[kChunkSize];
};

// A counted reference to a chunk; copying shares it. An empty ChunkRef
// (from an exhausted pool) converts to false.
class ChunkRef {
 public:
  ChunkRef() = default;
  ChunkRef(const ChunkRef& o) : chunk_(o.chunk_) { Acquire(); }
  ChunkRef(ChunkRef&& o) noexcept : chunk_(std::exchange(o.chunk_, nullptr)) {}
  ChunkRef& operator=(const ChunkRef& o) {
    if (this != &o) {
      ChunkRef copy(o);
      std::swap(chunk_, copy.chunk_);
    }
    return *this;
  }
  ChunkRef& operator=(ChunkRef&& o) noexcept {
    if (this != &o) {
      Reset();
      chunk_ = std::exchange(o.chunk_, nullptr);
    }
    return *this;
  }
  ~ChunkRef() { Reset(); }

  explicit operator bool() const { return chunk_ != nullptr; }
  Chunk* get() const { return chunk_; }
  Chunk* operator->() const { return chunk_; }
  Chunk& operator*() const { return *chunk_; }
  void Reset();

 private:
  friend class ChunkPool;
  explicit ChunkRef(Chunk* c) : chunk_(c) { Acquire(); }
  void Acquire() {
    if (chunk_ != nullptr) ++chunk_->refs_;
  }

  Chunk* chunk_ = nullptr;
};

// Hands out chunks and takes them back when their last reference goes.
// Memory is bounded: at most `max_chunks` exist at once. A chunk is
// allocated from the heap the first time the free list is empty and then
// recycled, so a warmed-up pool does not allocate.
//
// The receive reserve: bytes queued for a peer (a TCP send queue, a
// relay's host-to-guest data) are freed only when the peer acknowledges
// them, and the acknowledgement needs a chunk to be received into. If
// queued data could take the last chunk, a link would drop the very
// frames that free the pool: a deadlock that only a timeout ends. So
// AllocateForQueue refuses while no more than `receive_reserve` chunks are
// left, and those stay for Allocate (links, the stack's own replies).
// The default reserve is an eighth of the pool.
class ChunkPool {
 public:
  struct Stats {
    size_t in_use = 0;     // referenced right now
    size_t free = 0;       // on the free list
    size_t created = 0;    // heap allocations ever made
    uint64_t allocations = 0;  // successful Allocate() calls
    uint64_t exhausted = 0;    // Allocate() calls refused at the limit
    // AllocateForQueue() calls refused because only the reserve was left.
    uint64_t queue_refused = 0;
  };

  explicit ChunkPool(size_t max_chunks);
  ChunkPool(const ChunkPool&) = delete;
  ChunkPool& operator=(const ChunkPool&) = delete;
  // Every chunk must have been released (DCHECK).
  ~ChunkPool();

  // A fresh chunk with one reference, or an empty ref at the limit.
  [[nodiscard]] ChunkRef Allocate();
  // The same for bytes that will wait for a peer's acknowledgement: an
  // empty ref while only the receive reserve is left.
  [[nodiscard]] ChunkRef AllocateForQueue();
  // Whether AllocateForQueue would succeed now.
  bool CanAllocateForQueue() const {
    return max_chunks_ - stats_.in_use > receive_reserve_;
  }
  void set_receive_reserve(size_t chunks) { receive_reserve_ = chunks; }
  size_t receive_reserve() const { return receive_reserve_; }
  // Creates chunks up to `count` in total now, so later Allocate() calls do
  // not touch the heap.
  void Reserve(size_t count);
  const Stats& stats() const { return stats_; }
  size_t max_chunks() const { return max_chunks_; }

 private:
  friend class ChunkRef;
  void Release(Chunk* c);

  using FreeList = boost::intrusive::slist<
      Chunk, boost::intrusive::member_hook<Chunk,
                                           boost::intrusive::slist_member_hook<>,
                                           &Chunk::free_hook_>>;
  FreeList free_;
  const size_t max_chunks_;
  size_t receive_reserve_;
  Stats stats_;
};

inline void ChunkRef::Reset() {
  if (chunk_ == nullptr) return;
  NETSTACK_DCHECK(chunk_->refs_ > 0);
  if (--chunk_->refs_ == 0) chunk_->pool_->Release(chunk_);
  chunk_ = nullptr;
}

}  // namespace netstack::buffer

#endif  // NETSTACK_BUFFER_CHUNK_H_
