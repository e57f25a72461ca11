// A header buffer that grows backwards into fixed headroom.
//
// Each layer prepends its header on the way out: TCP first, then IP, then
// Ethernet (and a virtio-net header for host GSO). The headroom is the
// worst case of all of them, so no layer ever has to move bytes:
//   virtio-net header (12) + Ethernet (14) + 802.1Q (4) + IPv6 (40)
//   + extension headers (Fragment 8, some slack) + TCP with options (60)
//   = 138 bytes; gVisor found that less than about 140 bytes of headroom
//   broke GSO on some NICs. We round up to 192 (three cache lines).
#ifndef NETSTACK_BUFFER_PREPENDABLE_H_
#define NETSTACK_BUFFER_PREPENDABLE_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>

namespace netstack::buffer {

inline constexpr size_t kMaxHeaderLen = 192;

class PrependableBuffer {
 public:
  PrependableBuffer() = default;
  PrependableBuffer(const PrependableBuffer&) = delete;
  PrependableBuffer& operator=(const PrependableBuffer&) = delete;
  PrependableBuffer(PrependableBuffer&& o) noexcept { *this = std::move(o); }
  PrependableBuffer& operator=(PrependableBuffer&& o) noexcept {
    if (this != &o) {
      head_ = o.head_;
      std::memcpy(storage_ + head_, o.storage_ + head_, kMaxHeaderLen - head_);
      o.Reset();
    }
    return *this;
  }

  // Reserves `n` bytes in front of the current headers and returns them
  // for the caller to write. Fails cleanly (nullopt, nothing changed) when
  // the headroom is too small; never writes out of bounds.
  [[nodiscard]] std::optional<std::span<uint8_t>> Prepend(size_t n) {
    if (n > head_) return std::nullopt;
    head_ -= n;
    return std::span<uint8_t>(storage_ + head_, n);
  }

  // The headers written so far, outermost first.
  std::span<const uint8_t> data() const {
    return {storage_ + head_, kMaxHeaderLen - head_};
  }
  std::span<uint8_t> mutable_data() {
    return {storage_ + head_, kMaxHeaderLen - head_};
  }
  size_t size() const { return kMaxHeaderLen - head_; }
  size_t headroom() const { return head_; }
  void Reset() { head_ = kMaxHeaderLen; }

 private:
  size_t head_ = kMaxHeaderLen;
  uint8_t storage_[kMaxHeaderLen];
};

}  // namespace netstack::buffer

#endif  // NETSTACK_BUFFER_PREPENDABLE_H_
