#include "netstack/tcp/syn_cookies.h"

#include <cstdint>
#include <optional>

#include "gtest/gtest.h"

namespace netstack::tcp {
namespace {

using absl::Seconds;
using transport::FourTuple;
using transport::IpAddress;

// The start of a 64-second period.
const Instant kT0 = absl::UnixEpoch() + Seconds(64 * 26'000'000);
const SeqNum kPeerIsn(0x9abcdef0);

SipKey Key(uint8_t seed) {
  SipKey k;
  for (int i = 0; i < 16; ++i) k[i] = static_cast<uint8_t>(seed ^ (i * 17));
  return k;
}

FourTuple Tuple(uint16_t remote_port = 40000) {
  return FourTuple{{*IpAddress::Parse("10.0.0.1"), 80},
                   {*IpAddress::Parse("198.51.100.9"), remote_port}};
}

TEST(SynCookiesTest, RoundTripsEveryMssTableEntry) {
  const SynCookies cookies(Key(1));
  for (size_t i = 0; i < SynCookies::kMssTable.size(); ++i) {
    const uint16_t mss = SynCookies::kMssTable[i];
    const SynCookies::Cookie c = cookies.Make(Tuple(), kPeerIsn, mss, kT0);
    EXPECT_EQ(c.mss, mss);
    // The layout: the period count modulo 8 on top, then the table index.
    EXPECT_EQ(c.isn.value() >> 29, 26'000'000u % 8);
    EXPECT_EQ((c.isn.value() >> 26) & 7, i);
    EXPECT_EQ(cookies.Check(Tuple(), kPeerIsn, c.isn, kT0), mss);
  }
}

TEST(SynCookiesTest, RoundsThePeersMssDownToATableEntry) {
  const SynCookies cookies(Key(1));
  struct Case {
    uint16_t peer;
    uint16_t want;
  };
  for (const Case& c :
       {Case{100, 536}, Case{535, 536}, Case{536, 536}, Case{1219, 536},
        Case{1220, 1220}, Case{1400, 1220}, Case{1459, 1440}, Case{1460, 1460},
        Case{8959, 1460}, Case{9000, 8960}, Case{65535, 8960}}) {
    const SynCookies::Cookie cookie =
        cookies.Make(Tuple(), kPeerIsn, c.peer, kT0);
    EXPECT_EQ(cookie.mss, c.want) << c.peer;
    EXPECT_EQ(cookies.Check(Tuple(), kPeerIsn, cookie.isn, kT0), c.want)
        << c.peer;
  }
}

TEST(SynCookiesTest, RejectsAnotherConnectionsFinalAck) {
  const SynCookies cookies(Key(1));
  const SeqNum isn = cookies.Make(Tuple(), kPeerIsn, 1460, kT0).isn;
  EXPECT_EQ(cookies.Check(Tuple(40001), kPeerIsn, isn, kT0), std::nullopt);
  FourTuple other_local = Tuple();
  other_local.local.ip = *IpAddress::Parse("10.0.0.2");
  EXPECT_EQ(cookies.Check(other_local, kPeerIsn, isn, kT0), std::nullopt);
  EXPECT_EQ(cookies.Check(Tuple(), kPeerIsn + 1, isn, kT0), std::nullopt);
  EXPECT_EQ(cookies.Check(Tuple(), kPeerIsn, isn + 1, kT0), std::nullopt);
  // Another key (another stack, or after a restart).
  EXPECT_EQ(SynCookies(Key(2)).Check(Tuple(), kPeerIsn, isn, kT0),
            std::nullopt);
}

TEST(SynCookiesTest, RejectsEverySingleBitFlip) {
  const SynCookies cookies(Key(1));
  const SeqNum isn = cookies.Make(Tuple(), kPeerIsn, 1440, kT0).isn;
  for (int bit = 0; bit < 32; ++bit) {
    const SeqNum tampered(isn.value() ^ (1u << bit));
    EXPECT_EQ(cookies.Check(Tuple(), kPeerIsn, tampered, kT0), std::nullopt)
        << "bit " << bit;
  }
}

TEST(SynCookiesTest, AcceptsUpToTwoPeriodsOld) {
  const SynCookies cookies(Key(1));
  const SeqNum isn = cookies.Make(Tuple(), kPeerIsn, 1460, kT0).isn;
  for (int s : {0, 1, 63, 64, 100, 127, 128, 191}) {
    EXPECT_EQ(cookies.Check(Tuple(), kPeerIsn, isn, kT0 + Seconds(s)), 1460)
        << s << " s";
  }
  // Three periods old, four, and eight (whose count bits alias today's:
  // the MAC over the full count refuses it).
  for (int s : {192, 255, 256, 400, 8 * 64, 8 * 64 + 10, 100'000}) {
    EXPECT_EQ(cookies.Check(Tuple(), kPeerIsn, isn, kT0 + Seconds(s)),
              std::nullopt)
        << s << " s";
  }
  // A cookie from the future (the clock stepped back a period).
  EXPECT_EQ(cookies.Check(Tuple(), kPeerIsn, isn, kT0 - Seconds(1)),
            std::nullopt);
}

TEST(SynCookiesTest, LifetimeWhereverInThePeriodTheSynCame) {
  const SynCookies cookies(Key(3));
  for (int offset = 0; offset < 64; offset += 7) {
    const Instant sent = kT0 + Seconds(offset);
    const SeqNum isn = cookies.Make(Tuple(), kPeerIsn, 536, sent).isn;
    EXPECT_EQ(cookies.Check(Tuple(), kPeerIsn, isn, sent + Seconds(63)), 536);
    EXPECT_EQ(cookies.Check(Tuple(), kPeerIsn, isn, sent + Seconds(100)), 536);
    EXPECT_EQ(cookies.Check(Tuple(), kPeerIsn, isn, sent + Seconds(4 * 64)),
              std::nullopt);
  }
}

TEST(SynCookiesTest, TsvalCarriesWindowScaleAndSack) {
  // Low 6 bits: wscale 7 | SACK (0x10) = 0x17. 0x...40 | 0x17 is below
  // 0x...78, so the value stays in its 64-tick block.
  EXPECT_EQ(SynCookies::EncodeTsval(0x12345678, 7, true), 0x12345657u);
  // 0x...00 | 0x17 would be ahead of the clock: one block back.
  EXPECT_EQ(SynCookies::EncodeTsval(0x12345600, 7, true), 0x123455d7u);
  EXPECT_EQ(SynCookies::EncodeTsval(0x12345678, std::nullopt, false),
            0x1234564fu);
  EXPECT_EQ(SynCookies::DecodeTsecr(0x12345657),
            (CookieOptions{.wscale = 7, .sack = true}));
  EXPECT_EQ(SynCookies::DecodeTsecr(0x1234564f),
            (CookieOptions{.wscale = std::nullopt, .sack = false}));
  // Shift counts above 14 are used as 14 (RFC 7323 section 2.3).
  EXPECT_EQ(SynCookies::DecodeTsecr(SynCookies::EncodeTsval(1000, 200, false)),
            (CookieOptions{.wscale = 14, .sack = false}));
}

TEST(SynCookiesTest, TsvalRoundTripsAllOptionsAndNeverRunsAhead) {
  for (uint32_t tsval : {0u, 5u, 63u, 64u, 1000u, 0x7fffffffu, 0xffffffffu}) {
    for (int w = -1; w <= 14; ++w) {
      for (bool sack : {false, true}) {
        const std::optional<uint8_t> wscale =
            w < 0 ? std::nullopt : std::optional<uint8_t>(w);
        const uint32_t encoded = SynCookies::EncodeTsval(tsval, wscale, sack);
        EXPECT_EQ(SynCookies::DecodeTsecr(encoded),
                  (CookieOptions{.wscale = wscale, .sack = sack}));
        // Not after tsval, and less than 64 ticks behind (modulo 2^32).
        EXPECT_LT(tsval - encoded, 64u) << tsval << " " << w << " " << sack;
      }
    }
  }
}

}  // namespace
}  // namespace netstack::tcp
