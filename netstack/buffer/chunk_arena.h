// Packs the bytes of many writers densely into shared chunks.
//
// A view pins its whole 64 KiB chunk. A writer with a chunk of its own
// (a TCP send queue's tail, a relay's receive buffer) therefore pins
// 64 KiB for as long as any of its bytes wait for an acknowledgement,
// however few they are: a gateway whose thousands of flows each have a
// short reply in flight would hold thousands of chunks, and exhaust the
// pool with a few megabytes of data. An arena is shared by all the
// writers of a layer instead: every write goes at the fill mark of one
// current chunk, so N writers with b bytes each in flight pin about
// N * b / 64 KiB chunks (plus the holes of chunks whose other bytes are
// already freed).
//
// Chunks come from ChunkPool::AllocateForQueue: bytes that wait for a peer
// never take the pool's receive reserve (chunk.h).
#ifndef NETSTACK_BUFFER_CHUNK_ARENA_H_
#define NETSTACK_BUFFER_CHUNK_ARENA_H_

#include <cstdint>
#include <span>

#include "netstack/buffer/chunk.h"
#include "netstack/buffer/payload_view.h"

namespace netstack::buffer {

class ChunkArena {
 public:
  explicit ChunkArena(ChunkPool& pool) : pool_(pool) {}
  ChunkArena(const ChunkArena&) = delete;
  ChunkArena& operator=(const ChunkArena&) = delete;

  // Writable space at the fill mark of at least `min` bytes (`min` at most
  // kChunkSize): the rest of the current chunk, or a fresh chunk when the
  // rest is shorter. Empty when the pool refuses. No view covers it; the
  // caller writes into it and calls Commit before anyone else calls Room.
  std::span<uint8_t> Room(uint32_t min);
  // The first `n` bytes of the last Room() hold data now: a view of them.
  PayloadView Commit(uint32_t n);
  // Whether the next committed bytes will directly follow `v` in the same
  // chunk (its writer may then extend `v` rather than keep a second view).
  // Valid between Room and Commit.
  bool Continues(const PayloadView& v) const {
    return chunk_ && v.chunk().get() == chunk_.get() &&
           v.offset() + v.size() == fill_;
  }
  // Lets go of the current chunk (the views keep what they cover).
  void Release() {
    chunk_ = ChunkRef();
    fill_ = 0;
  }
  // Whether Room(min) would succeed now.
  bool HasRoom(uint32_t min) const {
    if (chunk_ && (chunk_->refs() == 1 || kChunkSize - fill_ >= min)) {
      return true;
    }
    return pool_.CanAllocateForQueue();
  }

 private:
  ChunkPool& pool_;
  ChunkRef chunk_;
  uint32_t fill_ = 0;  // nothing views [fill_, kChunkSize) of chunk_
};

}  // namespace netstack::buffer

#endif  // NETSTACK_BUFFER_CHUNK_ARENA_H_
