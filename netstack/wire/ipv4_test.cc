#include "netstack/wire/ipv4.h"

#include <algorithm>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "gtest/gtest.h"
#include "netstack/wire/testing.h"

namespace netstack::wire {
namespace {

using testing::ExpectEveryTruncationFails;
using testing::Hex;

// A Linux TCP SYN, 10.9.0.1:51234 -> 10.9.0.2:80, with MSS, SACK-permitted,
// timestamps and window scale options.
const std::vector<uint8_t> kSyn =
    Hex("45 00 00 3c 1c 46 40 00 40 06 0a 62 0a 09 00 01"
        "0a 09 00 02 c8 22 00 50 5f 3c 2a 11 00 00 00 00"
        "a0 02 fa f0 90 c4 00 00 02 04 05 b4 04 02 08 0a"
        "1c 2b 3a 4b 00 00 00 00 01 03 03 07");

// An IGMPv2 report for 224.0.0.251 as Linux sends it: TOS 0xc0, TTL 1, and
// the Router Alert option (RFC 2113) that IGMP requires (RFC 2236 section
// 2).
const std::vector<uint8_t> kIgmpRouterAlert =
    Hex("46 c0 00 20 00 00 40 00 01 02 f9 12 0a 09 00 01"
        "e0 00 00 fb 94 04 00 00 16 00 09 04 e0 00 00 fb");

// `ping -R`: an echo request with a Record Route option of 9 empty slots
// (length 39, pointer 4) and End of Option List: the 60-byte maximum.
const std::vector<uint8_t> kRecordRoute =
    Hex("4f 00 00 4c 3f 01 40 00 40 01 d2 74 0a 09 00 01"
        "0a 09 00 02 07 27 04 00 00 00 00 00 00 00 00 00"
        "00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00"
        "00 00 00 00 00 00 00 00 00 00 00 00 08 00 81 93"
        "2a 1b 00 01 10 11 12 13 14 15 16 17");

// A middle fragment: More Fragments set, offset 185 units (1480 bytes),
// 8 bytes of UDP payload.
const std::vector<uint8_t> kFragment =
    Hex("45 00 00 1c be ef 20 b9 40 11 87 14 0a 09 00 01"
        "0a 09 00 02 00 01 02 03 04 05 06 07");

const std::vector<const std::vector<uint8_t>*> kAllValid = {
    &kSyn, &kIgmpRouterAlert, &kRecordRoute, &kFragment};

Ipv4Address Ip(const char* text) { return *Ipv4Address::Parse(text); }

WireError ParseBytes(std::span<const uint8_t> b) {
  Ipv4Repr r;
  return Ipv4Repr::Parse(Ipv4Packet(b), r);
}

// Emits `r` into a header-sized buffer.
std::vector<uint8_t> EmitHeader(const Ipv4Repr& r) {
  std::vector<uint8_t> out(r.BufferLen(), 0xee);
  r.Emit(MutableIpv4Packet(out));
  return out;
}

std::vector<uint8_t> HeaderOf(const std::vector<uint8_t>& bytes) {
  const size_t len = size_t{bytes[0] & 0x0fu} * 4;
  return std::vector<uint8_t>(bytes.begin(), bytes.begin() + len);
}

TEST(Ipv4Test, ParseLinuxSyn) {
  const Ipv4Packet p(kSyn);
  ASSERT_EQ(p.Check(), WireError::kOk);
  EXPECT_EQ(p.Version(), 4);
  EXPECT_EQ(p.Ihl(), 5);
  EXPECT_EQ(p.HeaderLen(), 20u);
  EXPECT_EQ(p.TotalLength(), 60);
  EXPECT_EQ(p.HeaderChecksum(), 0x0a62);
  EXPECT_TRUE(p.HeaderChecksumValid());
  EXPECT_TRUE(p.Options().empty());
  ASSERT_EQ(p.Payload().size(), 40u);
  EXPECT_EQ(p.Payload()[0], 0xc8);  // TCP source port 51234
  EXPECT_FALSE(p.IsFragment());

  Ipv4Repr r;
  ASSERT_EQ(Ipv4Repr::Parse(p, r), WireError::kOk);
  EXPECT_EQ(r.src, Ip("10.9.0.1"));
  EXPECT_EQ(r.dst, Ip("10.9.0.2"));
  EXPECT_EQ(r.protocol, static_cast<uint8_t>(IpProtocol::kTcp));
  EXPECT_EQ(r.ttl, 64);
  EXPECT_EQ(r.dscp_ecn, 0);
  EXPECT_EQ(r.ident, 0x1c46);
  EXPECT_TRUE(r.dont_fragment);
  EXPECT_FALSE(r.more_fragments);
  EXPECT_EQ(r.fragment_offset, 0);
  EXPECT_EQ(r.payload_len, 40);
  EXPECT_TRUE(r.options.empty());
  EXPECT_EQ(r.HeaderLen(), 20u);
  EXPECT_EQ(r.TotalLen(), 60u);
}

TEST(Ipv4Test, ParseRouterAlertOption) {
  const Ipv4Packet p(kIgmpRouterAlert);
  ASSERT_EQ(p.Check(), WireError::kOk);
  EXPECT_EQ(p.HeaderLen(), 24u);
  EXPECT_EQ(p.Dscp(), 48);  // CS6, network control
  EXPECT_EQ(p.Ecn(), 0);
  EXPECT_TRUE(p.HeaderChecksumValid());
  EXPECT_EQ(p.Payload().size(), 8u);
  EXPECT_EQ(p.Payload()[0], 0x16);  // IGMPv2 membership report

  Ipv4Repr r;
  ASSERT_EQ(Ipv4Repr::Parse(p, r), WireError::kOk);
  EXPECT_EQ(r.dst, Ip("224.0.0.251"));
  EXPECT_EQ(r.protocol, 2);  // IGMP
  EXPECT_EQ(r.ttl, 1);
  EXPECT_EQ(r.dscp_ecn, 0xc0);
  EXPECT_EQ(r.payload_len, 8);
  EXPECT_EQ(
      std::vector<uint8_t>(r.options.span().begin(), r.options.span().end()),
      Hex("94 04 00 00"));

  Ipv4OptionReader reader(p.Options());
  Ipv4Option opt;
  ASSERT_TRUE(reader.Next(opt));
  EXPECT_EQ(opt.type, static_cast<uint8_t>(Ipv4OptionType::kRouterAlert));
  EXPECT_EQ(std::vector<uint8_t>(opt.data.begin(), opt.data.end()),
            Hex("00 00"));
  EXPECT_FALSE(reader.Next(opt));
}

TEST(Ipv4Test, ParseRecordRouteAtMaximumHeaderLength) {
  const Ipv4Packet p(kRecordRoute);
  ASSERT_EQ(p.Check(), WireError::kOk);
  EXPECT_EQ(p.HeaderLen(), Ipv4Packet::kMaxHeaderLen);
  EXPECT_EQ(p.Options().size(), Ipv4Packet::kMaxOptionsLen);
  EXPECT_EQ(p.Payload().size(), 16u);
  EXPECT_TRUE(p.HeaderChecksumValid());

  Ipv4Repr r;
  ASSERT_EQ(Ipv4Repr::Parse(p, r), WireError::kOk);
  EXPECT_EQ(r.protocol, static_cast<uint8_t>(IpProtocol::kIcmp));
  EXPECT_EQ(r.options.size(), 40u);
  EXPECT_EQ(r.payload_len, 16);

  Ipv4OptionReader reader(p.Options());
  Ipv4Option opt;
  ASSERT_TRUE(reader.Next(opt));
  EXPECT_EQ(opt.type, static_cast<uint8_t>(Ipv4OptionType::kRecordRoute));
  ASSERT_EQ(opt.data.size(), 37u);
  EXPECT_EQ(opt.data[0], 4);  // pointer to the first empty slot
  // The 40th byte is End of Option List.
  EXPECT_FALSE(reader.Next(opt));
}

TEST(Ipv4Test, ParseFragmentFields) {
  const Ipv4Packet p(kFragment);
  ASSERT_EQ(p.Check(), WireError::kOk);
  EXPECT_TRUE(p.MoreFragments());
  EXPECT_FALSE(p.DontFragment());
  EXPECT_FALSE(p.ReservedFlag());
  EXPECT_EQ(p.FragOffsetUnits(), 185);
  EXPECT_EQ(p.FragOffsetBytes(), 1480);
  EXPECT_TRUE(p.IsFragment());

  Ipv4Repr r;
  ASSERT_EQ(Ipv4Repr::Parse(p, r), WireError::kOk);
  EXPECT_EQ(r.ident, 0xbeef);
  EXPECT_TRUE(r.more_fragments);
  EXPECT_FALSE(r.dont_fragment);
  EXPECT_EQ(r.fragment_offset, 1480);
  EXPECT_EQ(r.protocol, static_cast<uint8_t>(IpProtocol::kUdp));
  EXPECT_EQ(r.payload_len, 8);
}

TEST(Ipv4Test, LastFragmentHasOffsetWithoutMoreFragments) {
  std::vector<uint8_t> b = kFragment;
  b[6] = 0x00;  // clear MF, keep offset 185
  const Ipv4Packet p(b);
  ASSERT_EQ(p.Check(), WireError::kOk);
  EXPECT_FALSE(p.MoreFragments());
  EXPECT_TRUE(p.IsFragment());
}

TEST(Ipv4Test, EmitRoundTripsEveryLiteral) {
  for (const auto* bytes : kAllValid) {
    Ipv4Repr r;
    ASSERT_EQ(Ipv4Repr::Parse(Ipv4Packet(*bytes), r), WireError::kOk);
    EXPECT_EQ(r.TotalLen(), bytes->size());
    EXPECT_EQ(EmitHeader(r), HeaderOf(*bytes));
  }
}

TEST(Ipv4Test, EthernetPaddingIsNotPayload) {
  // A 28-byte datagram in a minimum Ethernet frame: 18 bytes of padding.
  std::vector<uint8_t> b = kFragment;
  b.resize(46, 0x00);
  const Ipv4Packet p(b);
  ASSERT_EQ(p.Check(), WireError::kOk);
  EXPECT_EQ(p.Payload().size(), 8u);
  EXPECT_EQ(p.Payload().data() + p.Payload().size(), b.data() + 28);
  Ipv4Repr r;
  ASSERT_EQ(Ipv4Repr::Parse(p, r), WireError::kOk);
  EXPECT_EQ(r.payload_len, 8);
}

TEST(Ipv4Test, ConstructThenParse) {
  Ipv4Repr r;
  r.src = Ip("10.9.0.2");
  r.dst = Ip("10.9.0.1");
  r.protocol = static_cast<uint8_t>(IpProtocol::kIcmp);
  r.ttl = 64;
  r.ident = 0x7a2b;
  r.dont_fragment = true;
  r.payload_len = 64;
  const std::vector<uint8_t> out = EmitHeader(r);
  EXPECT_EQ(out, Hex("45 00 00 54 7a 2b 40 00 40 01 ac 69 0a 09 00 02"
                     "0a 09 00 01"));
  EXPECT_TRUE(Ipv4Packet(out).HeaderChecksumValid());

  // Parse needs the payload Total Length promises.
  std::vector<uint8_t> datagram = out;
  datagram.resize(r.TotalLen());
  Ipv4Repr back;
  ASSERT_EQ(Ipv4Repr::Parse(Ipv4Packet(datagram), back), WireError::kOk);
  EXPECT_EQ(back, r);
}

TEST(Ipv4Test, ConstructWithUnalignedOptionsPadsWithEndOfList) {
  Ipv4Repr r;
  r.src = Ip("10.0.0.1");
  r.dst = Ip("10.0.0.2");
  r.protocol = static_cast<uint8_t>(IpProtocol::kUdp);
  r.ttl = 255;
  r.dscp_ecn = 0xb8;  // EF
  r.ident = 1;
  r.payload_len = 8;
  const std::vector<uint8_t> nops = Hex("01 01 01");
  ASSERT_TRUE(r.options.Assign(nops));
  EXPECT_EQ(r.HeaderLen(), 24u);
  const std::vector<uint8_t> out = EmitHeader(r);
  EXPECT_EQ(out, Hex("46 b8 00 20 00 01 00 00 ff 11 a4 10 0a 00 00 01"
                     "0a 00 00 02 01 01 01 00"));

  std::vector<uint8_t> datagram = out;
  datagram.resize(r.TotalLen());
  Ipv4Repr back;
  ASSERT_EQ(Ipv4Repr::Parse(Ipv4Packet(datagram), back), WireError::kOk);
  // Back comes the padded area; everything else is equal.
  EXPECT_EQ(back.options.size(), 4u);
  Ipv4Repr padded = r;
  ASSERT_TRUE(padded.options.Assign(Hex("01 01 01 00")));
  EXPECT_EQ(back, padded);
}

TEST(Ipv4Test, EmitFragmentFields) {
  Ipv4Repr r;
  r.src = Ip("10.9.0.1");
  r.dst = Ip("10.9.0.2");
  r.protocol = static_cast<uint8_t>(IpProtocol::kUdp);
  r.ident = 0xbeef;
  r.more_fragments = true;
  r.fragment_offset = 1480;
  r.payload_len = 8;
  EXPECT_EQ(EmitHeader(r), HeaderOf(kFragment));
}

TEST(Ipv4Test, OptionBytesRejectsMoreThanFortyBytes) {
  Ipv4OptionBytes o;
  const std::vector<uint8_t> big(41, 1);
  EXPECT_FALSE(o.Assign(big));
  EXPECT_TRUE(o.empty());
  EXPECT_TRUE(o.Assign(std::span<const uint8_t>(big).first(40)));
  EXPECT_EQ(o.size(), 40u);
}

// The error a prefix of `full` of length `len` must give: the fixed header
// first, then the IHL against the buffer, then Total Length against it.
WireError ExpectedForPrefix(const std::vector<uint8_t>& full, size_t len) {
  if (len < 20) return WireError::kTruncated;
  if (len < size_t{full[0] & 0x0fu} * 4) return WireError::kBadHeaderLength;
  return WireError::kBadLength;
}

TEST(Ipv4Test, TruncatedAtEveryLength) {
  for (const auto* bytes : kAllValid) {
    // The fixed header alone: every prefix is plainly truncated.
    ExpectEveryTruncationFails(std::span<const uint8_t>(*bytes).first(20),
                               ParseBytes);
    // The whole datagram: each prefix fails with the error of the first
    // length field it contradicts.
    ExpectEveryTruncationFails(
        *bytes,
        [bytes](std::span<const uint8_t> b) {
          const WireError e = ParseBytes(b);
          EXPECT_EQ(e, ExpectedForPrefix(*bytes, b.size()))
              << "prefix length " << b.size();
          return e;
        },
        WireError::kOk);
  }
}

TEST(Ipv4Test, RejectsVersion6) {
  std::vector<uint8_t> b = kSyn;
  b[0] = 0x65;
  EXPECT_EQ(ParseBytes(b), WireError::kBadVersion);
  b[0] = 0x05;  // version 0 too
  EXPECT_EQ(ParseBytes(b), WireError::kBadVersion);
}

TEST(Ipv4Test, RejectsIhlBelowFive) {
  for (uint8_t ihl = 0; ihl < 5; ++ihl) {
    std::vector<uint8_t> b = kSyn;
    b[0] = static_cast<uint8_t>(0x40 | ihl);
    EXPECT_EQ(ParseBytes(b), WireError::kBadHeaderLength) << int{ihl};
  }
}

TEST(Ipv4Test, RejectsIhlBeyondBuffer) {
  std::vector<uint8_t> b = kFragment;  // 28 bytes
  b[0] = 0x48;                         // 32-byte header
  EXPECT_EQ(ParseBytes(b), WireError::kBadHeaderLength);
  b = kFragment;
  b[0] = 0x4f;  // 60-byte header
  EXPECT_EQ(ParseBytes(b), WireError::kBadHeaderLength);
}

TEST(Ipv4Test, RejectsTotalLengthBelowHeaderLength) {
  std::vector<uint8_t> b = kSyn;
  b[2] = 0x00;
  b[3] = 19;
  EXPECT_EQ(ParseBytes(b), WireError::kBadLength);
  b[3] = 0;
  EXPECT_EQ(ParseBytes(b), WireError::kBadLength);
  // With options: 22 covers the fixed header but not the 24-byte header.
  b = kIgmpRouterAlert;
  b[3] = 22;
  EXPECT_EQ(ParseBytes(b), WireError::kBadLength);
  // Exactly the header is fine: an empty payload.
  b[3] = 24;
  ASSERT_EQ(ParseBytes(b), WireError::kOk);
  EXPECT_TRUE(Ipv4Packet(b).Payload().empty());
}

TEST(Ipv4Test, RejectsTotalLengthBeyondBuffer) {
  std::vector<uint8_t> b = kSyn;
  b[3] = 61;
  EXPECT_EQ(ParseBytes(b), WireError::kBadLength);
  b[2] = 0xff;
  b[3] = 0xff;
  EXPECT_EQ(ParseBytes(b), WireError::kBadLength);
}

// Replaces the Router Alert option area of kIgmpRouterAlert.
std::vector<uint8_t> WithOptions(std::string_view hex4) {
  std::vector<uint8_t> b = kIgmpRouterAlert;
  const std::vector<uint8_t> opts = Hex(hex4);
  std::copy(opts.begin(), opts.end(), b.begin() + 20);
  return b;
}

TEST(Ipv4Test, RejectsOptionLengthBelowTwo) {
  EXPECT_EQ(ParseBytes(WithOptions("94 00 00 00")),
            WireError::kBadOptionLength);
  EXPECT_EQ(ParseBytes(WithOptions("94 01 00 00")),
            WireError::kBadOptionLength);
  // An unknown kind gets the same generic check.
  EXPECT_EQ(ParseBytes(WithOptions("01 9e 00 00")),
            WireError::kBadOptionLength);
}

TEST(Ipv4Test, RejectsOptionLengthWrongForKind) {
  // Router Alert is exactly 4 bytes (RFC 2113 section 2.1).
  EXPECT_EQ(ParseBytes(WithOptions("94 02 00 00")),
            WireError::kBadOptionLength);
  // Record Route needs its pointer byte.
  EXPECT_EQ(ParseBytes(WithOptions("07 02 00 00")),
            WireError::kBadOptionLength);
  // Timestamp needs pointer and overflow/flags.
  EXPECT_EQ(ParseBytes(WithOptions("44 03 05 00")),
            WireError::kBadOptionLength);
}

TEST(Ipv4Test, RejectsOptionRunningPastHeader) {
  // Length 5 in a 4-byte area, for a known and an unknown kind.
  EXPECT_EQ(ParseBytes(WithOptions("07 05 04 00")), WireError::kOptionOverflow);
  EXPECT_EQ(ParseBytes(WithOptions("9e 05 00 00")), WireError::kOptionOverflow);
  // Record Route claiming 39 bytes in a 4-byte area.
  EXPECT_EQ(ParseBytes(WithOptions("07 27 04 00")), WireError::kOptionOverflow);
  // A kind byte in the last position, with no room for its length byte.
  EXPECT_EQ(ParseBytes(WithOptions("01 01 01 44")), WireError::kOptionOverflow);
  // The same options with the maximum header: RR one byte too long.
  std::vector<uint8_t> b = kRecordRoute;
  b[21] = 41;
  EXPECT_EQ(ParseBytes(b), WireError::kOptionOverflow);
  b[21] = 40;  // exactly fills the area
  EXPECT_EQ(ParseBytes(b), WireError::kOk);
}

TEST(Ipv4Test, OptionsAfterEndOfListAreNotExamined) {
  // Bytes after End of Option List are padding, whatever they hold.
  EXPECT_EQ(ParseBytes(WithOptions("00 94 ff ff")), WireError::kOk);
  EXPECT_EQ(ParseBytes(WithOptions("01 01 00 07")), WireError::kOk);
  const std::vector<uint8_t> b = WithOptions("01 00 94 04");
  Ipv4OptionReader reader(Ipv4Packet(b).Options());
  Ipv4Option opt;
  ASSERT_TRUE(reader.Next(opt));
  EXPECT_EQ(opt.type, static_cast<uint8_t>(Ipv4OptionType::kNop));
  EXPECT_TRUE(opt.data.empty());
  EXPECT_FALSE(reader.Next(opt));
}

TEST(Ipv4Test, OptionReaderStopsOnUncheckedGarbage) {
  for (const char* hex : {"44", "07 00", "07 01 00", "07 50 00 00"}) {
    const std::vector<uint8_t> raw = Hex(hex);
    // Exactly-sized heap buffer, so ASan sees any over-read.
    std::vector<uint8_t> area(raw);
    area.shrink_to_fit();
    Ipv4OptionReader reader(area);
    Ipv4Option opt;
    EXPECT_FALSE(reader.Next(opt)) << hex;
    EXPECT_NE(CheckIpv4Options(area), WireError::kOk) << hex;
  }
}

TEST(Ipv4Test, ChecksumValidAndInvalid) {
  for (const auto* bytes : kAllValid) {
    std::vector<uint8_t> b = *bytes;
    EXPECT_TRUE(Ipv4Packet(b).HeaderChecksumValid());
    b[8] = static_cast<uint8_t>(b[8] - 1);  // TTL decremented, checksum not
    EXPECT_FALSE(Ipv4Packet(b).HeaderChecksumValid());
    // Parse does not verify the checksum: the caller decides.
    EXPECT_EQ(ParseBytes(b), WireError::kOk);
    MutableIpv4Packet(b).FillHeaderChecksum();
    EXPECT_TRUE(Ipv4Packet(b).HeaderChecksumValid());
    // Restoring TTL and refilling gives the original bytes.
    b[8] = static_cast<uint8_t>(b[8] + 1);
    MutableIpv4Packet(b).FillHeaderChecksum();
    EXPECT_EQ(b, *bytes);
  }
}

TEST(Ipv4Test, ChecksumCoversOptionsNotPayload) {
  std::vector<uint8_t> b = kIgmpRouterAlert;
  b[22] ^= 0x01;  // Router Alert value
  EXPECT_FALSE(Ipv4Packet(b).HeaderChecksumValid());
  b = kIgmpRouterAlert;
  b[30] ^= 0xff;  // IGMP group address
  EXPECT_TRUE(Ipv4Packet(b).HeaderChecksumValid());
}

TEST(Ipv4Test, ReservedFlagIsIgnoredAndClearedOnEmit) {
  std::vector<uint8_t> b = kSyn;
  b[6] |= 0x80;
  const Ipv4Packet p(b);
  EXPECT_TRUE(p.ReservedFlag());
  EXPECT_TRUE(p.DontFragment());
  Ipv4Repr r;
  ASSERT_EQ(Ipv4Repr::Parse(p, r), WireError::kOk);
  EXPECT_EQ(EmitHeader(r), HeaderOf(kSyn));
}

TEST(Ipv4Test, MutableSetters) {
  std::vector<uint8_t> b(20, 0);
  MutableIpv4Packet p(b);
  p.SetVersionAndIhl(5);
  p.SetDscpEcn(0x02);
  p.SetTotalLength(20);
  p.SetIdent(0x1234);
  p.SetFlagsAndFragOffset(Ipv4Packet::kFlagDontFragment);
  p.SetTtl(3);
  p.SetProtocol(static_cast<uint8_t>(IpProtocol::kUdp));
  p.SetSource(Ip("192.0.2.1"));
  p.SetDestination(Ip("198.51.100.7"));
  p.FillHeaderChecksum();
  const Ipv4Packet v(b);
  ASSERT_EQ(v.Check(), WireError::kOk);
  EXPECT_EQ(v.Ecn(), 2);  // ECT(0)
  EXPECT_EQ(v.Ident(), 0x1234);
  EXPECT_TRUE(v.DontFragment());
  EXPECT_EQ(v.Ttl(), 3);
  EXPECT_EQ(v.Source(), Ip("192.0.2.1"));
  EXPECT_EQ(v.Destination(), Ip("198.51.100.7"));
  EXPECT_TRUE(v.HeaderChecksumValid());
  EXPECT_TRUE(v.Payload().empty());
}

// Deterministic mutation sweep: random byte changes to valid headers either
// fail cleanly or parse to a Repr that re-emits the same header (modulo
// the reserved flag and the checksum, which Emit recomputes). ASan checks
// that no accessor strays outside the exactly-sized buffer.
TEST(Ipv4Test, MutatedHeadersParseTotally) {
  uint32_t state = 12345;
  auto next = [&state] {
    state = state * 1664525u + 1013904223u;
    return state >> 8;
  };
  int ok = 0;
  for (int i = 0; i < 20000; ++i) {
    const std::vector<uint8_t>& base = *kAllValid[next() % kAllValid.size()];
    std::vector<uint8_t> b = base;
    const int flips = 1 + next() % 3;
    for (int f = 0; f < flips; ++f) {
      b[next() % HeaderOf(base).size()] = static_cast<uint8_t>(next());
    }
    b.resize(next() % (b.size() + 1));
    b.shrink_to_fit();
    Ipv4Repr r;
    if (Ipv4Repr::Parse(Ipv4Packet(b), r) != WireError::kOk) continue;
    ++ok;
    const Ipv4Packet p(b);
    EXPECT_LE(p.HeaderLen() + p.Payload().size(), b.size());
    std::vector<uint8_t> want(b.begin(), b.begin() + p.HeaderLen());
    want[6] &= 0x7f;
    std::vector<uint8_t> got = EmitHeader(r);
    ASSERT_EQ(got.size(), want.size());
    EXPECT_TRUE(Ipv4Packet(got).HeaderChecksumValid());
    got[10] = got[11] = want[10] = want[11] = 0;
    EXPECT_EQ(got, want);
  }
  EXPECT_GT(ok, 100);
}

}  // namespace
}  // namespace netstack::wire
