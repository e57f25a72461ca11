#include "netstack/tcp/syn_cookies.h"

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

namespace netstack::tcp {
namespace {

constexpr int kCountShift = 29;
constexpr uint32_t kCountMask = 0x7;  // after the shift
constexpr int kMssShift = 26;
constexpr uint32_t kMssMask = 0x7;  // after the shift
constexpr uint32_t kMacMask = (1u << kMssShift) - 1;
static_assert(SynCookies::kMssTable.size() <= kMssMask + 1);
static_assert(SynCookies::kMaxAge < kCountMask);

constexpr uint32_t kTsWscaleMask = 0xf;
constexpr uint32_t kTsNoWscale = 0xf;
constexpr uint32_t kTsSack = 1u << 4;
constexpr uint32_t kTsBits = 6;
constexpr uint32_t kTsMask = (1u << kTsBits) - 1;
constexpr uint8_t kMaxWscale = 14;  // RFC 7323 section 2.3

// Periods of kPeriod since the Unix epoch (floored, modulo 2^32).
uint32_t Count(Instant now) {
  return static_cast<uint32_t>(absl::ToUnixSeconds(now) >> 6);
}
static_assert(SynCookies::kPeriod == absl::Seconds(1 << 6));

void PutBe32(uint32_t v, uint8_t* p) {
  p[0] = static_cast<uint8_t>(v >> 24);
  p[1] = static_cast<uint8_t>(v >> 16);
  p[2] = static_cast<uint8_t>(v >> 8);
  p[3] = static_cast<uint8_t>(v);
}

}  // namespace

uint32_t SynCookies::Mac(const transport::FourTuple& t, SeqNum peer_isn,
                         uint32_t count, uint32_t mss_index) const {
  std::array<uint8_t, kMaxFourTupleBytes + 4 + 4 + 1> buf;
  size_t n = SerializeFourTuple(t, std::span(buf).first<kMaxFourTupleBytes>());
  PutBe32(peer_isn.value(), &buf[n]);
  n += 4;
  PutBe32(count, &buf[n]);
  n += 4;
  buf[n++] = static_cast<uint8_t>(mss_index);
  return static_cast<uint32_t>(SipHash24(key_, {buf.data(), n})) & kMacMask;
}

SynCookies::Cookie SynCookies::Make(const transport::FourTuple& t,
                                    SeqNum peer_isn, uint16_t peer_mss,
                                    Instant now) const {
  uint32_t index = 0;
  for (uint32_t i = kMssTable.size(); i-- > 0;) {
    if (kMssTable[i] <= peer_mss) {
      index = i;
      break;
    }
  }
  const uint32_t count = Count(now);
  const uint32_t cookie = ((count & kCountMask) << kCountShift) |
                          (index << kMssShift) | Mac(t, peer_isn, count, index);
  return Cookie{SeqNum(cookie), kMssTable[index]};
}

std::optional<uint16_t> SynCookies::Check(const transport::FourTuple& t,
                                          SeqNum peer_isn, SeqNum cookie,
                                          Instant now) const {
  const uint32_t c = cookie.value();
  const uint32_t now_count = Count(now);
  // The most recent period whose low bits match; anything older than
  // kMaxAge (or from the future) is refused before hashing.
  const uint32_t age = (now_count - (c >> kCountShift)) & kCountMask;
  if (age > kMaxAge) return std::nullopt;
  const uint32_t index = (c >> kMssShift) & kMssMask;
  if (index >= kMssTable.size()) return std::nullopt;
  if ((c & kMacMask) != Mac(t, peer_isn, now_count - age, index)) {
    return std::nullopt;
  }
  return kMssTable[index];
}

uint32_t SynCookies::EncodeTsval(uint32_t tsval, std::optional<uint8_t> wscale,
                                 bool sack) {
  uint32_t bits =
      wscale.has_value() ? std::min(*wscale, kMaxWscale) : kTsNoWscale;
  if (sack) bits |= kTsSack;
  uint32_t encoded = (tsval & ~kTsMask) | bits;
  // Step back one 64-tick block rather than run ahead of the clock
  // (modulo 2^32, as timestamps compare).
  if (encoded > tsval) encoded -= kTsMask + 1;
  return encoded;
}

CookieOptions SynCookies::DecodeTsecr(uint32_t tsecr) {
  CookieOptions o;
  const uint32_t w = tsecr & kTsWscaleMask;
  if (w != kTsNoWscale) o.wscale = static_cast<uint8_t>(w);
  o.sack = (tsecr & kTsSack) != 0;
  return o;
}

}  // namespace netstack::tcp
