#include "netstack/wire/arp.h"

#include <cstdint>
#include <span>
#include <vector>

#include "gtest/gtest.h"
#include "netstack/wire/testing.h"

namespace netstack::wire {
namespace {

using testing::ExpectEveryTruncationFails;
using testing::Hex;

// Linux asking "who has 10.9.0.2? tell 10.9.0.1": target MAC zero.
const std::vector<uint8_t> kRequest =
    Hex("00 01 08 00 06 04 00 01  02 00 00 00 00 01  0a 09 00 01"
        "00 00 00 00 00 00  0a 09 00 02");

// The reply, as received: padded by Ethernet to the 46-byte minimum
// payload.
const std::vector<uint8_t> kPaddedReply =
    Hex("00 01 08 00 06 04 00 02  02 00 00 00 00 02  0a 09 00 02"
        "02 00 00 00 00 01  0a 09 00 01"
        "00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00");

MacAddress Mac(const char* text) { return *MacAddress::Parse(text); }
Ipv4Address Ip(const char* text) { return *Ipv4Address::Parse(text); }

WireError ParseBytes(std::span<const uint8_t> b) {
  ArpRepr r;
  return ArpRepr::Parse(ArpPacket(b), r);
}

std::vector<uint8_t> EmitToVector(const ArpRepr& r) {
  std::vector<uint8_t> out(r.BufferLen(), 0xee);
  r.Emit(MutableArpPacket(out));
  return out;
}

TEST(ArpTest, ParseRequest) {
  const ArpPacket p(kRequest);
  ASSERT_EQ(p.Check(), WireError::kOk);
  EXPECT_EQ(p.HardwareType(), 1);
  EXPECT_EQ(p.ProtocolType(), 0x0800);
  EXPECT_EQ(p.HardwareLen(), 6);
  EXPECT_EQ(p.ProtocolLen(), 4);
  EXPECT_EQ(p.Operation(), 1);

  ArpRepr r;
  ASSERT_EQ(ArpRepr::Parse(p, r), WireError::kOk);
  EXPECT_EQ(r.operation, ArpOperation::kRequest);
  EXPECT_EQ(r.sender_mac, Mac("02:00:00:00:00:01"));
  EXPECT_EQ(r.sender_ip, Ip("10.9.0.1"));
  EXPECT_TRUE(r.target_mac.IsZero());
  EXPECT_EQ(r.target_ip, Ip("10.9.0.2"));
  EXPECT_EQ(r.BufferLen(), 28u);
}

TEST(ArpTest, ParsePaddedReply) {
  ArpRepr r;
  ASSERT_EQ(ArpRepr::Parse(ArpPacket(kPaddedReply), r), WireError::kOk);
  EXPECT_EQ(r.operation, ArpOperation::kReply);
  EXPECT_EQ(r.sender_mac, Mac("02:00:00:00:00:02"));
  EXPECT_EQ(r.sender_ip, Ip("10.9.0.2"));
  EXPECT_EQ(r.target_mac, Mac("02:00:00:00:00:01"));
  EXPECT_EQ(r.target_ip, Ip("10.9.0.1"));
}

TEST(ArpTest, EmitRoundTrips) {
  for (const auto* bytes : {&kRequest, &kPaddedReply}) {
    ArpRepr r;
    ASSERT_EQ(ArpRepr::Parse(ArpPacket(*bytes), r), WireError::kOk);
    EXPECT_EQ(EmitToVector(r),
              std::vector<uint8_t>(bytes->begin(), bytes->begin() + 28));
  }
}

TEST(ArpTest, ConstructThenParse) {
  // The reply 10.9.0.2 sends to kRequest.
  ArpRepr r;
  r.operation = ArpOperation::kReply;
  r.sender_mac = Mac("02:00:00:00:00:02");
  r.sender_ip = Ip("10.9.0.2");
  r.target_mac = Mac("02:00:00:00:00:01");
  r.target_ip = Ip("10.9.0.1");
  const std::vector<uint8_t> out = EmitToVector(r);
  EXPECT_EQ(out, std::vector<uint8_t>(kPaddedReply.begin(),
                                      kPaddedReply.begin() + 28));
  ArpRepr back;
  ASSERT_EQ(ArpRepr::Parse(ArpPacket(out), back), WireError::kOk);
  EXPECT_EQ(back, r);
}

TEST(ArpTest, ConstructGratuitousRequest) {
  // Gratuitous ARP (RFC 5227 section 3): sender and target IP both ours.
  ArpRepr r;
  r.operation = ArpOperation::kRequest;
  r.sender_mac = Mac("0a:0b:0c:0d:0e:0f");
  r.sender_ip = Ip("192.168.1.7");
  r.target_ip = Ip("192.168.1.7");
  const std::vector<uint8_t> out = EmitToVector(r);
  EXPECT_EQ(out, Hex("00 01 08 00 06 04 00 01  0a 0b 0c 0d 0e 0f  c0 a8 01 07"
                     "00 00 00 00 00 00  c0 a8 01 07"));
  ArpRepr back;
  ASSERT_EQ(ArpRepr::Parse(ArpPacket(out), back), WireError::kOk);
  EXPECT_EQ(back, r);
}

TEST(ArpTest, TruncatedAtEveryLength) {
  // Below 8 bytes the fixed part is missing; from 8 to 27 the addresses.
  ExpectEveryTruncationFails(kRequest, ParseBytes);
  ExpectEveryTruncationFails(std::span<const uint8_t>(kPaddedReply).first(28),
                             ParseBytes);
}

TEST(ArpTest, RejectsWrongAddressLengths) {
  std::vector<uint8_t> b = kRequest;
  b[4] = 5;  // hlen
  EXPECT_EQ(ParseBytes(b), WireError::kMalformed);
  b = kRequest;
  b[5] = 16;  // plen of an IPv6 address, with ptype still IPv4
  EXPECT_EQ(ParseBytes(b), WireError::kMalformed);
  // Length errors are reported from the fixed part alone.
  b = kRequest;
  b[4] = 8;
  b.resize(8);
  EXPECT_EQ(ParseBytes(b), WireError::kMalformed);
}

TEST(ArpTest, RejectsOtherNetworks) {
  std::vector<uint8_t> b = kRequest;
  b[1] = 6;  // IEEE 802 hardware
  EXPECT_EQ(ParseBytes(b), WireError::kUnsupported);
  b = kRequest;
  b[2] = 0x86;  // ptype IPv6
  b[3] = 0xdd;
  EXPECT_EQ(ParseBytes(b), WireError::kUnsupported);
  // Unsupported types take precedence over their lengths, which are only
  // meaningful for a known pair.
  b = kRequest;
  b[0] = 0x00;
  b[1] = 0x20;  // InfiniBand, hlen 20
  b[4] = 20;
  b.resize(8);
  EXPECT_EQ(ParseBytes(b), WireError::kUnsupported);
}

TEST(ArpTest, RejectsUnknownOperation) {
  std::vector<uint8_t> b = kRequest;
  b[7] = 3;  // RARP request (RFC 903)
  EXPECT_EQ(ArpPacket(b).Check(), WireError::kOk);
  EXPECT_EQ(ParseBytes(b), WireError::kUnsupported);
  b[7] = 0;
  EXPECT_EQ(ParseBytes(b), WireError::kUnsupported);
}

TEST(ArpTest, MutableSetters) {
  std::vector<uint8_t> b(28, 0xff);
  MutableArpPacket p(b);
  p.SetEthernetIpv4Types();
  p.SetOperation(static_cast<uint16_t>(ArpOperation::kRequest));
  p.SetSenderMac(Mac("02:00:00:00:00:01"));
  p.SetSenderIp(Ip("10.9.0.1"));
  p.SetTargetMac(MacAddress{});
  p.SetTargetIp(Ip("10.9.0.2"));
  EXPECT_EQ(b, kRequest);
}

}  // namespace
}  // namespace netstack::wire
