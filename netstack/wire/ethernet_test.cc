#include "netstack/wire/ethernet.h"

#include <vector>

#include "gtest/gtest.h"
#include "netstack/wire/testing.h"

namespace netstack::wire {
namespace {

using testing::ExpectEveryTruncationFails;
using testing::Hex;

// Frame header from tests/testdata/http_ipv4.pcap (the SYN).
const std::vector<uint8_t> kUntagged =
    Hex("02 00 00 00 00 02  02 00 00 00 00 01  08 00  45 00");
// Same with an 802.1Q tag, VLAN 5, PCP 3.
const std::vector<uint8_t> kTagged =
    Hex("ff ff ff ff ff ff  02 00 00 00 00 01  81 00 60 05  08 06  00 01");

TEST(EthernetTest, ParseUntagged) {
  EthernetRepr r;
  ASSERT_EQ(EthernetRepr::Parse(EthernetFrame(kUntagged), r), WireError::kOk);
  EXPECT_EQ(r.dst.ToString(), "02:00:00:00:00:02");
  EXPECT_EQ(r.src.ToString(), "02:00:00:00:00:01");
  EXPECT_EQ(r.ethertype, static_cast<uint16_t>(EtherType::kIpv4));
  EXPECT_FALSE(r.vlan.has_value());
  EXPECT_EQ(r.BufferLen(), 14u);
  EXPECT_EQ(EthernetFrame(kUntagged).Payload().size(), 2u);
}

TEST(EthernetTest, ParseSkipsVlanTag) {
  EthernetRepr r;
  ASSERT_EQ(EthernetRepr::Parse(EthernetFrame(kTagged), r), WireError::kOk);
  EXPECT_TRUE(r.dst.IsBroadcast());
  EXPECT_EQ(r.ethertype, static_cast<uint16_t>(EtherType::kArp));
  ASSERT_TRUE(r.vlan.has_value());
  EXPECT_EQ(r.vlan->tci, 0x6005);
  EXPECT_EQ(r.BufferLen(), 18u);
  EXPECT_EQ(EthernetFrame(kTagged).Payload()[1], 0x01);
}

TEST(EthernetTest, EmitRoundTrips) {
  for (const auto* bytes : {&kUntagged, &kTagged}) {
    EthernetRepr r;
    ASSERT_EQ(EthernetRepr::Parse(EthernetFrame(*bytes), r), WireError::kOk);
    std::vector<uint8_t> out(r.BufferLen());
    r.Emit(MutableEthernetFrame(out));
    EXPECT_EQ(out, std::vector<uint8_t>(bytes->begin(),
                                        bytes->begin() + r.BufferLen()));
  }
}

TEST(EthernetTest, ConstructThenParse) {
  EthernetRepr r;
  r.src = *MacAddress::Parse("0a:0b:0c:0d:0e:0f");
  r.dst = MacAddress::Broadcast();
  r.ethertype = static_cast<uint16_t>(EtherType::kIpv6);
  std::vector<uint8_t> out(r.BufferLen());
  r.Emit(MutableEthernetFrame(out));
  EXPECT_EQ(out, Hex("ff ff ff ff ff ff 0a 0b 0c 0d 0e 0f 86 dd"));
  EthernetRepr back;
  ASSERT_EQ(EthernetRepr::Parse(EthernetFrame(out), back), WireError::kOk);
  EXPECT_EQ(back, r);
}

TEST(EthernetTest, TruncatedAtEveryLength) {
  auto parse = [](std::span<const uint8_t> b) {
    EthernetRepr r;
    return EthernetRepr::Parse(EthernetFrame(b), r);
  };
  ExpectEveryTruncationFails(
      std::span<const uint8_t>(kUntagged).first(14), parse);
  ExpectEveryTruncationFails(std::span<const uint8_t>(kTagged).first(18),
                             parse);
}

TEST(MacAddressTest, ParseRejectsGarbage) {
  EXPECT_FALSE(MacAddress::Parse("").has_value());
  EXPECT_FALSE(MacAddress::Parse("00:11:22:33:44").has_value());
  EXPECT_FALSE(MacAddress::Parse("00-11-22-33-44-55").has_value());
  EXPECT_FALSE(MacAddress::Parse("00:11:22:33:44:5g").has_value());
  EXPECT_EQ(MacAddress::Parse("00:11:22:AA:bb:55")->ToString(),
            "00:11:22:aa:bb:55");
}

}  // namespace
}  // namespace netstack::wire
