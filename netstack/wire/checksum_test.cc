#include "netstack/wire/checksum.h"

#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "netstack/wire/bytes.h"
#include "netstack/wire/testing.h"

namespace netstack::wire {
namespace {

using testing::Hex;

// Straightforward RFC 1071 reference: big-endian 16-bit words, 32-bit sum.
uint16_t ReferenceChecksum(std::span<const uint8_t> b) {
  uint64_t sum = 0;
  size_t i = 0;
  for (; i + 1 < b.size(); i += 2) sum += LoadBe16(&b[i]);
  if (i < b.size()) sum += uint32_t{b[i]} << 8;
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return static_cast<uint16_t>(~sum);
}

TEST(ChecksumTest, Rfc1071Example) {
  // RFC 1071 section 3: words 0001 f203 f4f5 f6f7 sum to ddf2.
  const auto b = Hex("00 01 f2 03 f4 f5 f6 f7");
  ChecksumAccumulator acc;
  acc.Add(b);
  EXPECT_EQ(acc.Folded(), 0xddf2);
  EXPECT_EQ(acc.Checksum(), 0x220d);
}

TEST(ChecksumTest, Ipv4HeaderFromCaptureVerifiesToZero) {
  // An IPv4 header with a correct checksum (c8 5c) sums to 0xffff, so
  // computing over it, checksum field included, gives zero.
  const auto hdr = Hex(
      "45 00 00 3c 5e 4b 40 00 40 06 c8 5c 0a 09 00 01 0a 09 00 02");
  EXPECT_EQ(InternetChecksum(hdr), 0);
  auto zeroed = hdr;
  zeroed[10] = zeroed[11] = 0;
  EXPECT_EQ(InternetChecksum(zeroed), 0xc85c);
}

TEST(ChecksumTest, MatchesReferenceForEveryLengthAndAlignment) {
  std::mt19937 rng(1);
  std::vector<uint8_t> buf(5000);
  for (auto& b : buf) b = static_cast<uint8_t>(rng());
  for (size_t offset = 0; offset < 4; ++offset) {
    for (size_t len = 0; len + offset <= 1200; ++len) {
      std::span<const uint8_t> s(buf.data() + offset, len);
      ASSERT_EQ(InternetChecksum(s), ReferenceChecksum(s))
          << "offset " << offset << " len " << len;
    }
  }
  // Lengths that exercise the vector loop's block flush.
  std::vector<uint8_t> big(1 << 20);
  for (auto& b : big) b = 0xff;  // worst case for lane overflow
  for (size_t len : {65536u, 65537u, 524288u, 524351u, 1u << 20}) {
    std::span<const uint8_t> s(big.data(), len);
    ASSERT_EQ(InternetChecksum(s), ReferenceChecksum(s)) << len;
  }
}

TEST(ChecksumTest, ScatteredPiecesGiveSameSumAsWhole) {
  std::mt19937 rng(2);
  std::vector<uint8_t> buf(3001);
  for (auto& b : buf) b = static_cast<uint8_t>(rng());
  const uint16_t whole = InternetChecksum(buf);
  for (int trial = 0; trial < 200; ++trial) {
    ChecksumAccumulator acc;
    size_t pos = 0;
    while (pos < buf.size()) {
      size_t n = std::min<size_t>(rng() % 300, buf.size() - pos);
      acc.Add(std::span<const uint8_t>(buf.data() + pos, n));
      pos += n;
    }
    ASSERT_EQ(acc.Checksum(), whole) << "trial " << trial;
    ASSERT_EQ(acc.length(), buf.size());
  }
}

TEST(ChecksumTest, Ipv4PseudoHeaderMatchesManualLayout) {
  const auto src = *Ipv4Address::Parse("10.9.0.1");
  const auto dst = *Ipv4Address::Parse("10.9.0.2");
  const auto manual = Hex("0a 09 00 01 0a 09 00 02 00 06 00 28");
  ChecksumAccumulator acc;
  acc.Add(manual);
  EXPECT_EQ(Ipv4PseudoHeaderSum(src, dst, 6, 40), acc.Folded());
}

TEST(ChecksumTest, Ipv6PseudoHeaderMatchesManualLayout) {
  const auto src = *Ipv6Address::Parse("fd00:9::1");
  const auto dst = *Ipv6Address::Parse("fd00:9::2");
  std::vector<uint8_t> manual(src.bytes.begin(), src.bytes.end());
  manual.insert(manual.end(), dst.bytes.begin(), dst.bytes.end());
  for (uint8_t b : Hex("00 01 00 28 00 00 00 06")) manual.push_back(b);
  ChecksumAccumulator acc;
  acc.Add(manual);
  EXPECT_EQ(Ipv6PseudoHeaderSum(src, dst, 6, 0x10028), acc.Folded());
}

TEST(ChecksumTest, IncrementalUpdateMatchesRecompute) {
  std::mt19937 rng(3);
  std::vector<uint8_t> buf(60);
  for (int trial = 0; trial < 1000; ++trial) {
    for (auto& b : buf) b = static_cast<uint8_t>(rng());
    StoreBe16(&buf[10], 0);
    const uint16_t before = InternetChecksum(buf);
    StoreBe16(&buf[10], before);
    // Change a 16-bit word (like a TTL/protocol word) and a 32-bit field
    // (like an address) and update incrementally.
    const uint16_t old16 = LoadBe16(&buf[8]);
    const uint16_t new16 = static_cast<uint16_t>(rng());
    StoreBe16(&buf[8], new16);
    uint16_t updated = ChecksumUpdate16(before, old16, new16);
    const uint32_t old32 = LoadBe32(&buf[12]);
    const uint32_t new32 = static_cast<uint32_t>(rng());
    StoreBe32(&buf[12], new32);
    updated = ChecksumUpdate32(updated, old32, new32);
    // The updated field must verify: the whole buffer sums to zero.
    StoreBe16(&buf[10], updated);
    ASSERT_EQ(InternetChecksum(buf), 0) << "trial " << trial;
  }
}

TEST(ChecksumTest, Rfc1624NeverGivesNegativeZero) {
  // RFC 1624 section 3: when the updated data sums to 0xffff, equation 2
  // (RFC 1141) yields 0xffff, but the only checksum a full recompute can
  // give is 0x0000. Data words {0x1234, m}: m = 0 gives HC = ~0x1234 =
  // 0xedcb; m' = 0xedcb makes the sum 0xffff.
  const auto after = Hex("12 34 ed cb");
  EXPECT_EQ(InternetChecksum(after), 0x0000);
  EXPECT_EQ(ChecksumUpdate16(0xedcb, 0x0000, 0xedcb), 0x0000);
}

}  // namespace
}  // namespace netstack::wire
