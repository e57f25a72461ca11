#include "netstack/wire/ipv6.h"

#include <vector>

#include "gtest/gtest.h"
#include "netstack/wire/testing.h"

namespace netstack::wire {
namespace {

using testing::ExpectEveryTruncationFails;
using testing::Hex;

constexpr uint8_t kTcp = static_cast<uint8_t>(IpProtocol::kTcp);
constexpr uint8_t kUdp = static_cast<uint8_t>(IpProtocol::kUdp);
constexpr uint8_t kHopByHop = static_cast<uint8_t>(IpProtocol::kHopByHop);
constexpr uint8_t kRouting = static_cast<uint8_t>(IpProtocol::kIpv6Route);
constexpr uint8_t kFragment = static_cast<uint8_t>(IpProtocol::kIpv6Frag);
constexpr uint8_t kEsp = static_cast<uint8_t>(IpProtocol::kEsp);
constexpr uint8_t kAh = static_cast<uint8_t>(IpProtocol::kAh);
constexpr uint8_t kNoNext = static_cast<uint8_t>(IpProtocol::kIpv6NoNext);
constexpr uint8_t kDestOpts = static_cast<uint8_t>(IpProtocol::kIpv6Opts);

Ipv6Address Addr(const char* text) { return *Ipv6Address::Parse(text); }

// A Linux TCP SYN from fd00:9::1 port 40002 to [fd00:9::2]:80, with an
// automatic flow label (the shape of the SYN in tests/testdata/
// http_ipv6.pcap): MSS 1440, SACK permitted, timestamps, window scale 7.
const std::vector<uint8_t> kSyn =
    Hex("60 0a 1b 2c 00 28 06 40 fd 00 00 09 00 00 00 00"
        "00 00 00 00 00 00 00 01 fd 00 00 09 00 00 00 00"
        "00 00 00 00 00 00 00 02 9c 42 00 50 1b 2d 3c 4e"
        "00 00 00 00 a0 02 fd 20 a6 76 00 00 02 04 05 a0"
        "04 02 08 0a 8a 1b 2c 3d 00 00 00 00 01 03 03 07");

// fd00:9::1 -> fd00:9::2: Hop-by-Hop (Router Alert + PadN), Destination
// Options (PadN), Fragment (offset 0, M set, id 0x12345678), then a
// 20-byte TCP ACK.
const std::vector<uint8_t> kExtChain =
    Hex("60 00 00 00 00 2c 00 40 fd 00 00 09 00 00 00 00"
        "00 00 00 00 00 00 00 01 fd 00 00 09 00 00 00 00"
        "00 00 00 00 00 00 00 02"
        "3c 00 05 02 00 00 01 00"  // Hop-by-Hop, next Destination Options
        "2c 00 01 04 00 00 00 00"  // Destination Options, next Fragment
        "06 00 00 01 12 34 56 78"  // Fragment, next TCP
        "9c 42 00 50 1b 2d 3c 4f 5a 6b 7c 8d 50 10 01 f5"
        "e8 c1 00 00");

WireError ParseIpv6(std::span<const uint8_t> b) {
  Ipv6Repr r;
  return Ipv6Repr::Parse(Ipv6Packet(b), r);
}

// --- Fixed header -----------------------------------------------------------

TEST(Ipv6AddressTest, EmbedsIpv4) {
  auto embeds = [](const char* text) {
    return Ipv6Address::Parse(text)->EmbedsIpv4();
  };
  EXPECT_TRUE(embeds("::ffff:127.0.0.1"));  // mapped
  EXPECT_TRUE(embeds("::ffff:0.0.0.0"));
  EXPECT_TRUE(embeds("::7f00:1"));          // compatible 127.0.0.1
  EXPECT_TRUE(embeds("::0.0.0.2"));
  EXPECT_FALSE(embeds("::"));               // their own meanings
  EXPECT_FALSE(embeds("::1"));
  EXPECT_FALSE(embeds("::fffe:7f00:1"));
  EXPECT_FALSE(embeds("64:ff9b::7f00:1"));  // NAT64 is forwarded
  EXPECT_FALSE(embeds("2001:db8::1"));
}

TEST(Ipv6Test, ParseSyn) {
  Ipv6Packet p(kSyn);
  ASSERT_EQ(p.Check(), WireError::kOk);
  Ipv6Repr r;
  ASSERT_EQ(Ipv6Repr::Parse(p, r), WireError::kOk);
  EXPECT_EQ(r.src.ToString(), "fd00:9::1");
  EXPECT_EQ(r.dst.ToString(), "fd00:9::2");
  EXPECT_EQ(r.next_header, kTcp);
  EXPECT_EQ(r.hop_limit, 64);
  EXPECT_EQ(r.traffic_class, 0);
  EXPECT_EQ(r.flow_label, 0xa1b2cu);
  EXPECT_EQ(r.payload_len, 40);
  EXPECT_EQ(r.BufferLen(), 40u);
  EXPECT_EQ(r.TotalLen(), 80u);
  EXPECT_EQ(p.Version(), 6);
  ASSERT_EQ(p.Payload().size(), 40u);
  EXPECT_EQ(p.Payload().data(), kSyn.data() + 40);
  EXPECT_EQ(p.Payload()[0], 0x9c);
}

TEST(Ipv6Test, TrafficClassAndFlowLabelBits) {
  // Traffic class 0xb8 (DSCP EF), flow label 0xfffff: every bit of the
  // first word is in use, so a shift error shows.
  std::vector<uint8_t> b = kSyn;
  b[0] = 0x6b;
  b[1] = 0x8f;
  b[2] = 0xff;
  b[3] = 0xff;
  Ipv6Repr r;
  ASSERT_EQ(Ipv6Repr::Parse(Ipv6Packet(b), r), WireError::kOk);
  EXPECT_EQ(r.traffic_class, 0xb8);
  EXPECT_EQ(r.flow_label, 0xfffffu);
  std::vector<uint8_t> out(r.BufferLen());
  r.Emit(MutableIpv6Packet(out));
  EXPECT_EQ(out, std::vector<uint8_t>(b.begin(), b.begin() + 40));
}

TEST(Ipv6Test, EmitRoundTrips) {
  for (const auto* bytes : {&kSyn, &kExtChain}) {
    Ipv6Repr r;
    ASSERT_EQ(Ipv6Repr::Parse(Ipv6Packet(*bytes), r), WireError::kOk);
    std::vector<uint8_t> out(r.BufferLen());
    r.Emit(MutableIpv6Packet(out));
    EXPECT_EQ(out, std::vector<uint8_t>(bytes->begin(), bytes->begin() + 40));
  }
}

TEST(Ipv6Test, ConstructThenParse) {
  Ipv6Repr r;
  r.src = Addr("fe80::1");
  r.dst = Addr("ff02::1");
  r.next_header = kUdp;
  r.hop_limit = 255;
  r.traffic_class = 0x2d;
  r.flow_label = 0x12345;
  r.payload_len = 8;
  std::vector<uint8_t> out(r.TotalLen(), 0xee);
  r.Emit(MutableIpv6Packet(out));
  EXPECT_EQ(std::vector<uint8_t>(out.begin(), out.begin() + 40),
            Hex("62 d1 23 45 00 08 11 ff"
                "fe 80 00 00 00 00 00 00 00 00 00 00 00 00 00 01"
                "ff 02 00 00 00 00 00 00 00 00 00 00 00 00 00 01"));
  // Emit writes the header only.
  EXPECT_EQ(out[40], 0xee);
  Ipv6Repr back;
  ASSERT_EQ(Ipv6Repr::Parse(Ipv6Packet(out), back), WireError::kOk);
  EXPECT_EQ(back, r);
}

TEST(Ipv6Test, EmitMasksFlowLabel) {
  Ipv6Repr r;
  r.flow_label = 0xfff00001;
  std::vector<uint8_t> out(r.BufferLen());
  r.Emit(MutableIpv6Packet(out));
  EXPECT_EQ(MutableIpv6Packet(out).Version(), 6);
  EXPECT_EQ(MutableIpv6Packet(out).TrafficClass(), 0);
  EXPECT_EQ(MutableIpv6Packet(out).FlowLabel(), 1u);
}

TEST(Ipv6Test, PaddingAfterPayloadIsExcluded) {
  // The smallest IPv6 packet, 40 bytes with No Next Header, fills 54 bytes
  // of Ethernet frame, so the sender pads it with 6 bytes to the 60-byte
  // minimum: they are not payload.
  std::vector<uint8_t> b(kSyn.begin(), kSyn.begin() + 40);
  b[4] = 0;
  b[5] = 0;  // Payload Length
  b[6] = kNoNext;
  b.resize(46, 0);
  Ipv6Packet p(b);
  ASSERT_EQ(p.Check(), WireError::kOk);
  EXPECT_TRUE(p.Payload().empty());
  EXPECT_EQ(p.TotalLen(), 40u);
  // Same with an 8-byte UDP header followed by trailing junk.
  b.resize(40);
  b[5] = 8;
  b[6] = kUdp;
  for (uint8_t x : Hex("9c 43 00 35 00 08 00 00 ee ee ee")) b.push_back(x);
  Ipv6Packet q(b);
  ASSERT_EQ(q.Check(), WireError::kOk);
  ASSERT_EQ(q.Payload().size(), 8u);
  EXPECT_EQ(q.Payload()[7], 0);
}

TEST(Ipv6Test, TruncatedAtEveryLength) {
  // Inside the fixed header: kTruncated.
  ExpectEveryTruncationFails(std::span<const uint8_t>(kSyn).first(40),
                             ParseIpv6);
  // Past it, Payload Length promises more than the buffer: kBadLength.
  for (size_t len = 40; len < kSyn.size(); ++len) {
    std::vector<uint8_t> prefix(kSyn.begin(), kSyn.begin() + len);
    EXPECT_EQ(ParseIpv6(prefix), WireError::kBadLength) << len;
  }
  ExpectEveryTruncationFails(kExtChain, ParseIpv6, WireError::kOk);
}

TEST(Ipv6Test, PayloadLengthTooBig) {
  std::vector<uint8_t> b = kSyn;
  b[5] = 41;  // one more than the 40 bytes present
  EXPECT_EQ(ParseIpv6(b), WireError::kBadLength);
  b[4] = 0xff;
  b[5] = 0xff;
  EXPECT_EQ(ParseIpv6(b), WireError::kBadLength);
}

TEST(Ipv6Test, BadVersion) {
  std::vector<uint8_t> b = kSyn;
  b[0] = 0x40;  // an IPv4 version nibble
  EXPECT_EQ(ParseIpv6(b), WireError::kBadVersion);
  b[0] = 0x00;
  EXPECT_EQ(ParseIpv6(b), WireError::kBadVersion);
  b[0] = 0xf0;
  EXPECT_EQ(ParseIpv6(b), WireError::kBadVersion);
}

TEST(Ipv6Test, JumbogramIsUnsupported) {
  std::vector<uint8_t> b = kExtChain;  // Next Header is Hop-by-Hop
  b[4] = 0;
  b[5] = 0;
  EXPECT_EQ(ParseIpv6(b), WireError::kUnsupported);
  // Payload Length 0 is fine for anything else (No Next Header).
  b[6] = kNoNext;
  EXPECT_EQ(ParseIpv6(b), WireError::kOk);
  EXPECT_TRUE(Ipv6Packet(b).Payload().empty());
}

// --- Fragment header ------------------------------------------------------

TEST(Ipv6FragmentTest, ParseAndEmit) {
  // Next TCP, offset 185 units = 1480 bytes, M set, id 0xdeadbeef; the
  // reserved byte and bits are nonzero here and must be ignored.
  const std::vector<uint8_t> b = Hex("06 ff 05 cf de ad be ef");
  Ipv6FragmentRepr r;
  ASSERT_EQ(Ipv6FragmentRepr::Parse(Ipv6FragmentHeader(b), r), WireError::kOk);
  EXPECT_EQ(r.next_header, kTcp);
  EXPECT_EQ(r.offset, 1480);
  EXPECT_TRUE(r.more_fragments);
  EXPECT_EQ(r.identification, 0xdeadbeefu);
  std::vector<uint8_t> out(r.BufferLen(), 0xaa);
  r.Emit(MutableIpv6FragmentHeader(out));
  // Reserved fields come out zero.
  EXPECT_EQ(out, Hex("06 00 05 c9 de ad be ef"));
}

TEST(Ipv6FragmentTest, ConstructThenParse) {
  Ipv6FragmentRepr r{.next_header = kUdp,
                     .offset = 65528,  // the largest offset
                     .more_fragments = false,
                     .identification = 7};
  std::vector<uint8_t> out(r.BufferLen());
  r.Emit(MutableIpv6FragmentHeader(out));
  EXPECT_EQ(out, Hex("11 00 ff f8 00 00 00 07"));
  Ipv6FragmentRepr back;
  ASSERT_EQ(Ipv6FragmentRepr::Parse(Ipv6FragmentHeader(out), back),
            WireError::kOk);
  EXPECT_EQ(back, r);
}

TEST(Ipv6FragmentTest, EmitDropsLowOffsetBits) {
  Ipv6FragmentRepr r{.next_header = kTcp,
                     .offset = 1487,
                     .more_fragments = true,
                     .identification = 1};
  std::vector<uint8_t> out(r.BufferLen());
  r.Emit(MutableIpv6FragmentHeader(out));
  EXPECT_EQ(Ipv6FragmentHeader(out).FragmentOffset(), 1480);
  EXPECT_TRUE(Ipv6FragmentHeader(out).MoreFragments());
}

TEST(Ipv6FragmentTest, TruncatedAtEveryLength) {
  ExpectEveryTruncationFails(
      Hex("06 00 00 01 12 34 56 78"), [](std::span<const uint8_t> b) {
        Ipv6FragmentRepr r;
        return Ipv6FragmentRepr::Parse(Ipv6FragmentHeader(b), r);
      });
}

// --- Extension header walk --------------------------------------------------

WireError Walk(std::span<const uint8_t> payload, uint8_t first,
               Ipv6ExtensionInfo& out) {
  return WalkIpv6ExtensionHeaders(payload, first, out);
}

// The result of a walk that found no extension headers.
Ipv6ExtensionInfo UpperOnly(uint8_t protocol) {
  Ipv6ExtensionInfo info;
  info.upper_protocol = protocol;
  return info;
}

TEST(Ipv6ExtensionTest, HopByHopDestOptsFragmentTcp) {
  Ipv6Packet p(kExtChain);
  ASSERT_EQ(p.Check(), WireError::kOk);
  Ipv6ExtensionInfo info;
  ASSERT_EQ(Walk(p.Payload(), p.NextHeader(), info), WireError::kOk);
  EXPECT_EQ(info.upper_protocol, kTcp);
  EXPECT_EQ(info.upper_offset, 24u);
  EXPECT_EQ(info.header_count, 3u);
  ASSERT_TRUE(info.fragment.has_value());
  EXPECT_EQ(info.fragment->header_offset, 16u);
  EXPECT_EQ(info.fragment->header,
            (Ipv6FragmentRepr{.next_header = kTcp,
                              .offset = 0,
                              .more_fragments = true,
                              .identification = 0x12345678}));
  EXPECT_FALSE(info.routing.has_value());
  // Router Alert has action 00 (skip), so nothing requires a discard.
  EXPECT_FALSE(info.unrecognized_option.has_value());
  EXPECT_EQ(p.Payload()[info.upper_offset], 0x9c);  // TCP source port
}

TEST(Ipv6ExtensionTest, NoExtensionHeaders) {
  Ipv6Packet p(kSyn);
  Ipv6ExtensionInfo info;
  ASSERT_EQ(Walk(p.Payload(), p.NextHeader(), info), WireError::kOk);
  EXPECT_EQ(info, UpperOnly(kTcp));
  // The walk does not look at the upper layer, so even an empty payload
  // is fine.
  ASSERT_EQ(Walk({}, kTcp, info), WireError::kOk);
  EXPECT_EQ(info.upper_offset, 0u);
}

TEST(Ipv6ExtensionTest, ChainTruncatedAtEveryLength) {
  // The 24 bytes of extension headers: any prefix cuts a header short.
  const auto chain = Ipv6Packet(kExtChain).Payload().first(24);
  ExpectEveryTruncationFails(chain, [](std::span<const uint8_t> b) {
    Ipv6ExtensionInfo info;
    return Walk(b, kHopByHop, info);
  });
}

TEST(Ipv6ExtensionTest, HeaderLengthPastPayload) {
  // Destination Options claiming 16 bytes (Hdr Ext Len 1) with 8 present.
  const std::vector<uint8_t> b = Hex("06 01 01 04 00 00 00 00");
  Ipv6ExtensionInfo info;
  EXPECT_EQ(Walk(b, kDestOpts, info), WireError::kTruncated);
  // Routing header claiming 2048 bytes.
  EXPECT_EQ(Walk(Hex("06 ff 04 00 00 00 00 00"), kRouting, info),
            WireError::kTruncated);
}

TEST(Ipv6ExtensionTest, ChainTooLong) {
  // kMaxIpv6ExtensionHeaders Destination Options headers are accepted...
  std::vector<uint8_t> b;
  for (size_t i = 0; i < kMaxIpv6ExtensionHeaders; ++i) {
    const bool last = i + 1 == kMaxIpv6ExtensionHeaders;
    for (uint8_t x : Hex("3c 00 01 04 00 00 00 00")) b.push_back(x);
    if (last) b[b.size() - 8] = kUdp;
  }
  Ipv6ExtensionInfo info;
  ASSERT_EQ(Walk(b, kDestOpts, info), WireError::kOk);
  EXPECT_EQ(info.header_count, kMaxIpv6ExtensionHeaders);
  EXPECT_EQ(info.upper_protocol, kUdp);
  EXPECT_EQ(info.upper_offset, 8 * kMaxIpv6ExtensionHeaders);
  // ... one more is not.
  b[b.size() - 8] = kDestOpts;
  for (uint8_t x : Hex("11 00 01 04 00 00 00 00")) b.push_back(x);
  EXPECT_EQ(Walk(b, kDestOpts, info), WireError::kBadExtensionHeader);
}

TEST(Ipv6ExtensionTest, HopByHopNotFirst) {
  // Destination Options, then Hop-by-Hop.
  const std::vector<uint8_t> b =
      Hex("00 00 01 04 00 00 00 00"
          "06 00 01 04 00 00 00 00");
  Ipv6ExtensionInfo info;
  EXPECT_EQ(Walk(b, kDestOpts, info), WireError::kBadExtensionHeader);
  // Hop-by-Hop twice: the second is not first either.
  std::vector<uint8_t> twice = b;
  twice[0] = kHopByHop;
  EXPECT_EQ(Walk(twice, kHopByHop, info), WireError::kBadExtensionHeader);
}

TEST(Ipv6ExtensionTest, OptionOverflow) {
  Ipv6ExtensionInfo info;
  // PadN with 5 data bytes where 4 fit.
  EXPECT_EQ(Walk(Hex("06 00 01 05 00 00 00 00"), kDestOpts, info),
            WireError::kOptionOverflow);
  // An option type in the last byte, with no room for its length byte.
  EXPECT_EQ(Walk(Hex("06 00 01 03 00 00 00 05"), kHopByHop, info),
            WireError::kOptionOverflow);
  // Pad1 bytes up to the end are fine.
  EXPECT_EQ(Walk(Hex("06 00 00 00 00 00 00 00"), kHopByHop, info),
            WireError::kOk);
}

TEST(Ipv6ExtensionTest, UnrecognizedOptionIsReported) {
  // Hop-by-Hop: Router Alert (action 00), then option 0xc2 (jumbo payload,
  // action 11), then option 0x80 (action 10): only the first discarding
  // option is reported, at its offset in the payload.
  const std::vector<uint8_t> b =
      Hex("06 01 05 02 00 00 c2 04 00 01 00 00 80 00 01 00");
  Ipv6ExtensionInfo info;
  ASSERT_EQ(Walk(b, kHopByHop, info), WireError::kOk);
  ASSERT_TRUE(info.unrecognized_option.has_value());
  EXPECT_EQ(info.unrecognized_option->offset, 6u);
  EXPECT_EQ(info.unrecognized_option->type, 0xc2);
  EXPECT_EQ(info.unrecognized_option->action(), 3);
  EXPECT_EQ(info.upper_protocol, kTcp);
  EXPECT_EQ(info.upper_offset, 16u);
  // In a later Destination Options header the offset counts from the start
  // of the payload too.
  const std::vector<uint8_t> c =
      Hex("3c 00 01 04 00 00 00 00"
          "3b 00 01 02 00 00 40 00");
  ASSERT_EQ(Walk(c, kHopByHop, info), WireError::kOk);
  ASSERT_TRUE(info.unrecognized_option.has_value());
  EXPECT_EQ(info.unrecognized_option->offset, 14u);
  EXPECT_EQ(info.unrecognized_option->action(), 1);
  EXPECT_EQ(info.upper_protocol, kNoNext);
}

TEST(Ipv6ExtensionTest, NonFirstFragmentStopsTheWalk) {
  // Fragment at offset 1448 whose original packet started with Destination
  // Options: the data after it is not a header, so it is not walked.
  const std::vector<uint8_t> b =
      Hex("3c 00 05 a8 00 00 00 2a"
          "ff ff ff ff ff ff ff ff");
  Ipv6ExtensionInfo info;
  ASSERT_EQ(Walk(b, kFragment, info), WireError::kOk);
  EXPECT_EQ(info.upper_protocol, kDestOpts);
  EXPECT_EQ(info.upper_offset, 8u);
  EXPECT_EQ(info.header_count, 1u);
  ASSERT_TRUE(info.fragment.has_value());
  EXPECT_EQ(info.fragment->header_offset, 0u);
  EXPECT_EQ(info.fragment->header.offset, 1448);
  EXPECT_FALSE(info.fragment->header.more_fragments);
  EXPECT_EQ(info.fragment->header.identification, 42u);
}

TEST(Ipv6ExtensionTest, SecondFragmentHeader) {
  const std::vector<uint8_t> b =
      Hex("2c 00 00 01 00 00 00 01"
          "06 00 00 01 00 00 00 02");
  Ipv6ExtensionInfo info;
  EXPECT_EQ(Walk(b, kFragment, info), WireError::kBadExtensionHeader);
}

TEST(Ipv6ExtensionTest, RoutingHeader) {
  // Segment Routing Header (type 4), Segments Left 1, one segment.
  const std::vector<uint8_t> b =
      Hex("3a 02 04 01 00 00 00 00"
          "fd 00 00 09 00 00 00 00 00 00 00 00 00 00 00 02");
  Ipv6ExtensionInfo info;
  ASSERT_EQ(Walk(b, kRouting, info), WireError::kOk);
  ASSERT_TRUE(info.routing.has_value());
  EXPECT_EQ(info.routing->header_offset, 0u);
  EXPECT_EQ(info.routing->routing_type, 4);
  EXPECT_EQ(info.routing->segments_left, 1);
  EXPECT_EQ(info.upper_protocol, static_cast<uint8_t>(IpProtocol::kIcmpv6));
  EXPECT_EQ(info.upper_offset, 24u);
}

TEST(Ipv6ExtensionTest, AuthenticationHeader) {
  // AH with a 96-bit ICV: Payload Len 4 -> (4 + 2) * 4 = 24 bytes.
  std::vector<uint8_t> b =
      Hex("06 04 00 00 00 00 01 00 00 00 00 05"
          "00 11 22 33 44 55 66 77 88 99 aa bb");
  Ipv6ExtensionInfo info;
  ASSERT_EQ(Walk(b, kAh, info), WireError::kOk);
  EXPECT_EQ(info.upper_protocol, kTcp);
  EXPECT_EQ(info.upper_offset, 24u);
  // Payload Len 3 -> 20 bytes, not a multiple of 8 as IPv6 requires.
  b[1] = 3;
  EXPECT_EQ(Walk(b, kAh, info), WireError::kBadExtensionHeader);
  // Payload Len 6 -> 32 bytes, more than present.
  b[1] = 6;
  EXPECT_EQ(Walk(b, kAh, info), WireError::kTruncated);
}

TEST(Ipv6ExtensionTest, EspAndNoNextHeaderEndTheWalk) {
  const std::vector<uint8_t> b = Hex("32 00 01 04 00 00 00 00 de ad be ef");
  Ipv6ExtensionInfo info;
  ASSERT_EQ(Walk(b, kDestOpts, info), WireError::kOk);
  EXPECT_EQ(info.upper_protocol, kEsp);
  EXPECT_EQ(info.upper_offset, 8u);
  ASSERT_EQ(Walk(b, kNoNext, info), WireError::kOk);
  EXPECT_EQ(info.upper_protocol, kNoNext);
  EXPECT_EQ(info.upper_offset, 0u);
  EXPECT_EQ(info.header_count, 0u);
}

TEST(Ipv6ExtensionTest, ResetsOutput) {
  Ipv6ExtensionInfo info;
  ASSERT_EQ(Walk(Ipv6Packet(kExtChain).Payload(), kHopByHop, info),
            WireError::kOk);
  ASSERT_TRUE(info.fragment.has_value());
  ASSERT_EQ(Walk({}, kUdp, info), WireError::kOk);
  EXPECT_EQ(info, UpperOnly(kUdp));
}

TEST(Ipv6ExtensionTest, IsExtensionHeader) {
  for (uint8_t nh : {kHopByHop, kRouting, kFragment, kAh, kDestOpts}) {
    EXPECT_TRUE(IsIpv6ExtensionHeader(nh)) << int{nh};
  }
  for (uint8_t nh : {kTcp, kUdp, kEsp, kNoNext, uint8_t{58}, uint8_t{255}}) {
    EXPECT_FALSE(IsIpv6ExtensionHeader(nh)) << int{nh};
  }
}

// Every combination of first header, Next Header, length byte and buffer
// size over a short buffer: the walk is total and never reports an upper
// layer beyond the payload (ASan checks the reads: each input is its own
// exactly-sized allocation).
TEST(Ipv6ExtensionTest, TotalOnSmallInputs) {
  const uint8_t kinds[] = {kHopByHop, kRouting, kFragment, kAh,
                           kDestOpts, kTcp,     kNoNext};
  const uint8_t lengths[] = {0, 1, 2, 3, 4, 5, 255};
  std::vector<uint8_t> b(24, 0);
  for (uint8_t first : kinds) {
    for (uint8_t nh : kinds) {
      for (uint8_t len : lengths) {
        b[0] = nh;
        b[1] = len;
        b[8] = nh;  // a second header of the same kind, if reached
        b[9] = len;
        for (size_t size = 0; size <= b.size(); ++size) {
          std::vector<uint8_t> copy(b.begin(), b.begin() + size);
          copy.shrink_to_fit();
          Ipv6ExtensionInfo info;
          if (Walk(copy, first, info) == WireError::kOk) {
            EXPECT_LE(info.upper_offset, size);
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace netstack::wire
