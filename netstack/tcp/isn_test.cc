#include "netstack/tcp/isn.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace netstack::tcp {
namespace {

using transport::FourTuple;
using transport::IpAddress;

SipKey ReferenceKey() {
  SipKey k;
  for (int i = 0; i < 16; ++i) k[i] = static_cast<uint8_t>(i);
  return k;
}

// The SipHash-2-4 reference vectors (the paper's reference code): key
// 00 01 .. 0f, message 00 01 .. (n-1), for n = 0..63.
constexpr uint64_t kVectors[64] = {
    0x726fdb47dd0e0e31, 0x74f839c593dc67fd, 0x0d6c8009d9a94f5a,
    0x85676696d7fb7e2d, 0xcf2794e0277187b7, 0x18765564cd99a68d,
    0xcbc9466e58fee3ce, 0xab0200f58b01d137, 0x93f5f5799a932462,
    0x9e0082df0ba9e4b0, 0x7a5dbbc594ddb9f3, 0xf4b32f46226bada7,
    0x751e8fbc860ee5fb, 0x14ea5627c0843d90, 0xf723ca908e7af2ee,
    0xa129ca6149be45e5, 0x3f2acc7f57c29bdb, 0x699ae9f52cbe4794,
    0x4bc1b3f0968dd39c, 0xbb6dc91da77961bd, 0xbed65cf21aa2ee98,
    0xd0f2cbb02e3b67c7, 0x93536795e3a33e88, 0xa80c038ccd5ccec8,
    0xb8ad50c6f649af94, 0xbce192de8a85b8ea, 0x17d835b85bbb15f3,
    0x2f2e6163076bcfad, 0xde4daaaca71dc9a5, 0xa6a2506687956571,
    0xad87a3535c49ef28, 0x32d892fad841c342, 0x7127512f72f27cce,
    0xa7f32346f95978e3, 0x12e0b01abb051238, 0x15e034d40fa197ae,
    0x314dffbe0815a3b4, 0x027990f029623981, 0xcadcd4e59ef40c4d,
    0x9abfd8766a33735c, 0x0e3ea96b5304a7d0, 0xad0c42d6fc585992,
    0x187306c89bc215a9, 0xd4a60abcf3792b95, 0xf935451de4f21df2,
    0xa9538f0419755787, 0xdb9acddff56ca510, 0xd06c98cd5c0975eb,
    0xe612a3cb9ecba951, 0xc766e62cfcadaf96, 0xee64435a9752fe72,
    0xa192d576b245165a, 0x0a8787bf8ecb74b2, 0x81b3e73d20b49b6f,
    0x7fa8220ba3b2ecea, 0x245731c13ca42499, 0xb78dbfaf3a8d83bd,
    0xea1ad565322a1a0b, 0x60e61c23a3795013, 0x6606d7e446282b93,
    0x6ca4ecb15c5f91e1, 0x9f626da15c9625f3, 0xe51b38608ef25f57,
    0x958a324ceb064572,
};

TEST(SipHashTest, ReferenceVectors) {
  std::array<uint8_t, 64> msg;
  for (int i = 0; i < 64; ++i) msg[i] = static_cast<uint8_t>(i);
  for (size_t n = 0; n < 64; ++n) {
    EXPECT_EQ(SipHash24(ReferenceKey(), std::span(msg).first(n)), kVectors[n])
        << "n = " << n;
  }
}

TEST(SipHashTest, PaperAppendixExample) {
  // Appendix A: the 15-byte message 00..0e.
  const std::vector<uint8_t> msg = {0, 1, 2,  3,  4,  5,  6, 7,
                                    8, 9, 10, 11, 12, 13, 14};
  EXPECT_EQ(SipHash24(ReferenceKey(), msg), 0xa129ca6149be45e5u);
}

TEST(SipHashTest, KeyMatters) {
  SipKey zero{};
  EXPECT_EQ(SipHash24(zero, {}), 0x1e924b9d737700d7u);
  EXPECT_NE(SipHash24(zero, {}), SipHash24(ReferenceKey(), {}));
}

const Instant kT0 = absl::UnixEpoch() + absl::Seconds(1'700'000'000);

FourTuple Tuple(const char* local, uint16_t lport, const char* remote,
                uint16_t rport) {
  return FourTuple{{*IpAddress::Parse(local), lport},
                   {*IpAddress::Parse(remote), rport}};
}

SipKey Key(uint8_t seed) {
  SipKey k;
  for (int i = 0; i < 16; ++i) k[i] = static_cast<uint8_t>(seed * 31 + i);
  return k;
}

TEST(SerializeFourTupleTest, LayoutIsLocalThenRemoteInNetworkOrder) {
  std::array<uint8_t, kMaxFourTupleBytes> buf{};
  ASSERT_EQ(SerializeFourTuple(Tuple("10.0.0.1", 8080, "10.0.0.2", 50000), buf),
            12u);
  const std::array<uint8_t, 12> want = {10, 0, 0, 1, 0x1f, 0x90,
                                        10, 0, 0, 2, 0xc3, 0x50};
  EXPECT_TRUE(std::equal(want.begin(), want.end(), buf.begin()));
  EXPECT_EQ(SerializeFourTuple(Tuple("fd00::1", 1, "fd00::2", 2), buf), 36u);
  EXPECT_EQ(buf[0], 0xfd);
  EXPECT_EQ(buf[15], 0x01);
  EXPECT_EQ(buf[17], 0x01);  // local port, low byte
  EXPECT_EQ(buf[18], 0xfd);
  EXPECT_EQ(buf[33], 0x02);
  EXPECT_EQ(buf[35], 0x02);
}

TEST(IsnGeneratorTest, IsClockPlusKeyedHashOfTheTuple) {
  const IsnGenerator gen(Key(1));
  const FourTuple t = Tuple("10.0.0.1", 8080, "10.0.0.2", 50000);
  const std::array<uint8_t, 12> bytes = {10, 0, 0, 1, 0x1f, 0x90,
                                         10, 0, 0, 2, 0xc3, 0x50};
  const auto f = static_cast<uint32_t>(SipHash24(Key(1), bytes));
  const auto m = static_cast<uint32_t>(1'700'000'000'000'000 / 4);
  EXPECT_EQ(gen.Next(t, kT0).value(), m + f);
}

TEST(IsnGeneratorTest, DeterministicForSameKeyTupleAndTime) {
  const FourTuple t = Tuple("10.0.0.1", 80, "192.0.2.7", 40000);
  EXPECT_EQ(IsnGenerator(Key(1)).Next(t, kT0),
            IsnGenerator(Key(1)).Next(t, kT0));
}

TEST(IsnGeneratorTest, DiffersAcrossTuplesAndKeys) {
  const IsnGenerator gen(Key(1));
  const FourTuple t = Tuple("10.0.0.1", 80, "192.0.2.7", 40000);
  const SeqNum isn = gen.Next(t, kT0);
  EXPECT_NE(gen.Next(Tuple("10.0.0.1", 80, "192.0.2.7", 40001), kT0), isn);
  EXPECT_NE(gen.Next(Tuple("10.0.0.1", 81, "192.0.2.7", 40000), kT0), isn);
  EXPECT_NE(gen.Next(Tuple("10.0.0.1", 80, "192.0.2.8", 40000), kT0), isn);
  EXPECT_NE(gen.Next(Tuple("10.0.0.2", 80, "192.0.2.7", 40000), kT0), isn);
  // Swapping the ends is another connection's name.
  EXPECT_NE(gen.Next(Tuple("192.0.2.7", 40000, "10.0.0.1", 80), kT0), isn);
  EXPECT_NE(
      gen.Next(Tuple("::ffff:10.0.0.1", 80, "::ffff:192.0.2.7", 40000), kT0),
      isn);
  EXPECT_NE(IsnGenerator(Key(2)).Next(t, kT0), isn);
}

TEST(IsnGeneratorTest, AdvancesOnePer4Microseconds) {
  const IsnGenerator gen(Key(3));
  const FourTuple t = Tuple("fd00::1", 443, "fd00::99", 51515);
  const SeqNum isn = gen.Next(t, kT0);  // kT0 is on a 4 us tick
  EXPECT_EQ(gen.Next(t, kT0 + absl::Microseconds(3)) - isn, 0);
  EXPECT_EQ(gen.Next(t, kT0 + absl::Microseconds(4)) - isn, 1);
  EXPECT_EQ(gen.Next(t, kT0 + absl::Microseconds(400)) - isn, 100);
  EXPECT_EQ(gen.Next(t, kT0 + absl::Seconds(1)) - isn, 250'000);
  // Wraps modulo 2^32 after 2^32 * 4 us (4.77 hours).
  EXPECT_EQ(gen.Next(t, kT0 + absl::Microseconds(uint64_t{4} << 32)), isn);
}

}  // namespace
}  // namespace netstack::tcp
