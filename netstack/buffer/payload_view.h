// A view of part of a chunk: (chunk, offset, length). Copying a view shares
// the chunk; the bytes are never copied.
#ifndef NETSTACK_BUFFER_PAYLOAD_VIEW_H_
#define NETSTACK_BUFFER_PAYLOAD_VIEW_H_

#include <cstdint>
#include <span>
#include <utility>

#include "netstack/base/dcheck.h"
#include "netstack/buffer/chunk.h"

namespace netstack::buffer {

class PayloadView {
 public:
  PayloadView() = default;
  // The caller guarantees offset + length <= kChunkSize (DCHECK): views are
  // made by our own code, never from a length a peer sent unchecked.
  PayloadView(ChunkRef chunk, uint32_t offset, uint32_t length)
      : chunk_(std::move(chunk)), offset_(offset), length_(length) {
    NETSTACK_DCHECK(chunk_ || length == 0);
    NETSTACK_DCHECK(uint64_t{offset} + length <= kChunkSize);
  }

  std::span<const uint8_t> bytes() const {
    if (!chunk_) return {};
    return chunk_->data().subspan(offset_, length_);
  }
  uint32_t size() const { return length_; }
  uint32_t offset() const { return offset_; }
  bool empty() const { return length_ == 0; }
  const ChunkRef& chunk() const { return chunk_; }

  // A view of [from, from + len) of this view, clamped to its end; shares
  // the chunk.
  PayloadView Subview(uint32_t from, uint32_t len) const {
    if (from > length_) from = length_;
    if (len > length_ - from) len = length_ - from;
    return PayloadView(chunk_, offset_ + from, len);
  }
  // Drops `n` bytes from the front (clamped), e.g. after a header is parsed.
  void TrimFront(uint32_t n) {
    if (n > length_) n = length_;
    offset_ += n;
    length_ -= n;
  }
  // Keeps only the first `n` bytes (clamped), e.g. to cut Ethernet padding.
  void Truncate(uint32_t n) {
    if (n < length_) length_ = n;
  }

 private:
  ChunkRef chunk_;
  uint32_t offset_ = 0;
  uint32_t length_ = 0;
};

}  // namespace netstack::buffer

#endif  // NETSTACK_BUFFER_PAYLOAD_VIEW_H_
