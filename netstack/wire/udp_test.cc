#include "netstack/wire/udp.h"

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "gtest/gtest.h"
#include "netstack/wire/address.h"
#include "netstack/wire/checksum.h"
#include "netstack/wire/testing.h"

namespace netstack::wire {
namespace {

using testing::ExpectEveryTruncationFails;
using testing::Hex;

constexpr uint8_t kProtoUdp = 17;

// Real Linux datagrams (kernel 6.18), 10.9.0.1:5000 -> 10.9.0.2:9000 and
// fd00:9::1 -> fd00:9::2, captured with dumpcap on a veth pair between two
// network namespaces with transmit checksum offload off, so the checksums
// are the kernel's own; tshark reports them good.

// "hello udp": 9 bytes, an odd length.
const std::vector<uint8_t> kHello =
    Hex("13 88 23 28 00 11 8b b0 68 65 6c 6c 6f 20 75 64 70");
// "no checksum", sent from a socket with SO_NO_CHECK: checksum field 0.
const std::vector<uint8_t> kNoChecksum =
    Hex("13 88 23 28 00 13 00 00 6e 6f 20 63 68 65 63 6b 73 75 6d");
// "zero" plus two bytes chosen so that the checksum computes to 0, which
// Linux sends as 0xffff (RFC 768).
const std::vector<uint8_t> kComputedZero =
    Hex("13 88 23 28 00 0e ff ff 7a 65 72 6f c8 38");
// "hello udp6" over IPv6.
const std::vector<uint8_t> kHello6 =
    Hex("13 88 23 28 00 12 a5 76 68 65 6c 6c 6f 20 75 64 70 36");

constexpr Ipv4Address kHost1 = Ipv4Address::FromU32(0x0a090001);
constexpr Ipv4Address kHost2 = Ipv4Address::FromU32(0x0a090002);

uint16_t Pseudo4(size_t len) {
  return Ipv4PseudoHeaderSum(kHost1, kHost2, kProtoUdp, len);
}

uint16_t Pseudo6(size_t len) {
  return Ipv6PseudoHeaderSum(*Ipv6Address::Parse("fd00:9::1"),
                             *Ipv6Address::Parse("fd00:9::2"), kProtoUdp,
                             len);
}

struct Capture {
  std::string name;
  const std::vector<uint8_t>* bytes;
  uint16_t pseudo;
};

std::vector<Capture> Captures() {
  return {
      {"hello", &kHello, Pseudo4(kHello.size())},
      {"no_checksum", &kNoChecksum, Pseudo4(kNoChecksum.size())},
      {"computed_zero", &kComputedZero, Pseudo4(kComputedZero.size())},
      {"hello6", &kHello6, Pseudo6(kHello6.size())},
  };
}

WireError ParseBytes(std::span<const uint8_t> b) {
  UdpRepr r;
  return UdpRepr::Parse(UdpHeader(b), r);
}

UdpRepr MustParse(std::span<const uint8_t> b) {
  UdpRepr r;
  EXPECT_EQ(UdpRepr::Parse(UdpHeader(b), r), WireError::kOk);
  return r;
}

std::string_view AsText(std::span<const uint8_t> b) {
  return std::string_view(reinterpret_cast<const char*>(b.data()), b.size());
}

TEST(UdpTest, ParseLinuxDatagrams) {
  const UdpHeader h(kHello);
  ASSERT_EQ(h.Check(), WireError::kOk);
  EXPECT_EQ(h.Length(), 17);
  EXPECT_EQ(h.Checksum(), 0x8bb0);
  EXPECT_TRUE(h.HasChecksum());
  EXPECT_EQ(AsText(h.Payload()), "hello udp");
  EXPECT_EQ(h.Datagram().size(), kHello.size());
  EXPECT_EQ(MustParse(kHello), (UdpRepr{5000, 9000, 9}));

  EXPECT_EQ(MustParse(kNoChecksum), (UdpRepr{5000, 9000, 11}));
  EXPECT_FALSE(UdpHeader(kNoChecksum).HasChecksum());
  EXPECT_EQ(MustParse(kComputedZero), (UdpRepr{5000, 9000, 6}));
  EXPECT_EQ(MustParse(kHello6), (UdpRepr{5000, 9000, 10}));
  EXPECT_EQ(AsText(UdpHeader(kHello6).Payload()), "hello udp6");
}

TEST(UdpTest, LinuxDatagramsRoundTripByteExactly) {
  for (const Capture& c : Captures()) {
    SCOPED_TRACE(c.name);
    const std::vector<uint8_t>& bytes = *c.bytes;
    const UdpRepr r = MustParse(bytes);
    ASSERT_EQ(r.BufferLen(), 8u);
    std::vector<uint8_t> out(bytes.size(), 0xee);
    r.Emit(MutableUdpHeader(out));
    EXPECT_EQ(MutableUdpHeader(out).Checksum(), 0);
    const std::span<const uint8_t> payload = UdpHeader(bytes).Payload();
    std::copy(payload.begin(), payload.end(), out.begin() + r.BufferLen());
    // SO_NO_CHECK: the sender leaves Emit's zero in place.
    if (UdpHeader(bytes).HasChecksum()) {
      MutableUdpHeader(out).FillChecksum(c.pseudo);
    }
    EXPECT_EQ(out, bytes);
  }
}

TEST(UdpTest, ComputedZeroIsSentAsAllOnes) {
  // The plain Internet checksum over pseudo-header and datagram (field
  // zeroed) really is 0 ...
  std::vector<uint8_t> zeroed = kComputedZero;
  zeroed[UdpHeader::kChecksumOffset] = 0;
  zeroed[UdpHeader::kChecksumOffset + 1] = 0;
  ChecksumAccumulator acc;
  acc.AddFolded(Pseudo4(zeroed.size()));
  acc.Add(zeroed);
  EXPECT_EQ(acc.Checksum(), 0);
  // ... and UDP turns it into 0xffff, which a receiver verifies normally.
  const uint16_t pseudo = Pseudo4(zeroed.size());
  EXPECT_EQ(UdpHeader(zeroed).ComputeChecksum(pseudo), 0xffff);
  MutableUdpHeader(zeroed).FillChecksum(pseudo);
  EXPECT_EQ(zeroed, kComputedZero);
  EXPECT_TRUE(UdpHeader(kComputedZero)
                  .ChecksumValid(pseudo, UdpZeroChecksum::kReject));
}

TEST(UdpTest, ChecksumValidity) {
  for (const Capture& c : Captures()) {
    SCOPED_TRACE(c.name);
    const UdpHeader h(*c.bytes);
    // A zero field is accepted only where the caller says it may be.
    const bool has = h.HasChecksum();
    EXPECT_TRUE(h.ChecksumValid(c.pseudo, UdpZeroChecksum::kAccept));
    EXPECT_EQ(h.ChecksumValid(c.pseudo, UdpZeroChecksum::kReject), has);
    if (has) {
      EXPECT_EQ(h.ComputeChecksum(c.pseudo), h.Checksum());
    }
  }
}

TEST(UdpTest, CorruptionInvalidatesChecksum) {
  for (const Capture& c : Captures()) {
    if (!UdpHeader(*c.bytes).HasChecksum()) continue;
    SCOPED_TRACE(c.name);
    for (size_t i = 0; i < c.bytes->size(); ++i) {
      // Bytes 4-5 are the Length: changing it either fails Check() or moves
      // the payload boundary, and the pseudo-header no longer matches.
      std::vector<uint8_t> bad = *c.bytes;
      bad[i] ^= 0x01;
      const UdpHeader h(bad);
      if (h.Check() != WireError::kOk) continue;
      EXPECT_FALSE(h.ChecksumValid(c.pseudo, UdpZeroChecksum::kAccept))
          << "byte " << i;
    }
  }
}

TEST(UdpTest, ZeroChecksumOverIpv6IsRejected) {
  // RFC 8200 section 8.1: an IPv6 receiver discards a zero checksum.
  std::vector<uint8_t> b = kHello6;
  MutableUdpHeader(b).SetChecksum(0);
  const UdpHeader h(b);
  EXPECT_FALSE(h.ChecksumValid(Pseudo6(b.size()), UdpZeroChecksum::kReject));
  EXPECT_TRUE(h.ChecksumValid(Pseudo6(b.size()), UdpZeroChecksum::kAccept));
}

TEST(UdpTest, TrailingPaddingIsIgnored) {
  // kHello in a minimum-size Ethernet frame: 20 (IPv4) + 17 = 37 bytes of
  // a 46-byte payload, 9 bytes of padding after the datagram.
  std::vector<uint8_t> padded = kHello;
  padded.resize(kHello.size() + 9, 0);
  const UdpHeader h(padded);
  ASSERT_EQ(h.Check(), WireError::kOk);
  EXPECT_EQ(MustParse(padded), MustParse(kHello));
  EXPECT_EQ(AsText(h.Payload()), "hello udp");
  EXPECT_EQ(h.Datagram().size(), kHello.size());
  const uint16_t pseudo = Pseudo4(kHello.size());
  EXPECT_TRUE(h.ChecksumValid(pseudo, UdpZeroChecksum::kReject));
  // Nonzero padding changes nothing either.
  std::fill(padded.begin() + kHello.size(), padded.end(), 0xa5);
  EXPECT_TRUE(UdpHeader(padded).ChecksumValid(pseudo,
                                              UdpZeroChecksum::kReject));
  MutableUdpHeader(padded).FillChecksum(pseudo);
  EXPECT_EQ(UdpHeader(padded).Checksum(), 0x8bb0);
}

TEST(UdpTest, ScatteredPayloadChecksumEqualsContiguous) {
  for (const Capture& c : Captures()) {
    SCOPED_TRACE(c.name);
    const UdpHeader whole(*c.bytes);
    const std::span<const uint8_t> payload = whole.Payload();
    const uint16_t contiguous = whole.ComputeChecksum(c.pseudo);
    for (size_t a = 0; a <= payload.size(); ++a) {
      for (size_t b = a; b <= payload.size(); ++b) {
        ChecksumAccumulator acc;
        acc.Add(payload.first(a));
        acc.Add(payload.subspan(a, b - a));
        acc.Add(payload.subspan(b));
        // Only the 8 header bytes, as when the payload lives in chunks.
        std::vector<uint8_t> header(c.bytes->begin(), c.bytes->begin() + 8);
        MutableUdpHeader h(header);
        ASSERT_EQ(h.ComputeChecksum(c.pseudo, acc), contiguous) << a << b;
        h.FillChecksum(c.pseudo, acc);
        ASSERT_EQ(h.Checksum(), contiguous);
        ASSERT_TRUE(
            h.ChecksumValid(c.pseudo, acc, UdpZeroChecksum::kReject));
      }
    }
  }
}

TEST(UdpTest, HandBuiltReprEmitsAndParsesBack) {
  const UdpRepr r{53, 33000, 4};
  std::vector<uint8_t> out(12, 0xee);
  r.Emit(MutableUdpHeader(out));
  EXPECT_EQ(out, Hex("00 35 80 e8 00 0c 00 00 ee ee ee ee"));
  EXPECT_EQ(MustParse(out), r);

  // Empty payload: Length 8.
  const UdpRepr empty{1, 2, 0};
  std::vector<uint8_t> e(8);
  empty.Emit(MutableUdpHeader(e));
  EXPECT_EQ(e, Hex("00 01 00 02 00 08 00 00"));
  EXPECT_EQ(MustParse(e), empty);
  EXPECT_TRUE(UdpHeader(e).Payload().empty());

  // The largest payload the Length field can describe.
  UdpRepr big{7, 8, static_cast<uint16_t>(UdpHeader::kMaxPayloadLen)};
  std::vector<uint8_t> hb(8);
  big.Emit(MutableUdpHeader(hb));
  EXPECT_EQ(hb, Hex("00 07 00 08 ff ff 00 00"));
}

TEST(UdpTest, SettersWriteTheirFields) {
  std::vector<uint8_t> b(8, 0);
  MutableUdpHeader h(b);
  h.SetSrcPort(0x0102);
  h.SetDstPort(0x0304);
  h.SetLength(0x0506);
  h.SetChecksum(0x0708);
  EXPECT_EQ(b, Hex("01 02 03 04 05 06 07 08"));
  const UdpHeader v(b);
  EXPECT_EQ(v.SrcPort(), 0x0102);
  EXPECT_EQ(v.DstPort(), 0x0304);
  EXPECT_EQ(v.Length(), 0x0506);
  EXPECT_EQ(v.Checksum(), 0x0708);
}

TEST(UdpTest, TruncatedAtEveryLength) {
  for (const Capture& c : Captures()) {
    SCOPED_TRACE(c.name);
    // Below 8 bytes kTruncated, from 8 up the Length field exceeds the
    // buffer (kBadLength); both are checked specifically below.
    ExpectEveryTruncationFails(*c.bytes, ParseBytes, WireError::kOk);
  }
}

TEST(UdpTest, ShortBufferErrors) {
  const std::span<const uint8_t> hello(kHello);
  ExpectEveryTruncationFails(hello.first(8), ParseBytes,
                             WireError::kTruncated);
  for (size_t len = 8; len < kHello.size(); ++len) {
    std::vector<uint8_t> prefix(hello.begin(), hello.begin() + len);
    EXPECT_EQ(ParseBytes(prefix), WireError::kBadLength) << len;
  }
}

TEST(UdpTest, BadLengthField) {
  for (uint16_t length : {0, 1, 7}) {
    std::vector<uint8_t> b = kHello;
    MutableUdpHeader(b).SetLength(length);
    EXPECT_EQ(UdpHeader(b).Check(), WireError::kBadLength) << length;
    EXPECT_EQ(ParseBytes(b), WireError::kBadLength) << length;
  }
  std::vector<uint8_t> b = kHello;
  MutableUdpHeader(b).SetLength(18);  // one more than the buffer holds
  EXPECT_EQ(ParseBytes(b), WireError::kBadLength);
  MutableUdpHeader(b).SetLength(0xffff);
  EXPECT_EQ(ParseBytes(b), WireError::kBadLength);
  MutableUdpHeader(b).SetLength(8);  // shorter than the buffer is fine
  EXPECT_EQ(MustParse(b).payload_len, 0);
}

}  // namespace
}  // namespace netstack::wire
