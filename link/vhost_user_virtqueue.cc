#include "link/vhost_user_virtqueue.h"

#include <atomic>
#include <bit>
#include <cstring>

namespace netstack::link::vhost_user {
namespace {

// Virtio 1.x rings are little-endian; the index fields are read and
// written as native 16-bit atomics, which is only right on a
// little-endian host (all this back-end's targets).
static_assert(std::endian::native == std::endian::little,
              "vhost-user rings are little-endian");

uint16_t Le16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
uint32_t Le32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
uint64_t Le64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
void StoreLe32(uint8_t* p, uint32_t v) { std::memcpy(p, &v, sizeof(v)); }

uint16_t* Idx(uint8_t* p) { return reinterpret_cast<uint16_t*>(p); }

// Offsets in the rings (virtio 1.x 2.7.6 and 2.7.8).
constexpr size_t kRingHeader = 4;  // flags, idx
constexpr size_t kUsedElemSize = 8;

size_t AvailBytes(uint32_t size) { return kRingHeader + 2 * size + 2; }
size_t UsedBytes(uint32_t size) { return kRingHeader + kUsedElemSize * size + 2; }

}  // namespace

const char* ChainErrorName(ChainError e) {
  switch (e) {
    case ChainError::kOk: return "ok";
    case ChainError::kBadHead: return "bad_head";
    case ChainError::kBadNext: return "bad_next";
    case ChainError::kLoop: return "loop";
    case ChainError::kOutsideMemory: return "outside_memory";
    case ChainError::kBadIndirect: return "bad_indirect";
    case ChainError::kWrongDirection: return "wrong_direction";
    case ChainError::kTooLong: return "too_long";
    case ChainError::kTooManySegments: return "too_many_segments";
  }
  return "unknown";
}

RingSetupError Virtqueue::Setup(const GuestMemory& memory,
                                const RingAddresses& a, uint16_t base,
                                bool event_idx, bool indirect) {
  Reset();
  if (a.size == 0 || a.size > kMaxQueueSize || !std::has_single_bit(a.size)) {
    return RingSetupError::kBadSize;
  }
  if (a.desc_uva % 16 != 0 || a.avail_uva % 2 != 0 || a.used_uva % 4 != 0) {
    return RingSetupError::kMisaligned;
  }
  uint8_t* desc = memory.Uva(a.desc_uva, uint64_t{kDescSize} * a.size);
  uint8_t* avail = memory.Uva(a.avail_uva, AvailBytes(a.size));
  uint8_t* used = memory.Uva(a.used_uva, UsedBytes(a.size));
  if (desc == nullptr || avail == nullptr || used == nullptr) {
    return RingSetupError::kOutsideMemory;
  }
  // The host pointers keep the guest's alignment only if the regions are
  // mapped at matching offsets; check what we will really touch.
  if (reinterpret_cast<uintptr_t>(avail) % 2 != 0 ||
      reinterpret_cast<uintptr_t>(used) % 4 != 0) {
    return RingSetupError::kMisaligned;
  }
  memory_ = &memory;
  desc_ = desc;
  avail_ = avail;
  used_ = used;
  size_ = a.size;
  event_idx_ = event_idx;
  indirect_ = indirect;
  last_avail_ = base;
  used_idx_ = base;
  signalled_used_ = base;
  return RingSetupError::kOk;
}

void Virtqueue::Reset() {
  memory_ = nullptr;
  desc_ = avail_ = used_ = nullptr;
  size_ = 0;
  broken_ = false;
}

uint16_t Virtqueue::LoadAvailIdx() const {
  return __atomic_load_n(Idx(avail_ + 2), __ATOMIC_ACQUIRE);
}

uint16_t Virtqueue::Pending() {
  if (!ready()) return 0;
  const uint16_t n = static_cast<uint16_t>(LoadAvailIdx() - last_avail_);
  if (n > size_) {
    broken_ = true;
    return 0;
  }
  return n;
}

ChainError Virtqueue::Walk(const uint8_t* table, uint32_t table_size,
                           uint16_t index, bool indirect, bool device_writes,
                           uint64_t max_bytes, Segment* segs, size_t* nsegs,
                           uint64_t* bytes) {
  uint32_t visited = 0;
  uint32_t i = index;
  for (;;) {
    if (i >= table_size) return ChainError::kBadNext;
    // A chain that visits more descriptors than there are revisits one.
    if (++visited > table_size) return ChainError::kLoop;
    uint8_t d[kDescSize];  // one read of the descriptor; only d is checked
    std::memcpy(d, table + kDescSize * i, kDescSize);
    const uint64_t addr = Le64(d);
    const uint32_t len = Le32(d + 8);
    const uint16_t flags = Le16(d + 12);
    const uint16_t next = Le16(d + 14);
    if ((flags & kDescFlagIndirect) != 0) {
      // virtio 1.x 2.7.5.3.1: not nested, not with NEXT, a whole number of
      // descriptors, no more than the queue size.
      if (!indirect_ || indirect || (flags & kDescFlagNext) != 0 || len == 0 ||
          len % kDescSize != 0 || len / kDescSize > size_) {
        return ChainError::kBadIndirect;
      }
      const uint8_t* t = memory_->Gpa(addr, len);
      if (t == nullptr) return ChainError::kOutsideMemory;
      return Walk(t, len / kDescSize, 0, true, device_writes, max_bytes, segs,
                  nsegs, bytes);
    }
    if (((flags & kDescFlagWrite) != 0) != device_writes) {
      return ChainError::kWrongDirection;
    }
    if (len > 0) {
      if (len > max_bytes - *bytes) return ChainError::kTooLong;
      uint8_t* p = memory_->Gpa(addr, len);
      if (p == nullptr) return ChainError::kOutsideMemory;
      if (*nsegs == kMaxSegments) return ChainError::kTooManySegments;
      segs[(*nsegs)++] = Segment{p, len};
      *bytes += len;
    }
    if ((flags & kDescFlagNext) == 0) return ChainError::kOk;
    i = next;
  }
}

ChainError Virtqueue::Pop(bool device_writes, uint64_t max_bytes,
                          Segment* segs, size_t* nsegs, uint64_t* bytes,
                          uint16_t* head) {
  const uint16_t slot = static_cast<uint16_t>(last_avail_ & (size_ - 1));
  const uint16_t h = Le16(avail_ + kRingHeader + 2 * size_t{slot});
  ++last_avail_;
  *head = h;
  if (h >= size_) return ChainError::kBadHead;
  size_t n = *nsegs;
  uint64_t b = *bytes;
  const ChainError e =
      Walk(desc_, size_, h, false, device_writes, max_bytes, segs, &n, &b);
  if (e != ChainError::kOk) {
    PushUsed(h, 0);  // the driver gets its buffer back, empty
    return e;
  }
  *nsegs = n;
  *bytes = b;
  return ChainError::kOk;
}

void Virtqueue::PushUsed(uint16_t head, uint32_t len) {
  uint8_t* e = used_ + kRingHeader +
               kUsedElemSize * size_t{static_cast<uint16_t>(used_idx_ & (size_ - 1))};
  StoreLe32(e, head);
  StoreLe32(e + 4, len);
  ++used_idx_;
}

bool Virtqueue::FlushUsed() {
  if (!ready() || used_idx_ == signalled_used_) return false;
  __atomic_store_n(Idx(used_ + 2), used_idx_, __ATOMIC_RELEASE);
  // The driver reads used_event after it wrote it; we read it after we
  // published idx: both sides fence, so one of them sees the other.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  const uint16_t old = signalled_used_;
  signalled_used_ = used_idx_;
  if (event_idx_) {
    const uint16_t used_event = __atomic_load_n(
        Idx(avail_ + kRingHeader + 2 * size_t{size_}), __ATOMIC_RELAXED);
    // vring_need_event: did [old, new) cross used_event? (2.7.10)
    return static_cast<uint16_t>(used_idx_ - used_event - 1) <
           static_cast<uint16_t>(used_idx_ - old);
  }
  return (__atomic_load_n(Idx(avail_), __ATOMIC_RELAXED) & kAvailNoInterrupt) ==
         0;
}

void Virtqueue::EnableNotify() {
  if (!ready()) return;
  if (event_idx_) {
    __atomic_store_n(Idx(used_ + kRingHeader + kUsedElemSize * size_t{size_}),
                     last_avail_, __ATOMIC_RELAXED);
  } else {
    __atomic_store_n(Idx(used_), uint16_t{0}, __ATOMIC_RELAXED);
  }
  std::atomic_thread_fence(std::memory_order_seq_cst);
}

}  // namespace netstack::link::vhost_user
