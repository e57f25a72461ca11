#include "netstack/wire/checksum.h"

#include <bit>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace netstack::wire {
namespace {

constexpr bool kLittleEndian = std::endian::native == std::endian::little;

// Folds a wide sum of 16-bit words to 16 bits with end-around carry.
uint16_t Fold16(uint64_t sum) {
  sum = (sum & 0xffffffffu) + (sum >> 32);
  sum = (sum & 0xffffffffu) + (sum >> 32);
  sum = (sum & 0xffff) + (sum >> 16);
  sum = (sum & 0xffff) + (sum >> 16);
  sum = (sum & 0xffff) + (sum >> 16);
  return static_cast<uint16_t>(sum);
}

uint16_t NativeToBe(uint16_t v) {
  if constexpr (kLittleEndian) {
    return static_cast<uint16_t>((v >> 8) | (v << 8));
  } else {
    return v;
  }
}

// Adds an odd trailing byte as the high-order byte of a zero-padded word.
uint64_t TailByte(uint8_t b) {
  if constexpr (kLittleEndian) {
    return b;
  } else {
    return uint64_t{b} << 8;
  }
}

// Portable loop: 32-bit native words into a 64-bit accumulator. A 32-bit
// word is congruent to the sum of its two 16-bit halves modulo 0xffff, so
// this folds to the same 16-bit result.
uint64_t RawSumScalar(const uint8_t* p, size_t len) {
  uint64_t a0 = 0, a1 = 0;
  while (len >= 16) {
    uint64_t w0, w1;
    std::memcpy(&w0, p, 8);
    std::memcpy(&w1, p + 8, 8);
    a0 += (w0 & 0xffffffffu) + (w0 >> 32);
    a1 += (w1 & 0xffffffffu) + (w1 >> 32);
    p += 16;
    len -= 16;
  }
  while (len >= 4) {
    uint32_t w;
    std::memcpy(&w, p, 4);
    a0 += w;
    p += 4;
    len -= 4;
  }
  if (len >= 2) {
    uint16_t w;
    std::memcpy(&w, p, 2);
    a1 += w;
    p += 2;
    len -= 2;
  }
  if (len == 1) a0 += TailByte(*p);
  // Each accumulator holds at most len/8 * 2^33; fold before adding so the
  // sum cannot overflow for any buffer below 2^61 bytes.
  return uint64_t{Fold16(a0)} + Fold16(a1);
}

#if defined(__x86_64__)
// AVX2 loop: 16-bit words are split into even/odd halves of 32-bit lanes
// and summed in 32-bit lanes. Each step adds at most 2 * 0xffff to a lane,
// so a block of kBlock steps cannot overflow before it is flushed.
__attribute__((target("avx2"))) uint64_t RawSumAvx2(const uint8_t* p,
                                                     size_t len) {
  constexpr size_t kBlock = 8192;  // 8192 * 2 * 0xffff < 2^32
  const __m256i low_mask = _mm256_set1_epi32(0xffff);
  uint64_t total = 0;
  while (len >= 64) {
    __m256i acc0 = _mm256_setzero_si256();
    __m256i acc1 = _mm256_setzero_si256();
    size_t steps = len / 64;
    if (steps > kBlock) steps = kBlock;
    for (size_t i = 0; i < steps; ++i) {
      const __m256i v0 =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
      const __m256i v1 =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32));
      acc0 = _mm256_add_epi32(acc0, _mm256_and_si256(v0, low_mask));
      acc1 = _mm256_add_epi32(acc1, _mm256_srli_epi32(v0, 16));
      acc0 = _mm256_add_epi32(acc0, _mm256_and_si256(v1, low_mask));
      acc1 = _mm256_add_epi32(acc1, _mm256_srli_epi32(v1, 16));
      p += 64;
    }
    len -= steps * 64;
    // Widen the 32-bit lanes to 64 bits before the horizontal add.
    const __m256i zero = _mm256_setzero_si256();
    __m256i wide = _mm256_add_epi64(_mm256_unpacklo_epi32(acc0, zero),
                                    _mm256_unpackhi_epi32(acc0, zero));
    wide = _mm256_add_epi64(wide, _mm256_unpacklo_epi32(acc1, zero));
    wide = _mm256_add_epi64(wide, _mm256_unpackhi_epi32(acc1, zero));
    // Reduce in registers: a 256-bit store read back as 64-bit loads
    // defeats store-to-load forwarding and cost ~130 ns per call here.
    const __m128i half = _mm_add_epi64(_mm256_castsi256_si128(wide),
                                       _mm256_extracti128_si256(wide, 1));
    const uint64_t sum = static_cast<uint64_t>(_mm_cvtsi128_si64(half)) +
                         static_cast<uint64_t>(_mm_extract_epi64(half, 1));
    total += Fold16(sum);
  }
  // Clear the upper halves of the ymm registers before returning to
  // SSE-compiled callers. GCC does not insert this for a target("avx2")
  // function here; without it every later legacy-SSE instruction paid an
  // AVX-SSE transition penalty (~130 ns per checksum call, measured).
  _mm256_zeroupper();
  return total + RawSumScalar(p, len);
}

using RawSumFn = uint64_t (*)(const uint8_t*, size_t);

RawSumFn PickRawSum() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") ? RawSumAvx2 : RawSumScalar;
}
#endif

}  // namespace

uint64_t RawSum(const uint8_t* p, size_t len) {
#if defined(__x86_64__)
  static const RawSumFn fn = PickRawSum();
  // Short buffers (headers) are not worth the vector set-up.
  if (len < 128) return RawSumScalar(p, len);
  return fn(p, len);
#else
  return RawSumScalar(p, len);
#endif
}

uint16_t FoldToBe16(uint64_t native_sum) {
  return NativeToBe(Fold16(native_sum));
}

void ChecksumAccumulator::Add(std::span<const uint8_t> bytes) {
  if (bytes.empty()) return;
  uint16_t piece = Fold16(RawSum(bytes.data(), bytes.size()));
  // A piece starting at an odd offset has its bytes in swapped positions
  // within each 16-bit word: rotate its folded sum (RFC 1071 2(A)).
  if (length_ & 1) piece = static_cast<uint16_t>((piece >> 8) | (piece << 8));
  native_ += piece;
  length_ += bytes.size();
}

uint16_t ChecksumAccumulator::Folded() const {
  return Fold16(uint64_t{FoldToBe16(native_)} + be_extra_);
}

uint16_t InternetChecksum(std::span<const uint8_t> bytes) {
  ChecksumAccumulator acc;
  acc.Add(bytes);
  return acc.Checksum();
}

uint16_t Ipv4PseudoHeaderSum(const Ipv4Address& src, const Ipv4Address& dst,
                             uint8_t protocol, uint32_t upper_len) {
  ChecksumAccumulator acc;
  acc.AddBe32(src.ToU32());
  acc.AddBe32(dst.ToU32());
  acc.AddBe16(protocol);
  acc.AddBe32(upper_len);
  return acc.Folded();
}

uint16_t Ipv6PseudoHeaderSum(const Ipv6Address& src, const Ipv6Address& dst,
                             uint8_t next_header, uint32_t upper_len) {
  // RFC 8200 section 8.1: src, dst, 32-bit length, 24 zero bits, next
  // header.
  ChecksumAccumulator acc;
  acc.Add(src.bytes);
  acc.Add(dst.bytes);
  acc.AddBe32(upper_len);
  acc.AddBe16(next_header);
  return acc.Folded();
}

uint16_t ChecksumUpdate16(uint16_t checksum, uint16_t old_word,
                          uint16_t new_word) {
  const uint32_t sum = uint32_t{static_cast<uint16_t>(~checksum)} +
                       uint32_t{static_cast<uint16_t>(~old_word)} + new_word;
  return static_cast<uint16_t>(~Fold16(sum));
}

uint16_t ChecksumUpdate32(uint16_t checksum, uint32_t old_value,
                          uint32_t new_value) {
  checksum = ChecksumUpdate16(checksum, static_cast<uint16_t>(old_value >> 16),
                              static_cast<uint16_t>(new_value >> 16));
  return ChecksumUpdate16(checksum, static_cast<uint16_t>(old_value),
                          static_cast<uint16_t>(new_value));
}

}  // namespace netstack::wire
