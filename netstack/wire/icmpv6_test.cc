#include "netstack/wire/icmpv6.h"

#include <algorithm>
#include <vector>

#include "gtest/gtest.h"
#include "netstack/wire/testing.h"

namespace netstack::wire {
namespace {

using testing::ExpectEveryTruncationFails;
using testing::Hex;

Ipv6Address Addr(const char* text) { return *Ipv6Address::Parse(text); }
MacAddress Mac(const char* text) { return *MacAddress::Parse(text); }

const Ipv6Address kHostA = Addr("fd00:9::1");
const Ipv6Address kHostB = Addr("fd00:9::2");

// Linux neighbor solicitation from fd00:9::1 (02:00:00:00:00:01) for
// fd00:9::2, to its solicited-node group, as in tests/testdata/icmp.pcap:
// the whole IPv6 packet; the ICMPv6 message starts at byte 40.
const std::vector<uint8_t> kNsPacket =
    Hex("60 00 00 00 00 20 3a ff fd 00 00 09 00 00 00 00"
        "00 00 00 00 00 00 00 01 ff 02 00 00 00 00 00 00"
        "00 00 00 01 ff 00 00 02"
        "87 00 7d 85 00 00 00 00"                          // NS, checksum
        "fd 00 00 09 00 00 00 00 00 00 00 00 00 00 00 02"  // target
        "01 01 02 00 00 00 00 01");                        // source LLA
// The solicited advertisement fd00:9::2 sends back: S and O set, target
// link-layer address 02:00:00:00:00:02.
const std::vector<uint8_t> kNaPacket =
    Hex("60 00 00 00 00 20 3a ff fd 00 00 09 00 00 00 00"
        "00 00 00 00 00 00 00 02 fd 00 00 09 00 00 00 00"
        "00 00 00 00 00 00 00 01"
        "88 00 1c 7f 60 00 00 00"
        "fd 00 00 09 00 00 00 00 00 00 00 00 00 00 00 02"
        "02 01 02 00 00 00 00 02");

std::span<const uint8_t> Message(const std::vector<uint8_t>& packet) {
  return std::span<const uint8_t>(packet).subspan(40);
}
Ipv6Address PacketSrc(const std::vector<uint8_t>& packet) {
  return Ipv6Address::FromBytes(&packet[8]);
}
Ipv6Address PacketDst(const std::vector<uint8_t>& packet) {
  return Ipv6Address::FromBytes(&packet[24]);
}

// Linux ping: echo request fd00:9::1 -> fd00:9::2, identifier 0x1c2b,
// sequence 1, 56 bytes of data (a timestamp, then 0x10, 0x11, ...).
const std::vector<uint8_t> kEchoRequest =
    Hex("80 00 49 b1 1c 2b 00 01 6a 3c 5e 65 00 00 00 00"
        "8e 1c 0a 00 00 00 00 00 10 11 12 13 14 15 16 17"
        "18 19 1a 1b 1c 1d 1e 1f 20 21 22 23 24 25 26 27"
        "28 29 2a 2b 2c 2d 2e 2f 30 31 32 33 34 35 36 37");
// Its reply, fd00:9::2 -> fd00:9::1.
const std::vector<uint8_t> kEchoReply =
    Hex("81 00 48 b1 1c 2b 00 01 6a 3c 5e 65 00 00 00 00"
        "8e 1c 0a 00 00 00 00 00 10 11 12 13 14 15 16 17"
        "18 19 1a 1b 1c 1d 1e 1f 20 21 22 23 24 25 26 27"
        "28 29 2a 2b 2c 2d 2e 2f 30 31 32 33 34 35 36 37");

// Router advertisement fe80::1 -> ff02::1: hop limit 64, O flag, router
// lifetime 1800 s, source link-layer address 02:00:00:00:00:03, MTU 1500,
// prefix fd00:9::/64 with L and A, valid 1 day, preferred 4 hours. Options
// in the order Emit uses.
const Ipv6Address kRouter = Addr("fe80::1");
const Ipv6Address kAllNodes = Addr("ff02::1");
const std::vector<uint8_t> kRa =
    Hex("86 00 5c 46 40 40 07 08 00 00 00 00 00 00 00 00"
        "01 01 02 00 00 00 00 03"                          // source LLA
        "05 01 00 00 00 00 05 dc"                          // MTU
        "03 04 40 c0 00 01 51 80 00 00 38 40 00 00 00 00"  // prefix info
        "fd 00 00 09 00 00 00 00 00 00 00 00 00 00 00 00");
// The same advertisement with options in radvd's order: prefix, MTU,
// source link-layer address.
const std::vector<uint8_t> kRaRadvdOrder =
    Hex("86 00 5c 46 40 40 07 08 00 00 00 00 00 00 00 00"
        "03 04 40 c0 00 01 51 80 00 00 38 40 00 00 00 00"
        "fd 00 00 09 00 00 00 00 00 00 00 00 00 00 00 00"
        "05 01 00 00 00 00 05 dc"
        "01 01 02 00 00 00 00 03");

// Router solicitation fe80::2 -> ff02::2 with source link-layer address.
const std::vector<uint8_t> kRs =
    Hex("85 00 7a 2a 00 00 00 00 01 01 02 00 00 00 00 02");

WireError ParseBytes(std::span<const uint8_t> b) {
  Icmpv6Repr r;
  return Icmpv6Repr::Parse(Icmpv6Packet(b), r);
}

// Emits `r` into a fresh buffer and returns it, checksum field zero.
std::vector<uint8_t> EmitToVector(const Icmpv6Repr& r) {
  std::vector<uint8_t> out(r.BufferLen(), 0xee);
  r.Emit(MutableIcmpv6Packet(out));
  return out;
}

// Emit, then FillChecksum, must reproduce `bytes` exactly.
void ExpectEmitReproduces(const Icmpv6Repr& r, std::span<const uint8_t> bytes,
                          const Ipv6Address& src, const Ipv6Address& dst) {
  std::vector<uint8_t> out = EmitToVector(r);
  ASSERT_EQ(out.size(), bytes.size());
  EXPECT_EQ(out[2], 0);
  EXPECT_EQ(out[3], 0);
  MutableIcmpv6Packet(out).FillChecksum(src, dst);
  EXPECT_EQ(out, std::vector<uint8_t>(bytes.begin(), bytes.end()));
  EXPECT_TRUE(Icmpv6Packet(out).ChecksumValid(src, dst));
}

// For NDP messages a prefix that ends exactly where an option ends is a
// valid, shorter message. Every other strict prefix must fail; each is
// copied into an exactly-sized heap buffer so ASan catches over-reads.
void ExpectTruncationsFailExcept(std::span<const uint8_t> bytes,
                                 std::vector<size_t> valid_lengths) {
  for (size_t len = 0; len < bytes.size(); ++len) {
    std::vector<uint8_t> prefix(bytes.begin(), bytes.begin() + len);
    prefix.shrink_to_fit();
    const WireError e = ParseBytes(prefix);
    if (std::ranges::find(valid_lengths, len) != valid_lengths.end()) {
      EXPECT_EQ(e, WireError::kOk) << "prefix length " << len;
    } else {
      EXPECT_NE(e, WireError::kOk) << "prefix length " << len;
    }
  }
}

// --- Neighbor Discovery -----------------------------------------------------

TEST(NdpTest, ParseNeighborSolicitation) {
  Icmpv6Packet p(Message(kNsPacket));
  ASSERT_EQ(p.Check(), WireError::kOk);
  EXPECT_TRUE(p.ChecksumValid(PacketSrc(kNsPacket), PacketDst(kNsPacket)));
  Icmpv6Repr r;
  ASSERT_EQ(Icmpv6Repr::Parse(p, r), WireError::kOk);
  EXPECT_EQ(r.type(), 135);
  const auto* ns = std::get_if<NdpNeighborSolicitation>(&r.message);
  ASSERT_NE(ns, nullptr);
  EXPECT_EQ(ns->target, kHostB);
  EXPECT_EQ(ns->options.source_link_layer, Mac("02:00:00:00:00:01"));
  EXPECT_FALSE(ns->options.target_link_layer.has_value());
  EXPECT_FALSE(ns->options.mtu.has_value());
  EXPECT_TRUE(ns->options.prefixes.empty());
  EXPECT_EQ(r.BufferLen(), 32u);
  ExpectEmitReproduces(r, Message(kNsPacket), PacketSrc(kNsPacket),
                       PacketDst(kNsPacket));
}

TEST(NdpTest, ParseNeighborAdvertisement) {
  Icmpv6Packet p(Message(kNaPacket));
  EXPECT_TRUE(p.ChecksumValid(kHostB, kHostA));
  Icmpv6Repr r;
  ASSERT_EQ(Icmpv6Repr::Parse(p, r), WireError::kOk);
  const auto* na = std::get_if<NdpNeighborAdvertisement>(&r.message);
  ASSERT_NE(na, nullptr);
  EXPECT_FALSE(na->router);
  EXPECT_TRUE(na->solicited);
  EXPECT_TRUE(na->override_flag);
  EXPECT_EQ(na->target, kHostB);
  EXPECT_EQ(na->options.target_link_layer, Mac("02:00:00:00:00:02"));
  EXPECT_FALSE(na->options.source_link_layer.has_value());
  ExpectEmitReproduces(r, Message(kNaPacket), kHostB, kHostA);
}

TEST(NdpTest, ConstructNeighborAdvertisement) {
  NdpNeighborAdvertisement na;
  na.router = true;
  na.solicited = false;
  na.override_flag = true;
  na.target = Addr("fe80::1");
  na.options.target_link_layer = Mac("0a:0b:0c:0d:0e:0f");
  const Icmpv6Repr r{na};
  const std::vector<uint8_t> out = EmitToVector(r);
  EXPECT_EQ(out, Hex("88 00 00 00 a0 00 00 00"
                     "fe 80 00 00 00 00 00 00 00 00 00 00 00 00 00 01"
                     "02 01 0a 0b 0c 0d 0e 0f"));
  Icmpv6Repr back;
  ASSERT_EQ(Icmpv6Repr::Parse(Icmpv6Packet(out), back), WireError::kOk);
  EXPECT_EQ(back, r);
}

TEST(NdpTest, ParseRouterAdvertisement) {
  Icmpv6Packet p(kRa);
  EXPECT_TRUE(p.ChecksumValid(kRouter, kAllNodes));
  Icmpv6Repr r;
  ASSERT_EQ(Icmpv6Repr::Parse(p, r), WireError::kOk);
  const auto* ra = std::get_if<NdpRouterAdvertisement>(&r.message);
  ASSERT_NE(ra, nullptr);
  EXPECT_EQ(ra->cur_hop_limit, 64);
  EXPECT_FALSE(ra->managed);
  EXPECT_TRUE(ra->other_config);
  EXPECT_EQ(ra->router_lifetime, 1800);
  EXPECT_EQ(ra->reachable_time, 0u);
  EXPECT_EQ(ra->retrans_timer, 0u);
  EXPECT_EQ(ra->options.source_link_layer, Mac("02:00:00:00:00:03"));
  EXPECT_EQ(ra->options.mtu, 1500u);
  ASSERT_EQ(ra->options.prefixes.size(), 1u);
  const NdpPrefixInformation& prefix = ra->options.prefixes[0];
  EXPECT_EQ(prefix.prefix_length, 64);
  EXPECT_TRUE(prefix.on_link);
  EXPECT_TRUE(prefix.autonomous);
  EXPECT_EQ(prefix.valid_lifetime, 86400u);
  EXPECT_EQ(prefix.preferred_lifetime, 14400u);
  EXPECT_EQ(prefix.prefix, Addr("fd00:9::"));
  EXPECT_EQ(ra->options.prefixes_ignored, 0);
  ExpectEmitReproduces(r, kRa, kRouter, kAllNodes);
}

TEST(NdpTest, OptionOrderDoesNotMatterToParse) {
  EXPECT_TRUE(Icmpv6Packet(kRaRadvdOrder).ChecksumValid(kRouter, kAllNodes));
  Icmpv6Repr a, b;
  ASSERT_EQ(Icmpv6Repr::Parse(Icmpv6Packet(kRa), a), WireError::kOk);
  ASSERT_EQ(Icmpv6Repr::Parse(Icmpv6Packet(kRaRadvdOrder), b), WireError::kOk);
  EXPECT_EQ(a, b);
  // Emit uses its fixed order, so radvd's message comes out as kRa.
  ExpectEmitReproduces(b, kRa, kRouter, kAllNodes);
}

TEST(NdpTest, ConstructRouterAdvertisement) {
  NdpRouterAdvertisement ra;
  ra.cur_hop_limit = 255;
  ra.managed = true;
  ra.router_lifetime = 0;
  ra.reachable_time = 30000;
  ra.retrans_timer = 1000;
  ra.options.mtu = 9000;
  ASSERT_TRUE(ra.options.prefixes.push_back({.prefix_length = 48,
                                             .on_link = true,
                                             .autonomous = false,
                                             .valid_lifetime = 0xffffffff,
                                             .preferred_lifetime = 0xffffffff,
                                             .prefix = Addr("2001:db8:1::")}));
  ASSERT_TRUE(ra.options.prefixes.push_back({.prefix_length = 64,
                                             .on_link = false,
                                             .autonomous = true,
                                             .valid_lifetime = 7200,
                                             .preferred_lifetime = 3600,
                                             .prefix = Addr("2001:db8:2::")}));
  const Icmpv6Repr r{ra};
  const std::vector<uint8_t> out = EmitToVector(r);
  EXPECT_EQ(out, Hex("86 00 00 00 ff 80 00 00 00 00 75 30 00 00 03 e8"
                     "05 01 00 00 00 00 23 28"
                     "03 04 30 80 ff ff ff ff ff ff ff ff 00 00 00 00"
                     "20 01 0d b8 00 01 00 00 00 00 00 00 00 00 00 00"
                     "03 04 40 40 00 00 1c 20 00 00 0e 10 00 00 00 00"
                     "20 01 0d b8 00 02 00 00 00 00 00 00 00 00 00 00"));
  Icmpv6Repr back;
  ASSERT_EQ(Icmpv6Repr::Parse(Icmpv6Packet(out), back), WireError::kOk);
  EXPECT_EQ(back, r);
}

TEST(NdpTest, ParseRouterSolicitation) {
  const Ipv6Address src = Addr("fe80::2");
  const Ipv6Address all_routers = Addr("ff02::2");
  EXPECT_TRUE(Icmpv6Packet(kRs).ChecksumValid(src, all_routers));
  Icmpv6Repr r;
  ASSERT_EQ(Icmpv6Repr::Parse(Icmpv6Packet(kRs), r), WireError::kOk);
  const auto* rs = std::get_if<NdpRouterSolicitation>(&r.message);
  ASSERT_NE(rs, nullptr);
  EXPECT_EQ(rs->options.source_link_layer, Mac("02:00:00:00:00:02"));
  ExpectEmitReproduces(r, kRs, src, all_routers);
  // Without options (as sent from the unspecified address).
  const Icmpv6Repr bare{NdpRouterSolicitation{}};
  EXPECT_EQ(EmitToVector(bare), Hex("85 00 00 00 00 00 00 00"));
}

TEST(NdpTest, ConstructNeighborSolicitation) {
  NdpNeighborSolicitation ns;
  ns.target = kHostB;
  ns.options.source_link_layer = Mac("02:00:00:00:00:01");
  const Icmpv6Repr r{ns};
  std::vector<uint8_t> out = EmitToVector(r);
  MutableIcmpv6Packet(out).FillChecksum(kHostA, Addr("ff02::1:ff00:2"));
  EXPECT_EQ(out, std::vector<uint8_t>(Message(kNsPacket).begin(),
                                      Message(kNsPacket).end()));
}

TEST(NdpTest, UnknownOptionsAreSkipped) {
  // A Nonce option (type 14, RFC 3971), then the source link-layer address.
  const std::vector<uint8_t> b =
      Hex("87 00 66 70 00 00 00 00 fd 00 00 09 00 00 00 00"
          "00 00 00 00 00 00 00 02 0e 01 01 02 03 04 05 06"
          "01 01 02 00 00 00 00 01");
  EXPECT_TRUE(Icmpv6Packet(b).ChecksumValid(kHostA, Addr("ff02::1:ff00:2")));
  Icmpv6Repr r;
  ASSERT_EQ(Icmpv6Repr::Parse(Icmpv6Packet(b), r), WireError::kOk);
  const auto& ns = std::get<NdpNeighborSolicitation>(r.message);
  EXPECT_EQ(ns.options.source_link_layer, Mac("02:00:00:00:00:01"));
  // The reader still sees every option.
  NdpOptionReader reader(Icmpv6Packet(b).Options());
  NdpOption option;
  ASSERT_TRUE(reader.Next(option));
  EXPECT_EQ(option.type, 14);
  EXPECT_EQ(option.bytes.size(), 8u);
  ASSERT_TRUE(reader.Next(option));
  EXPECT_EQ(option.type, 1);
  EXPECT_FALSE(reader.Next(option));
  // Emit leaves the unknown option out.
  EXPECT_EQ(r.BufferLen(), 32u);
}

TEST(NdpTest, RepeatedOptionKeepsTheFirst) {
  const std::vector<uint8_t> b =
      Hex("85 00 00 00 00 00 00 00"
          "01 01 02 00 00 00 00 01"
          "01 01 02 00 00 00 00 02"
          "05 01 00 00 00 00 05 dc"
          "05 01 00 00 00 00 05 00");
  Icmpv6Repr r;
  ASSERT_EQ(Icmpv6Repr::Parse(Icmpv6Packet(b), r), WireError::kOk);
  const auto& rs = std::get<NdpRouterSolicitation>(r.message);
  EXPECT_EQ(rs.options.source_link_layer, Mac("02:00:00:00:00:01"));
  EXPECT_EQ(rs.options.mtu, 1500u);
}

TEST(NdpTest, PrefixesBeyondCapacityAreCounted) {
  std::vector<uint8_t> b =
      Hex("86 00 00 00 40 00 07 08 00 00 00 00 00 00 00 00");
  const size_t n = NdpPrefixList::kCapacity + 2;
  for (size_t i = 0; i < n; ++i) {
    std::vector<uint8_t> option =
        Hex("03 04 40 c0 00 01 51 80 00 00 38 40 00 00 00 00"
            "fd 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00");
    option[19] = static_cast<uint8_t>(i);  // fd00:i::
    b.insert(b.end(), option.begin(), option.end());
  }
  Icmpv6Repr r;
  ASSERT_EQ(Icmpv6Repr::Parse(Icmpv6Packet(b), r), WireError::kOk);
  const auto& ra = std::get<NdpRouterAdvertisement>(r.message);
  ASSERT_EQ(ra.options.prefixes.size(), NdpPrefixList::kCapacity);
  EXPECT_EQ(ra.options.prefixes_ignored, 2);
  EXPECT_EQ(ra.options.prefixes[7].prefix, Addr("fd00:7::"));
}

TEST(NdpTest, TruncatedAtEveryLength) {
  // Fixed parts: every prefix is kTruncated.
  ExpectEveryTruncationFails(Message(kNsPacket).first(24), ParseBytes);
  ExpectEveryTruncationFails(Message(kNaPacket).first(24), ParseBytes);
  ExpectEveryTruncationFails(std::span<const uint8_t>(kRa).first(16),
                             ParseBytes);
  ExpectEveryTruncationFails(std::span<const uint8_t>(kRs).first(8),
                             ParseBytes);
  // Whole messages: only prefixes ending at an option boundary parse.
  ExpectTruncationsFailExcept(Message(kNsPacket), {24});
  ExpectTruncationsFailExcept(Message(kNaPacket), {24});
  ExpectTruncationsFailExcept(kRa, {16, 24, 32});
  ExpectTruncationsFailExcept(kRaRadvdOrder, {16, 48, 56});
  ExpectTruncationsFailExcept(kRs, {8});
  // A cut option runs past the end of the area.
  for (const auto option : {std::span<const uint8_t>(kRa).subspan(16, 8),
                            std::span<const uint8_t>(kRa).subspan(24, 8),
                            std::span<const uint8_t>(kRa).subspan(32, 32)}) {
    for (size_t len = 1; len < option.size(); ++len) {
      std::vector<uint8_t> cut(option.begin(), option.begin() + len);
      cut.shrink_to_fit();
      EXPECT_EQ(CheckNdpOptions(cut), WireError::kOptionOverflow) << len;
    }
  }
}

TEST(NdpTest, OptionLengthZero) {
  std::vector<uint8_t> b(kRs);
  b[9] = 0;
  EXPECT_EQ(ParseBytes(b), WireError::kBadOptionLength);
  // An unknown option type with length 0 is just as fatal: the walk could
  // not move past it.
  EXPECT_EQ(CheckNdpOptions(Hex("0e 00 00 00 00 00 00 00")),
            WireError::kBadOptionLength);
}

TEST(NdpTest, OptionOverflow) {
  // Source link-layer option claiming 16 bytes with 8 present.
  std::vector<uint8_t> b(kRs);
  b[9] = 2;
  EXPECT_EQ(ParseBytes(b), WireError::kOptionOverflow);
  // A single trailing byte (a type without its length).
  std::vector<uint8_t> c(kRs);
  c.push_back(1);
  EXPECT_EQ(ParseBytes(c), WireError::kOptionOverflow);
  // An unknown option with length 255 (2040 bytes).
  EXPECT_EQ(CheckNdpOptions(Hex("0e ff 00 00 00 00 00 00")),
            WireError::kOptionOverflow);
}

TEST(NdpTest, KnownOptionOfWrongSize) {
  // A 16-byte source link-layer address option is not Ethernet's.
  EXPECT_EQ(CheckNdpOptions(Hex("01 02 02 00 00 00 00 01 00 00 00 00 00 00 "
                                "00 00")),
            WireError::kBadOptionLength);
  EXPECT_EQ(CheckNdpOptions(Hex("05 02 00 00 00 00 05 dc 00 00 00 00 00 00 "
                                "00 00")),
            WireError::kBadOptionLength);
  // The RA's prefix option cut to 24 bytes (length 3).
  std::vector<uint8_t> b(kRa.begin(), kRa.end() - 8);
  b[33] = 3;
  EXPECT_EQ(ParseBytes(b), WireError::kBadOptionLength);
}

TEST(NdpTest, PrefixLengthAbove128) {
  std::vector<uint8_t> b(kRa);
  b[34] = 129;
  EXPECT_EQ(ParseBytes(b), WireError::kMalformed);
  b[34] = 128;
  EXPECT_EQ(ParseBytes(b), WireError::kOk);
}

TEST(NdpTest, NonzeroCodeIsMalformed) {
  for (const std::vector<uint8_t>& msg :
       {std::vector<uint8_t>(Message(kNsPacket).begin(),
                             Message(kNsPacket).end()),
        std::vector<uint8_t>(Message(kNaPacket).begin(),
                             Message(kNaPacket).end()),
        kRa, kRs}) {
    std::vector<uint8_t> b = msg;
    b[1] = 1;
    EXPECT_EQ(ParseBytes(b), WireError::kMalformed) << int{b[0]};
  }
}

TEST(NdpTest, MulticastTargetIsMalformed) {
  for (const auto* packet : {&kNsPacket, &kNaPacket}) {
    std::vector<uint8_t> b(Message(*packet).begin(), Message(*packet).end());
    b[8] = 0xff;  // target becomes ff00:9::2
    EXPECT_EQ(ParseBytes(b), WireError::kMalformed);
  }
}

// --- Echo
// ---------------------------------------------------------------------

TEST(Icmpv6EchoTest, ParseRequest) {
  Icmpv6Packet p(kEchoRequest);
  EXPECT_TRUE(p.ChecksumValid(kHostA, kHostB));
  Icmpv6Repr r;
  ASSERT_EQ(Icmpv6Repr::Parse(p, r), WireError::kOk);
  EXPECT_EQ(r.type(), 128);
  const auto* echo = std::get_if<Icmpv6EchoRequest>(&r.message);
  ASSERT_NE(echo, nullptr);
  EXPECT_EQ(echo->identifier, 0x1c2b);
  EXPECT_EQ(echo->sequence, 1);
  ASSERT_EQ(echo->data.size(), 56u);
  EXPECT_EQ(echo->data.data(), kEchoRequest.data() + 8);  // no copy
  EXPECT_EQ(echo->data[55], 0x37);
  ExpectEmitReproduces(r, kEchoRequest, kHostA, kHostB);
}

TEST(Icmpv6EchoTest, ParseReply) {
  Icmpv6Repr r;
  ASSERT_EQ(Icmpv6Repr::Parse(Icmpv6Packet(kEchoReply), r), WireError::kOk);
  const auto* echo = std::get_if<Icmpv6EchoReply>(&r.message);
  ASSERT_NE(echo, nullptr);
  EXPECT_EQ(echo->identifier, 0x1c2b);
  EXPECT_EQ(echo->data.size(), 56u);
  ExpectEmitReproduces(r, kEchoReply, kHostB, kHostA);
}

TEST(Icmpv6EchoTest, ReplyInPlace) {
  // The way a responder answers: parse the request, emit the reply into the
  // same buffer (its data span aliases the bytes being written).
  std::vector<uint8_t> b = kEchoRequest;
  Icmpv6Repr request;
  ASSERT_EQ(Icmpv6Repr::Parse(Icmpv6Packet(b), request), WireError::kOk);
  const auto& echo = std::get<Icmpv6EchoRequest>(request.message);
  const Icmpv6Repr reply{
      Icmpv6EchoReply{echo.identifier, echo.sequence, echo.data}};
  ASSERT_EQ(reply.BufferLen(), b.size());
  reply.Emit(MutableIcmpv6Packet(b));
  MutableIcmpv6Packet(b).FillChecksum(kHostB, kHostA);
  EXPECT_EQ(b, kEchoReply);
}

TEST(Icmpv6EchoTest, ConstructThenParse) {
  const std::vector<uint8_t> data = Hex("de ad be ef 01");
  const Icmpv6Repr r{Icmpv6EchoRequest{0xabcd, 0xff01, data}};
  std::vector<uint8_t> out = EmitToVector(r);
  EXPECT_EQ(out, Hex("80 00 00 00 ab cd ff 01 de ad be ef 01"));
  Icmpv6Repr back;
  ASSERT_EQ(Icmpv6Repr::Parse(Icmpv6Packet(out), back), WireError::kOk);
  EXPECT_EQ(back, r);
  // Odd length: the checksum pads with a zero byte (RFC 1071).
  MutableIcmpv6Packet(out).FillChecksum(kHostA, kHostB);
  EXPECT_TRUE(Icmpv6Packet(out).ChecksumValid(kHostA, kHostB));
  // Equality is by content, not by buffer.
  const std::vector<uint8_t> other = Hex("de ad be ef 02");
  EXPECT_NE(back, (Icmpv6Repr{Icmpv6EchoRequest{0xabcd, 0xff01, other}}));
}

TEST(Icmpv6EchoTest, EmptyData) {
  const Icmpv6Repr r{Icmpv6EchoReply{1, 2, {}}};
  const std::vector<uint8_t> out = EmitToVector(r);
  EXPECT_EQ(out, Hex("81 00 00 00 00 01 00 02"));
  Icmpv6Repr back;
  ASSERT_EQ(Icmpv6Repr::Parse(Icmpv6Packet(out), back), WireError::kOk);
  EXPECT_EQ(back, r);
}

TEST(Icmpv6EchoTest, TruncatedAtEveryLength) {
  // ICMPv6 has no length field: any length from 8 on is a valid echo with
  // less data, so only the fixed part can be cut short.
  ExpectEveryTruncationFails(std::span<const uint8_t>(kEchoRequest).first(8),
                             ParseBytes);
  ExpectEveryTruncationFails(std::span<const uint8_t>(kEchoReply).first(8),
                             ParseBytes);
}

// --- Errors -----------------------------------------------------------------

// The start of the SYN in ipv6_test.cc, as an invoking packet.
const std::vector<uint8_t> kInvoking =
    Hex("60 0a 1b 2c 00 28 06 40 fd 00 00 09 00 00 00 00"
        "00 00 00 00 00 00 00 01 fd 00 00 09 00 00 00 00"
        "00 00 00 00 00 00 00 02 9c 42 00 50 1b 2d 3c 4e");

TEST(Icmpv6ErrorTest, PacketTooBig) {
  const Icmpv6Repr r{Icmpv6PacketTooBig{1280, kInvoking}};
  std::vector<uint8_t> out = EmitToVector(r);
  std::vector<uint8_t> expected = Hex("02 00 00 00 00 00 05 00");
  expected.insert(expected.end(), kInvoking.begin(), kInvoking.end());
  EXPECT_EQ(out, expected);
  Icmpv6Repr back;
  ASSERT_EQ(Icmpv6Repr::Parse(Icmpv6Packet(out), back), WireError::kOk);
  EXPECT_EQ(back, r);
  EXPECT_EQ(Icmpv6Packet(out).Mtu(), 1280u);
  // The Code is ignored on receipt (RFC 4443 section 3.2).
  out[1] = 7;
  ASSERT_EQ(Icmpv6Repr::Parse(Icmpv6Packet(out), back), WireError::kOk);
  EXPECT_EQ(back, r);
}

TEST(Icmpv6ErrorTest, DestinationUnreachable) {
  const Icmpv6Repr r{Icmpv6DestinationUnreachable{4, kInvoking}};
  const std::vector<uint8_t> out = EmitToVector(r);
  EXPECT_EQ(std::vector<uint8_t>(out.begin(), out.begin() + 8),
            Hex("01 04 00 00 00 00 00 00"));
  Icmpv6Repr back;
  ASSERT_EQ(Icmpv6Repr::Parse(Icmpv6Packet(out), back), WireError::kOk);
  EXPECT_EQ(back, r);
  const auto& du = std::get<Icmpv6DestinationUnreachable>(back.message);
  EXPECT_EQ(du.code, 4);
  EXPECT_EQ(du.invoking_packet.size(), kInvoking.size());
}

TEST(Icmpv6ErrorTest, TimeExceeded) {
  const Icmpv6Repr r{Icmpv6TimeExceeded{1, kInvoking}};
  const std::vector<uint8_t> out = EmitToVector(r);
  EXPECT_EQ(std::vector<uint8_t>(out.begin(), out.begin() + 8),
            Hex("03 01 00 00 00 00 00 00"));
  Icmpv6Repr back;
  ASSERT_EQ(Icmpv6Repr::Parse(Icmpv6Packet(out), back), WireError::kOk);
  EXPECT_EQ(back, r);
}

TEST(Icmpv6ErrorTest, ParameterProblem) {
  const Icmpv6Repr r{Icmpv6ParameterProblem{1, 6, kInvoking}};
  const std::vector<uint8_t> out = EmitToVector(r);
  EXPECT_EQ(std::vector<uint8_t>(out.begin(), out.begin() + 8),
            Hex("04 01 00 00 00 00 00 06"));
  Icmpv6Repr back;
  ASSERT_EQ(Icmpv6Repr::Parse(Icmpv6Packet(out), back), WireError::kOk);
  EXPECT_EQ(back, r);
}

TEST(Icmpv6ErrorTest, TruncatedAtEveryLength) {
  for (const Icmpv6Repr& r :
       {Icmpv6Repr{Icmpv6PacketTooBig{1280, kInvoking}},
        Icmpv6Repr{Icmpv6DestinationUnreachable{4, kInvoking}},
        Icmpv6Repr{Icmpv6TimeExceeded{0, kInvoking}},
        Icmpv6Repr{Icmpv6ParameterProblem{0, 4, kInvoking}}}) {
    const std::vector<uint8_t> out = EmitToVector(r);
    ExpectEveryTruncationFails(std::span<const uint8_t>(out).first(8),
                               ParseBytes);
  }
}

// --- Other types and checksums ---------------------------------------------

TEST(Icmpv6Test, OtherTypesParseGenerically) {
  // MLDv1 query (130): max response delay 10000 ms, general query.
  const std::vector<uint8_t> b =
      Hex("82 00 00 00 27 10 00 00"
          "00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00");
  Icmpv6Repr r;
  ASSERT_EQ(Icmpv6Repr::Parse(Icmpv6Packet(b), r), WireError::kOk);
  const auto* other = std::get_if<Icmpv6Other>(&r.message);
  ASSERT_NE(other, nullptr);
  EXPECT_EQ(other->type, 130);
  EXPECT_EQ(other->code, 0);
  EXPECT_EQ(other->rest_of_header, 0x27100000u);
  EXPECT_EQ(other->body.size(), 16u);
  EXPECT_EQ(r.type(), 130);
  EXPECT_EQ(EmitToVector(r), b);
  // Redirect (137) has options but is not parsed here; it is generic too.
  std::vector<uint8_t> redirect(40, 0);
  redirect[0] = 137;
  redirect[1] = 0;
  ASSERT_EQ(Icmpv6Repr::Parse(Icmpv6Packet(redirect), r), WireError::kOk);
  EXPECT_NE(std::get_if<Icmpv6Other>(&r.message), nullptr);
  EXPECT_TRUE(Icmpv6Packet(redirect).Options().empty());
  ExpectEveryTruncationFails(std::span<const uint8_t>(b).first(8), ParseBytes);
}

TEST(Icmpv6Test, ChecksumDetectsCorruption) {
  const std::vector<uint8_t> ns(Message(kNsPacket).begin(),
                                Message(kNsPacket).end());
  const Ipv6Address src = PacketSrc(kNsPacket);
  const Ipv6Address dst = PacketDst(kNsPacket);
  ASSERT_TRUE(Icmpv6Packet(ns).ChecksumValid(src, dst));
  // Any flipped bit in the message.
  for (size_t i = 0; i < ns.size(); ++i) {
    std::vector<uint8_t> b = ns;
    b[i] ^= 0x01;
    EXPECT_FALSE(Icmpv6Packet(b).ChecksumValid(src, dst)) << i;
  }
  // The pseudo-header is covered: another address fails.
  EXPECT_FALSE(Icmpv6Packet(ns).ChecksumValid(kHostB, dst));
  EXPECT_FALSE(Icmpv6Packet(ns).ChecksumValid(src, kAllNodes));
  // So is the length: the same bytes with a trailing zero byte fail even
  // though the zero adds nothing to the sum of the message itself.
  std::vector<uint8_t> longer = ns;
  longer.push_back(0);
  EXPECT_FALSE(Icmpv6Packet(longer).ChecksumValid(src, dst));
  // Parse does not look at the checksum.
  std::vector<uint8_t> bad = ns;
  bad[2] ^= 0xff;
  EXPECT_EQ(ParseBytes(bad), WireError::kOk);
}

TEST(Icmpv6Test, FillChecksumOverwritesOldValue) {
  std::vector<uint8_t> b = kEchoRequest;
  b[2] = 0x12;
  b[3] = 0x34;
  MutableIcmpv6Packet(b).FillChecksum(kHostA, kHostB);
  EXPECT_EQ(b, kEchoRequest);
}

TEST(Icmpv6Test, TooShort) {
  EXPECT_EQ(ParseBytes({}), WireError::kTruncated);
  EXPECT_EQ(ParseBytes(Hex("80 00 00 00 00 01 00")), WireError::kTruncated);
  // 16 bytes is enough for an echo but not for an NS.
  std::vector<uint8_t> ns(Message(kNsPacket).begin(),
                          Message(kNsPacket).begin() + 16);
  EXPECT_EQ(ParseBytes(ns), WireError::kTruncated);
}

// Every type with short, patterned bodies: Parse is total, and whatever it
// accepts re-emits into no more bytes than it came from.
TEST(Icmpv6Test, TotalOnSmallInputs) {
  for (int type = 0; type < 256; ++type) {
    for (uint8_t fill : {uint8_t{0x00}, uint8_t{0x01}, uint8_t{0xff}}) {
      for (size_t size = 0; size <= 48; ++size) {
        std::vector<uint8_t> b(size, fill);
        if (size > 0) b[0] = static_cast<uint8_t>(type);
        if (size > 1) b[1] = 0;
        b.shrink_to_fit();
        Icmpv6Repr r;
        if (Icmpv6Repr::Parse(Icmpv6Packet(b), r) == WireError::kOk) {
          EXPECT_LE(r.BufferLen(), size) << type;
          EXPECT_EQ(r.type(), type);
          std::vector<uint8_t> out = EmitToVector(r);
          Icmpv6Repr back;
          ASSERT_EQ(Icmpv6Repr::Parse(Icmpv6Packet(out), back), WireError::kOk);
          EXPECT_EQ(back, r) << type << " size " << size;
        }
      }
    }
  }
}

}  // namespace
}  // namespace netstack::wire
