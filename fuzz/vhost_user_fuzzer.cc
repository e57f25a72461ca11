// The vhost-user back-end's view of a hostile guest
// (link/vhost_user_virtqueue.h, link/vnet_header.h): a split virtqueue over
// guest memory whose every byte the input writes, descriptor tables,
// indirect tables and both rings included, and rewrites between steps
// (the guest races the device).
//
// Guest memory is 64 KiB in two regions that are adjacent both in guest
// physical addresses and in our mapping (A: gpa 0x10000, B: gpa 0x18000),
// but not in QEMU's user addresses, so a translation that let a buffer
// cross from A into B would stay inside the allocation and ASan would not
// see it: the harness checks it.
//
// An input is: the queue size (2 bytes, any value: Setup must refuse what
// is not a power of two up to 32768), flags (EVENT_IDX, INDIRECT_DESC, RX
// or TX queue, ring addresses from the input), maybe three ring offsets,
// the base index, then a script of steps:
//   write     bytes at an offset of guest memory;
//   pop       the next chain (when Pending() says there is one), with a
//             byte limit; on TX its bytes go through ValidateVnetRx as
//             the endpoint's copy would; on RX a pattern is written into
//             its buffers; then it is pushed used (or given back);
//   flush     FlushUsed();
//   notify    EnableNotify();
//   setup     Setup() again with another base.
// Checked after every step:
//   - Pending() <= size, and 0 once the queue is broken;
//   - every buffer of a chain lies inside one region, is non-empty, and
//     the chain's total is the sum of its buffers, <= the limit, with at
//     most kMaxSegments buffers; a refused chain leaves them as they were;
//   - after FlushUsed() the used index in guest memory is the number of
//     used entries pushed since setup, from the base;
//   - a frame ValidateVnetRx accepts has what its header documents: a
//     partial checksum inside the frame, a GSO size of 1..MTU with the
//     headers, hdr_len inside the frame, or a plain frame within the MTU.
#include <cstdint>
#include <cstring>
#include <vector>

#include "fuzz/fuzz_check.h"
#include "link/vhost_user_memory.h"
#include "link/vhost_user_virtqueue.h"
#include "link/vnet_header.h"

namespace netstack::link {
namespace {

using vhost_user::ChainError;
using vhost_user::GuestMemory;
using vhost_user::MemoryRegion;
using vhost_user::RingAddresses;
using vhost_user::RingSetupError;
using vhost_user::Segment;
using vhost_user::Virtqueue;

constexpr size_t kRegion = 0x8000;
constexpr uint64_t kGpaA = 0x10000, kGpaB = kGpaA + kRegion;
constexpr uint64_t kUvaA = 0x7f0000000000, kUvaB = 0x7f0000100000;
constexpr uint32_t kMtu = 1500;

alignas(4096) uint8_t g_mem[2 * kRegion];

bool InOneRegion(const Segment& s) {
  const uint8_t* a = g_mem;
  const uint8_t* b = g_mem + kRegion;
  const uint8_t* end = g_mem + 2 * kRegion;
  if (s.data >= a && s.data < b) return s.len <= static_cast<size_t>(b - s.data);
  if (s.data >= b && s.data < end) {
    return s.len <= static_cast<size_t>(end - s.data);
  }
  return false;
}

// What ValidateVnetRx promises about a frame it accepted.
FUZZ_NO_COVERAGE void CheckAccepted(const uint8_t* hdr,
                                    const std::vector<uint8_t>& frame) {
  const uint8_t flags = hdr[vnet::kFlagsOffset];
  const uint8_t gso = hdr[vnet::kGsoTypeOffset] & ~vnet::kGsoEcn;
  const size_t csum_start = vnet::LoadLe16(hdr + vnet::kCsumStartOffset);
  const size_t csum_offset = vnet::LoadLe16(hdr + vnet::kCsumOffsetOffset);
  FUZZ_CHECK(frame.size() >= 14);
  FUZZ_CHECK((flags & ~(vnet::kFlagNeedsCsum | vnet::kFlagDataValid)) == 0);
  if ((flags & vnet::kFlagNeedsCsum) != 0) {
    FUZZ_CHECK(csum_start >= 14);
    FUZZ_CHECK(csum_start + csum_offset + 2 <= frame.size());
  }
  if (gso == vnet::kGsoNone) {
    FUZZ_CHECK(frame.size() <= 18 + kMtu);
    return;
  }
  FUZZ_CHECK(gso == vnet::kGsoTcpV4 || gso == vnet::kGsoTcpV6);
  FUZZ_CHECK((flags & vnet::kFlagNeedsCsum) != 0);
  const size_t gso_size = vnet::LoadLe16(hdr + vnet::kGsoSizeOffset);
  FUZZ_CHECK(gso_size >= 1 && gso_size <= kMtu);
  FUZZ_CHECK(vnet::LoadLe16(hdr + vnet::kHdrLenOffset) <= frame.size());
  FUZZ_CHECK(csum_offset == vnet::kTcpChecksumOffset);
  // The TCP header's data offset lies inside the frame.
  FUZZ_CHECK(csum_start + 20 <= frame.size());
  FUZZ_CHECK(csum_start + (frame[csum_start + 12] >> 4) * 4u <= frame.size());
}

}  // namespace
}  // namespace netstack::link

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace netstack::link;
  netstack::fuzz::FuzzInput in(data, size);
  std::memset(g_mem, 0, sizeof(g_mem));
  GuestMemory memory;
  FUZZ_CHECK(memory.AddUnowned(MemoryRegion{kGpaA, kRegion, kUvaA, 0}, g_mem).ok());
  FUZZ_CHECK(memory
                 .AddUnowned(MemoryRegion{kGpaB, kRegion, kUvaB, 0},
                             g_mem + kRegion)
                 .ok());

  const uint32_t qsize = in.U16();
  const uint8_t flags = in.U8();
  const bool event_idx = (flags & 1) != 0;
  const bool indirect = (flags & 2) != 0;
  const bool rx = (flags & 4) != 0;
  RingAddresses a;
  a.size = qsize;
  a.desc_uva = kUvaA;
  a.avail_uva = kUvaA + 0x2000;
  a.used_uva = kUvaA + 0x3000;
  if ((flags & 8) != 0) {
    a.desc_uva = kUvaA + in.U32() % (3 * kRegion);
    a.avail_uva = kUvaA + in.U32() % (3 * kRegion);
    a.used_uva = kUvaA + in.U32() % (3 * kRegion);
  }
  uint16_t base = in.U16();
  Virtqueue vq;
  if (vq.Setup(memory, a, base, event_idx, indirect) != RingSetupError::kOk) {
    FUZZ_CHECK(!vq.ready());
    return 0;
  }
  uint16_t pushed = 0;  // used entries since setup
  uint16_t flushed = 0;  // `pushed` at the last FlushUsed()
  std::vector<Segment> segs(Virtqueue::kMaxSegments + 1);
  std::vector<uint8_t> bytes;
  // The used ring's index field, where FlushUsed publishes.
  const uint8_t* used_idx = memory.Uva(a.used_uva + 2, 2);
  while (!in.done()) {
    switch (in.U8() % 6) {
      case 0: {  // the guest writes its memory
        const size_t off = in.U16() % sizeof(g_mem);
        std::span<const uint8_t> b = in.Record();
        const size_t n = std::min(b.size(), sizeof(g_mem) - off);
        std::memcpy(g_mem + off, b.data(), n);
        break;
      }
      case 1:
      case 2: {
        if (vq.Pending() == 0) break;
        const uint64_t max_bytes = 1 + in.U32() % (1u << 20);
        size_t nsegs = 0;
        uint64_t total = 0;
        uint16_t head = 0;
        const uint16_t before = static_cast<uint16_t>(vq.last_avail());
        const ChainError e =
            vq.Pop(rx, max_bytes, segs.data(), &nsegs, &total, &head);
        FUZZ_CHECK(vq.last_avail() == static_cast<uint16_t>(before + 1));
        if (e != ChainError::kOk) {
          FUZZ_CHECK(nsegs == 0 && total == 0);
          // A refused chain with a valid head went back, used, empty.
          if (head < vq.size()) ++pushed;
          break;
        }
        FUZZ_CHECK(head < vq.size());
        FUZZ_CHECK(nsegs <= Virtqueue::kMaxSegments);
        FUZZ_CHECK(total <= max_bytes);
        uint64_t sum = 0;
        for (size_t i = 0; i < nsegs; ++i) {
          FUZZ_CHECK(segs[i].len > 0);
          FUZZ_CHECK(InOneRegion(segs[i]));
          sum += segs[i].len;
        }
        FUZZ_CHECK(sum == total);
        if (rx) {
          for (size_t i = 0; i < nsegs; ++i) {
            std::memset(segs[i].data, 0xa5, segs[i].len);
          }
        } else if (total >= kVnetHdrMrgLen + 14 && total <= 70000) {
          // The endpoint's copy: header, then frame.
          bytes.clear();
          for (size_t i = 0; i < nsegs; ++i) {
            bytes.insert(bytes.end(), segs[i].data, segs[i].data + segs[i].len);
          }
          std::vector<uint8_t> frame(bytes.begin() + kVnetHdrMrgLen, bytes.end());
          if (ValidateVnetRx(std::span<const uint8_t>(bytes.data(), kVnetHdrMrgLen),
                             frame, kMtu) == VnetRxVerdict::kOk) {
            CheckAccepted(bytes.data(), frame);
          }
        }
        if (in.Bool()) {
          vq.Unpop(1);  // not used: the next pop takes it again
        } else {
          vq.PushUsed(head, static_cast<uint32_t>(total));
          ++pushed;
        }
        break;
      }
      case 3: {
        (void)vq.FlushUsed();
        // (Nothing new: FlushUsed writes nothing, and the guest may have
        // scribbled over the index meanwhile.)
        if (vq.ready() && pushed != flushed) {
          flushed = pushed;
          uint16_t idx;
          std::memcpy(&idx, used_idx, 2);
          FUZZ_CHECK(idx == static_cast<uint16_t>(base + pushed));
        }
        break;
      }
      case 4:
        vq.EnableNotify();
        break;
      case 5: {
        base = in.U16();
        pushed = flushed = 0;
        FUZZ_CHECK(vq.Setup(memory, a, base, event_idx, indirect) ==
                   RingSetupError::kOk);
        break;
      }
    }
    const uint16_t pending = vq.Pending();
    FUZZ_CHECK(pending <= vq.size());
    if (vq.broken()) FUZZ_CHECK(pending == 0 && !vq.ready());
  }
  return 0;
}
