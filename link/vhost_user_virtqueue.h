// A split virtqueue (virtio 1.x section 2.7) seen from the device side,
// over guest memory that the driver (the guest) may change at any time.
//
//   descriptor table  16 bytes each: le64 addr, le32 len, le16 flags,
//                     le16 next; flags NEXT (1), WRITE (2), INDIRECT (4)
//   available ring    le16 flags, le16 idx, le16 ring[size],
//                     le16 used_event (VIRTIO_RING_F_EVENT_IDX)
//   used ring         le16 flags, le16 idx, {le32 id, le32 len}[size],
//                     le16 avail_event (VIRTIO_RING_F_EVENT_IDX)
//
// What the driver writes is untrusted. Pop() reads each descriptor once
// into a local copy and checks it:
//   - a head or `next` index past the table, a chain that visits more
//     descriptors than the table holds (a loop), an indirect table that is
//     empty, not a multiple of 16 bytes, nested, or combined with NEXT, or
//     INDIRECT when it was not negotiated, is refused;
//   - every buffer must lie inside one region of guest memory;
//   - every buffer must go the queue's way (device-readable on TX,
//     device-writable on RX);
//   - the chain's total length is capped (max_bytes) and so is its number
//     of buffers (kMaxSegments).
// A refused chain is still consumed (last_avail advances). If its head
// index is valid it goes back to the driver as used with length 0, so the
// driver does not lose the buffer; the next chain is processed normally.
// An avail index that runs more than `size` entries ahead of ours is a
// broken driver: the queue stops (broken()) until it is set up again.
//
// Memory ordering: the avail index is loaded with acquire before the
// entries it covers; used entries are written before the used index,
// which is stored with release; a full fence separates publishing the
// used index from reading used_event (the driver's side of the EVENT_IDX
// handshake does the same).
#ifndef NETSTACK_LINK_VHOST_USER_VIRTQUEUE_H_
#define NETSTACK_LINK_VHOST_USER_VIRTQUEUE_H_

#include <cstddef>
#include <cstdint>

#include "link/vhost_user_memory.h"

namespace netstack::link::vhost_user {

inline constexpr uint16_t kDescFlagNext = 1;      // VIRTQ_DESC_F_NEXT
inline constexpr uint16_t kDescFlagWrite = 2;     // VIRTQ_DESC_F_WRITE
inline constexpr uint16_t kDescFlagIndirect = 4;  // VIRTQ_DESC_F_INDIRECT
inline constexpr uint16_t kAvailNoInterrupt = 1;  // VIRTQ_AVAIL_F_NO_INTERRUPT
inline constexpr uint16_t kUsedNoNotify = 1;      // VIRTQ_USED_F_NO_NOTIFY
inline constexpr size_t kDescSize = 16;
inline constexpr uint32_t kMaxQueueSize = 32768;  // virtio 1.x 2.7

// One guest buffer of a chain, already translated and bounds-checked.
struct Segment {
  uint8_t* data = nullptr;
  uint32_t len = 0;
};

enum class ChainError : uint8_t {
  kOk = 0,
  kBadHead,          // head index >= size
  kBadNext,          // a `next` index >= size (or past an indirect table)
  kLoop,             // more descriptors visited than the table holds
  kOutsideMemory,    // a buffer or indirect table not inside one region
  kBadIndirect,      // not negotiated, nested, with NEXT, or a bad length
  kWrongDirection,   // a writable buffer on TX, a readable one on RX
  kTooLong,          // the chain's total length exceeds max_bytes
  kTooManySegments,  // more than kMaxSegments buffers
};
inline constexpr size_t kChainErrorCount = 9;
const char* ChainErrorName(ChainError e);

struct RingAddresses {
  uint32_t size = 0;       // power of two, 1..kMaxQueueSize
  uint64_t desc_uva = 0;   // QEMU user addresses (SET_VRING_ADDR)
  uint64_t avail_uva = 0;
  uint64_t used_uva = 0;
};

// Why Setup() refused a ring.
enum class RingSetupError : uint8_t {
  kOk = 0,
  kBadSize,        // zero, not a power of two, or too large
  kMisaligned,     // desc 16, avail 2, used 4 bytes (virtio 1.x 2.7)
  kOutsideMemory,  // a ring not inside one region
};

class Virtqueue {
 public:
  // Most buffers one chain may have: a 64 KiB TSO frame from Linux is at
  // most MAX_SKB_FRAGS + 2; an RX frame with MRG_RXBUF collects several
  // chains, counted together against this.
  static constexpr size_t kMaxSegments = 512;

  // Translates the rings through `memory` (which must outlive the queue
  // or the next Setup/Reset). last_avail and the used index start at
  // `base` (SET_VRING_BASE).
  RingSetupError Setup(const GuestMemory& memory, const RingAddresses& a,
                       uint16_t base, bool event_idx, bool indirect);
  // Forgets the rings (the queue is not ready until the next Setup).
  void Reset();
  bool ready() const { return desc_ != nullptr && !broken_; }
  bool broken() const { return broken_; }
  uint32_t size() const { return size_; }
  uint16_t last_avail() const { return last_avail_; }

  // Chains the driver has made available that we have not taken.
  // Stops the queue (broken()) and returns 0 when the driver's index runs
  // more than size() ahead.
  uint16_t Pending();

  // Takes the next available chain (Pending() must be > 0). Its buffers
  // are appended to segs[*nsegs..] (room for kMaxSegments in all), their
  // total length is added to *bytes. `device_writes`: the RX queue. On
  // error *nsegs and *bytes are as they were, and the chain is already
  // returned to the driver if it could be (see the file comment).
  ChainError Pop(bool device_writes, uint64_t max_bytes, Segment* segs,
                 size_t* nsegs, uint64_t* bytes, uint16_t* head);
  // Gives back the last `n` chains taken with Pop() and not yet used.
  void Unpop(uint16_t n) { last_avail_ = static_cast<uint16_t>(last_avail_ - n); }

  // Writes a used entry (not yet visible to the driver).
  void PushUsed(uint16_t head, uint32_t len);
  // Makes the used entries visible; true when the driver wants to be told
  // (EVENT_IDX: used_event crossed; otherwise NO_INTERRUPT clear).
  bool FlushUsed();
  // Asks the driver to kick us for chains past last_avail (EVENT_IDX:
  // avail_event = last_avail; otherwise NO_NOTIFY clear).
  void EnableNotify();

 private:
  uint16_t LoadAvailIdx() const;
  // Walks one chain starting at `index` of `table` (of table_size
  // descriptors). `indirect`: this is an indirect table.
  ChainError Walk(const uint8_t* table, uint32_t table_size, uint16_t index,
                  bool indirect, bool device_writes, uint64_t max_bytes,
                  Segment* segs, size_t* nsegs, uint64_t* bytes);

  const GuestMemory* memory_ = nullptr;
  uint8_t* desc_ = nullptr;
  uint8_t* avail_ = nullptr;
  uint8_t* used_ = nullptr;
  uint32_t size_ = 0;
  bool event_idx_ = false;
  bool indirect_ = false;
  bool broken_ = false;
  uint16_t last_avail_ = 0;
  uint16_t used_idx_ = 0;        // next used entry we write
  uint16_t signalled_used_ = 0;  // used index at the last FlushUsed()
};

}  // namespace netstack::link::vhost_user

#endif  // NETSTACK_LINK_VHOST_USER_VIRTQUEUE_H_
