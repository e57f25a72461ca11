#include "netstack/buffer/chunk.h"

#include <new>

namespace netstack::buffer {

ChunkPool::ChunkPool(size_t max_chunks)
    : max_chunks_(max_chunks), receive_reserve_(max_chunks / 8) {}

ChunkPool::~ChunkPool() {
  NETSTACK_DCHECK(stats_.in_use == 0);
  free_.clear_and_dispose([](Chunk* c) { delete c; });
}

void ChunkPool::Reserve(size_t count) {
  while (stats_.created < count && stats_.created < max_chunks_) {
    Chunk* c = new (std::nothrow) Chunk(this);
    if (c == nullptr) return;
    ++stats_.created;
    ++stats_.free;
    free_.push_front(*c);
  }
}

ChunkRef ChunkPool::Allocate() {
  Chunk* c = nullptr;
  if (!free_.empty()) {
    c = &free_.front();
    free_.pop_front();
    --stats_.free;
  } else if (stats_.created < max_chunks_) {
    c = new (std::nothrow) Chunk(this);
    if (c != nullptr) ++stats_.created;
  }
  if (c == nullptr) {
    ++stats_.exhausted;
    return ChunkRef();
  }
  ++stats_.in_use;
  ++stats_.allocations;
  return ChunkRef(c);
}

ChunkRef ChunkPool::AllocateForQueue() {
  if (!CanAllocateForQueue()) {
    ++stats_.queue_refused;
    return ChunkRef();
  }
  return Allocate();
}

void ChunkPool::Release(Chunk* c) {
  NETSTACK_DCHECK(c->pool_ == this);
  --stats_.in_use;
  ++stats_.free;
  c->slot_size_ = 0;
  // LIFO reuse keeps the hottest chunk in cache.
  free_.push_front(*c);
}

}  // namespace netstack::buffer
