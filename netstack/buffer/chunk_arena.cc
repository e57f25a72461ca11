#include "netstack/buffer/chunk_arena.h"

namespace netstack::buffer {

std::span<uint8_t> ChunkArena::Room(uint32_t min) {
  NETSTACK_DCHECK(min <= kChunkSize);
  // Every view of the current chunk is gone: start over at its front,
  // and keep one warm chunk instead of taking another.
  if (chunk_ && chunk_->refs() == 1) fill_ = 0;
  if (!chunk_ || kChunkSize - fill_ < min) {
    ChunkRef fresh = pool_.AllocateForQueue();
    if (!fresh) return {};
    chunk_ = std::move(fresh);
    fill_ = 0;
  }
  return chunk_->unshared_tail(fill_);
}

PayloadView ChunkArena::Commit(uint32_t n) {
  NETSTACK_DCHECK(chunk_);
  NETSTACK_DCHECK(n <= kChunkSize - fill_);
  PayloadView v(chunk_, fill_, n);
  fill_ += n;
  return v;
}

}  // namespace netstack::buffer
