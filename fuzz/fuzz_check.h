// What every fuzz target shares: FUZZ_CHECK, an invariant that aborts the
// run when it fails (libFuzzer then keeps the input as a crash; the
// regression replay reports the file), in every build, NDEBUG or not; and
// FuzzInput, a reader that turns the fuzzer's bytes into a structured
// script (sizes, choices, frames) without ever reading past the end.
#ifndef NETSTACK_FUZZ_FUZZ_CHECK_H_
#define NETSTACK_FUZZ_FUZZ_CHECK_H_

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>

#define FUZZ_CHECK(cond)                                                 \
  do {                                                                   \
    if (!(cond)) {                                                       \
      std::fprintf(stderr, "%s:%d: FUZZ_CHECK failed: %s\n", __FILE__,   \
                   __LINE__, #cond);                                     \
      std::abort();                                                      \
    }                                                                    \
  } while (0)

// On a harness helper that only checks (compares every byte of a buffer,
// say): no coverage instrumentation, so libFuzzer neither pays for nor
// steers by the harness's own comparisons. Clang 13+; a no-op elsewhere.
// Never inlined: clang-14 inlined such a helper into an instrumented
// caller, whose hooks then ran once per byte compared (12% of
// tcp_flows_fuzzer's time).
#if defined(__clang__)
#define FUZZ_NO_COVERAGE __attribute__((noinline, no_sanitize("coverage")))
#else
#define FUZZ_NO_COVERAGE
#endif

namespace netstack::fuzz {

// Two checksum field values that mean the same sum: in ones' complement
// 0x0000 and 0xffff are both zero (RFC 1624 section 3), so a received
// field of 0xffff re-emits as 0x0000 and both check as valid.
inline bool SameChecksum(uint16_t a, uint16_t b) {
  return a == b || (a == 0 && b == 0xffff) || (a == 0xffff && b == 0);
}

// Reads fields off the front of the input; past the end every read gives
// zero (or an empty span) and done() is true.
class FuzzInput {
 public:
  FuzzInput(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  bool done() const { return pos_ >= size_; }
  size_t remaining() const { return done() ? 0 : size_ - pos_; }

  uint8_t U8() { return done() ? 0 : data_[pos_++]; }
  uint16_t U16() { return static_cast<uint16_t>((U8() << 8) | U8()); }
  uint32_t U32() { return (uint32_t{U16()} << 16) | U16(); }
  bool Bool() { return (U8() & 1) != 0; }
  // A value in [0, n); n > 0.
  uint32_t Below(uint32_t n) { return U32() % n; }

  // Up to `n` bytes, fewer at the end of the input.
  std::span<const uint8_t> Bytes(size_t n) {
    if (n > remaining()) n = remaining();
    std::span<const uint8_t> out(data_ + pos_, n);
    pos_ += n;
    return out;
  }
  // A length-prefixed record: a 16-bit big-endian length, then that many
  // bytes (fewer at the end). The usual unit of a script: a frame.
  std::span<const uint8_t> Record() { return Bytes(U16()); }
  std::span<const uint8_t> Rest() { return Bytes(remaining()); }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

}  // namespace netstack::fuzz

#endif  // NETSTACK_FUZZ_FUZZ_CHECK_H_
