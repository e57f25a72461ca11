// TCP sequence numbers: 32-bit values compared modulo 2^32 (RFC 9293
// section 3.4). A strong type, so that a sequence number is never compared
// with `<` on raw integers by mistake.
#ifndef NETSTACK_TCP_SEQNUM_H_
#define NETSTACK_TCP_SEQNUM_H_

#include <cstdint>

namespace netstack::tcp {

class SeqNum {
 public:
  constexpr SeqNum() = default;
  constexpr explicit SeqNum(uint32_t v) : v_(v) {}
  constexpr uint32_t value() const { return v_; }

  constexpr SeqNum operator+(uint32_t n) const { return SeqNum(v_ + n); }
  constexpr SeqNum operator-(uint32_t n) const { return SeqNum(v_ - n); }
  constexpr SeqNum& operator+=(uint32_t n) {
    v_ += n;
    return *this;
  }
  // Distance from `o` to this, as a signed value: valid while the two are
  // within 2^31 of each other (always, for numbers inside one window).
  constexpr int32_t operator-(SeqNum o) const {
    return static_cast<int32_t>(v_ - o.v_);
  }
  friend constexpr bool operator==(SeqNum, SeqNum) = default;
  friend constexpr bool operator<(SeqNum a, SeqNum b) { return a - b < 0; }
  friend constexpr bool operator<=(SeqNum a, SeqNum b) { return a - b <= 0; }
  friend constexpr bool operator>(SeqNum a, SeqNum b) { return a - b > 0; }
  friend constexpr bool operator>=(SeqNum a, SeqNum b) { return a - b >= 0; }

 private:
  uint32_t v_ = 0;
};

constexpr SeqNum Max(SeqNum a, SeqNum b) { return a < b ? b : a; }
constexpr SeqNum Min(SeqNum a, SeqNum b) { return a < b ? a : b; }
// Bytes in [from, to); 0 if `to` is not after `from`.
constexpr uint32_t Span(SeqNum from, SeqNum to) {
  return to > from ? static_cast<uint32_t>(to - from) : 0;
}
// from <= x < to, modulo 2^32.
constexpr bool InRange(SeqNum x, SeqNum from, SeqNum to) {
  return x - from >= 0 && to - x > 0;
}

}  // namespace netstack::tcp

#endif  // NETSTACK_TCP_SEQNUM_H_
