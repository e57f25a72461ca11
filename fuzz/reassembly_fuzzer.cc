// IP reassembly (netstack/ip/reassembly.h): an input is a script of
// fragments and time steps for a few datagrams of both families, against
// a reassembler with a small memory limit (4 datagrams) and fragment cap.
//
// Each fragment's data is a function of (datagram, byte position, variant
// bit), so the same range sent twice is either an exact duplicate or a
// conflict, as the script chooses. Checked after every step:
//   - every fragment is accepted or dropped for exactly one reason, every
//     datagram started is completed, dropped for one reason, or held;
//   - memory held stays within the limit, and equals one chunk per held
//     datagram; the chunk pool holds nothing else;
//   - a completed datagram's bytes are the ones its fragments carried, at
//     their offsets (each byte one of its position's two variants);
//   - NextDeadline is never in the past after Poll(now);
// and at the end, a Poll past every timeout leaves nothing held and every
// chunk back in the pool.
#include <cstdint>
#include <cstring>
#include <numeric>
#include <span>

#include "absl/time/time.h"
#include "fuzz/fuzz_check.h"
#include "netstack/base/time.h"
#include "netstack/buffer/chunk.h"
#include "netstack/ip/reassembly.h"
#include "netstack/wire/address.h"

namespace netstack::ip {
namespace {

constexpr size_t kSlots = 4;

constexpr uint32_t kDatagrams = 16;
constexpr uint32_t kMaxPos = 65536;

uint8_t DataByte(uint32_t datagram, uint32_t pos) {
  return static_cast<uint8_t>(pos * 131 + datagram * 29 + (pos >> 8));
}

// Every datagram's bytes, computed once: filling a fragment is a memcpy,
// not a loop the coverage instrumentation counts byte by byte (that loop
// was most of this target's time). Variant bytes are the complement.
struct Patterns {
  uint8_t bytes[2][kDatagrams][kMaxPos];
  Patterns() {
    for (uint32_t d = 0; d < kDatagrams; ++d) {
      for (uint32_t pos = 0; pos < kMaxPos; ++pos) {
        bytes[0][d][pos] = DataByte(d, pos);
        bytes[1][d][pos] = static_cast<uint8_t>(~DataByte(d, pos));
      }
    }
  }
};
const Patterns& GetPatterns() {
  static const Patterns* p = new Patterns();
  return *p;
}

// True when each byte of `got` is either variant of its position's byte
// (a datagram may mix the variants of overlapping fragments). Eight bytes
// at a time: x = got ^ expected must be 0x00 or 0xff in every byte, that
// is, every byte of x is its own low bit times 0xff.
FUZZ_NO_COVERAGE bool EachByteAVariant(std::span<const uint8_t> got,
                                       const uint8_t* expected) {
  size_t i = 0;
  for (; i + 8 <= got.size(); i += 8) {
    uint64_t a;
    uint64_t b;
    std::memcpy(&a, got.data() + i, 8);
    std::memcpy(&b, expected + i, 8);
    const uint64_t x = a ^ b;
    if (x != (x & 0x0101010101010101ull) * 0xff) return false;
  }
  for (; i < got.size(); ++i) {
    const uint8_t x = got[i] ^ expected[i];
    if (x != 0 && x != 0xff) return false;
  }
  return true;
}

ReassemblyKey KeyFor(uint32_t datagram) {
  if (datagram & 1) {
    wire::Ipv6Address src{};
    wire::Ipv6Address dst{};
    src.bytes[0] = 0xfd;
    src.bytes[15] = static_cast<uint8_t>(datagram);
    dst.bytes[0] = 0xfd;
    dst.bytes[15] = 0xff;
    return ReassemblyKey::Ipv6(src, dst, datagram >> 1);
  }
  return ReassemblyKey::Ipv4(wire::Ipv4Address::FromU32(0x0a000001),
                             wire::Ipv4Address::FromU32(0x0a000002),
                             static_cast<uint8_t>(17 + (datagram & 2)),
                             static_cast<uint16_t>(datagram >> 2));
}

uint64_t Sum(const std::array<uint64_t, kDropReasonCount>& a) {
  return std::accumulate(a.begin(), a.end(), uint64_t{0});
}

void CheckAccounted(const Reassembler& r, const buffer::ChunkPool& chunks,
                    const ReassemblerOptions& options) {
  const Reassembler::Stats& s = r.stats();
  FUZZ_CHECK(s.fragments_received == s.fragments_accepted + Sum(s.fragment_drops));
  FUZZ_CHECK(s.datagrams_started ==
             s.datagrams_completed + Sum(s.datagram_drops) + s.datagrams_held);
  FUZZ_CHECK(s.bytes_held == s.datagrams_held * buffer::kChunkSize);
  FUZZ_CHECK(s.bytes_held <= options.memory_limit_bytes);
  FUZZ_CHECK(s.peak_bytes_held <= options.memory_limit_bytes);
  FUZZ_CHECK(chunks.stats().in_use == s.datagrams_held);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::FuzzInput in(data, size);
  buffer::ChunkPool chunks(kSlots + 2);
  ReassemblerOptions options;
  options.memory_limit_bytes = kSlots * buffer::kChunkSize;
  options.max_fragments = 16;
  options.evict_when_full = in.Bool();
  Reassembler r(chunks, options);
  Instant now = absl::FromUnixSeconds(1000000);
  const Patterns& patterns = GetPatterns();

  for (int step = 0; step < 512 && !in.done(); ++step) {
    const uint8_t op = in.U8();
    if (op >= 0xf0) {  // time passes; sometimes past a timeout
      now += op == 0xff ? absl::Seconds(31 + in.U8()) : absl::Milliseconds(in.U16());
      r.Poll(now);
      FUZZ_CHECK(r.NextDeadline() > now || r.stats().datagrams_held == 0 ||
                 r.NextDeadline() == absl::InfiniteFuture());
      CheckAccounted(r, chunks, options);
      continue;
    }
    const uint32_t datagram = op & 0x0f;
    const bool more = (op & 0x10) != 0;
    const bool variant = (op & 0x20) != 0;
    const bool with_header = (op & 0x40) != 0;
    // Offsets mostly on 8-byte units near the start, sometimes anywhere
    // (the reassembler must refuse what the wire cannot say).
    uint32_t offset = in.U16();
    if ((op & 0x80) == 0) offset = (offset & 0x3ff) * 8;
    uint32_t len = in.U16() & 0x1fff;
    if (offset + len > kMaxPos) len = kMaxPos - offset;
    const uint8_t* fragment = &patterns.bytes[variant ? 1 : 0][datagram][offset];
    uint8_t header[60] = {0x45};
    const std::span<const uint8_t> hdr =
        with_header ? std::span<const uint8_t>(header, (datagram & 1) ? 48 : 20)
                    : std::span<const uint8_t>();
    AddResult res = r.Add(KeyFor(datagram), offset, more,
                          std::span<const uint8_t>(fragment, len), now, hdr);
    if (res.outcome == AddOutcome::kComplete) {
      const auto bytes = res.payload.bytes();
      FUZZ_CHECK(!bytes.empty());
      FUZZ_CHECK(bytes.size() <= kMaxPos);
      FUZZ_CHECK(EachByteAVariant(bytes, patterns.bytes[0][datagram]));
      FUZZ_CHECK(chunks.stats().in_use == r.stats().datagrams_held + 1);
      res.payload = {};
    }
    CheckAccounted(r, chunks, options);
  }
  r.Poll(now + absl::Seconds(120));
  FUZZ_CHECK(r.stats().datagrams_held == 0);
  CheckAccounted(r, chunks, options);
  FUZZ_CHECK(chunks.stats().in_use == 0);
  return 0;
}

}  // namespace netstack::ip
