// The Internet checksum (RFC 1071): ones'-complement sum of 16-bit words.
//
// Values: a "checksum" here is the 16-bit number exactly as LoadBe16 reads
// it from the header field, so Emit code can StoreBe16 it unchanged.
//
// The sum is byte-order independent (RFC 1071 section 2(B)): the inner loop
// adds native-order words and swaps once at the end. Scattered buffers are
// summed piece by piece; a piece that starts at an odd offset of the whole
// has its partial sum byte-rotated (section 2(A)), so any split of a
// datagram into views gives the same checksum.
#ifndef NETSTACK_WIRE_CHECKSUM_H_
#define NETSTACK_WIRE_CHECKSUM_H_

#include <cstddef>
#include <cstdint>
#include <span>

#include "netstack/wire/address.h"

namespace netstack::wire {

// Adds `len` bytes at `p` as native-order 16-bit words into a wide
// accumulator; an odd trailing byte is added as if followed by a zero.
// Exposed for benchmarks; use ChecksumAccumulator in protocol code.
uint64_t RawSum(const uint8_t* p, size_t len);

// Folds a wide native-order sum to 16 bits and converts it to the
// big-endian numeric value (not complemented).
uint16_t FoldToBe16(uint64_t native_sum);

class ChecksumAccumulator {
 public:
  // Adds a piece of the byte string; pieces are concatenated in call order.
  void Add(std::span<const uint8_t> bytes);
  // Adds a 16-bit / 32-bit big-endian field value at an even offset.
  void AddBe16(uint16_t v) { AddWordsBe(v); }
  void AddBe32(uint32_t v) { AddWordsBe((v >> 16) + (v & 0xffff)); }
  // Adds another accumulator's folded, non-complemented sum (for
  // precomputed pseudo-headers), at an even offset.
  void AddFolded(uint16_t be_sum) { AddWordsBe(be_sum); }

  // Non-complemented folded sum, big-endian numeric value.
  uint16_t Folded() const;
  // The checksum field value: the complement of Folded().
  uint16_t Checksum() const { return static_cast<uint16_t>(~Folded()); }

  size_t length() const { return length_; }

 private:
  void AddWordsBe(uint64_t be_words) { be_extra_ += be_words; }

  uint64_t native_ = 0;    // sum of native-order words, even-aligned
  uint64_t be_extra_ = 0;  // big-endian values added directly
  size_t length_ = 0;      // bytes added through Add()
};

// Checksum of one contiguous byte string.
uint16_t InternetChecksum(std::span<const uint8_t> bytes);

// Folded (non-complemented) sums of the pseudo-headers. `upper_len` is the
// upper-layer length (TCP header + payload), `protocol` its number.
uint16_t Ipv4PseudoHeaderSum(const Ipv4Address& src, const Ipv4Address& dst,
                             uint8_t protocol, uint32_t upper_len);
uint16_t Ipv6PseudoHeaderSum(const Ipv6Address& src, const Ipv6Address& dst,
                             uint8_t next_header, uint32_t upper_len);

// RFC 1624 equation 3: HC' = ~(~HC + ~m + m'). Updates a checksum field
// value when one 16-bit word of the covered data changes from old_word to
// new_word (both as big-endian numeric values).
uint16_t ChecksumUpdate16(uint16_t checksum, uint16_t old_word,
                          uint16_t new_word);
// Same for an aligned 32-bit field (two words).
uint16_t ChecksumUpdate32(uint16_t checksum, uint32_t old_value,
                          uint32_t new_value);

}  // namespace netstack::wire

#endif  // NETSTACK_WIRE_CHECKSUM_H_
