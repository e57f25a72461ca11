#include "netstack/wire/icmpv4.h"

#include <cstdint>
#include <span>
#include <variant>
#include <vector>

#include "gtest/gtest.h"
#include "netstack/wire/testing.h"

namespace netstack::wire {
namespace {

using testing::ExpectEveryTruncationFails;
using testing::Hex;

// Linux `ping` echo request: ident 0x0d2c, seq 1, 56 data bytes (a 16-byte
// struct timeval, then 0x10..0x37).
const std::vector<uint8_t> kEchoRequest =
    Hex("08 00 8b ed 0d 2c 00 01 6a 0b 3e 65 00 00 00 00"
        "f3 a1 04 00 00 00 00 00 10 11 12 13 14 15 16 17"
        "18 19 1a 1b 1c 1d 1e 1f 20 21 22 23 24 25 26 27"
        "28 29 2a 2b 2c 2d 2e 2f 30 31 32 33 34 35 36 37");

// The reply to it: same ident, seq and data.
const std::vector<uint8_t> kEchoReply =
    Hex("00 00 93 ed 0d 2c 00 01 6a 0b 3e 65 00 00 00 00"
        "f3 a1 04 00 00 00 00 00 10 11 12 13 14 15 16 17"
        "18 19 1a 1b 1c 1d 1e 1f 20 21 22 23 24 25 26 27"
        "28 29 2a 2b 2c 2d 2e 2f 30 31 32 33 34 35 36 37");

// The datagram the errors below refer to: IPv4 header and the first 8
// bytes of a UDP datagram 10.9.0.1:40000 -> 10.9.0.2:33434.
const std::vector<uint8_t> kInvoking =
    Hex("45 00 00 20 12 34 40 00 40 11 14 85 0a 09 00 01"
        "0a 09 00 02 9c 40 82 9a 00 0c 08 20");

// Port Unreachable for that datagram.
const std::vector<uint8_t> kPortUnreachable =
    Hex("03 03 d5 f5 00 00 00 00 45 00 00 20 12 34 40 00"
        "40 11 14 85 0a 09 00 01 0a 09 00 02 9c 40 82 9a"
        "00 0c 08 20");

// Fragmentation Needed with a next-hop MTU of 1400 (RFC 1191 section 4).
const std::vector<uint8_t> kFragNeeded =
    Hex("03 04 d0 7c 00 00 05 78 45 00 00 20 12 34 40 00"
        "40 11 14 85 0a 09 00 01 0a 09 00 02 9c 40 82 9a"
        "00 0c 08 20");

// TTL exceeded in transit (what traceroute collects).
const std::vector<uint8_t> kTimeExceeded =
    Hex("0b 00 cd f8 00 00 00 00 45 00 00 20 12 34 40 00"
        "40 11 14 85 0a 09 00 01 0a 09 00 02 9c 40 82 9a"
        "00 0c 08 20");

// Parameter Problem pointing at octet 20 of the invoking header: parsed
// generically.
const std::vector<uint8_t> kParameterProblem =
    Hex("0c 00 b8 f8 14 00 00 00 45 00 00 20 12 34 40 00"
        "40 11 14 85 0a 09 00 01 0a 09 00 02 9c 40 82 9a"
        "00 0c 08 20");

const std::vector<const std::vector<uint8_t>*> kAllValid = {
    &kEchoRequest, &kEchoReply,    &kPortUnreachable,
    &kFragNeeded,  &kTimeExceeded, &kParameterProblem};

std::vector<uint8_t> ToVector(std::span<const uint8_t> s) {
  return std::vector<uint8_t>(s.begin(), s.end());
}

std::vector<uint8_t> EmitToVector(const Icmpv4Repr& r) {
  std::vector<uint8_t> out(r.BufferLen(), 0xee);
  r.Emit(MutableIcmpv4Packet(out));
  return out;
}

TEST(Icmpv4Test, ParseEchoRequest) {
  const Icmpv4Packet p(kEchoRequest);
  ASSERT_EQ(p.Check(), WireError::kOk);
  EXPECT_EQ(p.Type(), 8);
  EXPECT_EQ(p.Code(), 0);
  EXPECT_EQ(p.Checksum(), 0x8bed);
  EXPECT_TRUE(p.ChecksumValid());
  EXPECT_EQ(p.EchoIdent(), 0x0d2c);
  EXPECT_EQ(p.EchoSeq(), 1);
  EXPECT_EQ(p.Data().size(), 56u);

  Icmpv4Repr r;
  ASSERT_EQ(Icmpv4Repr::Parse(p, r), WireError::kOk);
  const auto* echo = std::get_if<Icmpv4Repr::EchoRequest>(&r.message);
  ASSERT_NE(echo, nullptr);
  EXPECT_EQ(echo->ident, 0x0d2c);
  EXPECT_EQ(echo->seq_no, 1);
  EXPECT_EQ(r.Type(), static_cast<uint8_t>(Icmpv4Type::kEchoRequest));
  EXPECT_EQ(r.Code(), 0);
  // The data is a view into the parsed buffer, not a copy.
  EXPECT_EQ(r.data.data(), kEchoRequest.data() + 8);
  EXPECT_EQ(r.data.size(), 56u);
  EXPECT_EQ(r.BufferLen(), kEchoRequest.size());
}

TEST(Icmpv4Test, ParseEchoReply) {
  Icmpv4Repr r;
  ASSERT_EQ(Icmpv4Repr::Parse(Icmpv4Packet(kEchoReply), r), WireError::kOk);
  EXPECT_TRUE(Icmpv4Packet(kEchoReply).ChecksumValid());
  EXPECT_EQ(r.message, Icmpv4Repr::Message(Icmpv4Repr::EchoReply{0x0d2c, 1}));
  EXPECT_EQ(r.Type(), static_cast<uint8_t>(Icmpv4Type::kEchoReply));
}

TEST(Icmpv4Test, ParsePortUnreachable) {
  const Icmpv4Packet p(kPortUnreachable);
  EXPECT_TRUE(p.ChecksumValid());
  Icmpv4Repr r;
  ASSERT_EQ(Icmpv4Repr::Parse(p, r), WireError::kOk);
  const auto* u = std::get_if<Icmpv4Repr::DestUnreachable>(&r.message);
  ASSERT_NE(u, nullptr);
  EXPECT_EQ(u->code, Icmpv4UnreachableCode::kPortUnreachable);
  EXPECT_EQ(u->next_hop_mtu, 0);
  // The invoking datagram, IP header first.
  EXPECT_EQ(ToVector(r.data), kInvoking);
  EXPECT_EQ(r.Type(), 3);
  EXPECT_EQ(r.Code(), 3);
}

TEST(Icmpv4Test, ParseFragmentationNeededMtu) {
  const Icmpv4Packet p(kFragNeeded);
  EXPECT_TRUE(p.ChecksumValid());
  EXPECT_EQ(p.NextHopMtu(), 1400);
  Icmpv4Repr r;
  ASSERT_EQ(Icmpv4Repr::Parse(p, r), WireError::kOk);
  EXPECT_EQ(r.message, Icmpv4Repr::Message(Icmpv4Repr::DestUnreachable{
                           Icmpv4UnreachableCode::kFragmentationNeeded, 1400}));
  EXPECT_EQ(ToVector(r.data), kInvoking);
}

TEST(Icmpv4Test, ParseTimeExceeded) {
  EXPECT_TRUE(Icmpv4Packet(kTimeExceeded).ChecksumValid());
  Icmpv4Repr r;
  ASSERT_EQ(Icmpv4Repr::Parse(Icmpv4Packet(kTimeExceeded), r), WireError::kOk);
  EXPECT_EQ(r.message, Icmpv4Repr::Message(Icmpv4Repr::TimeExceeded{
                           Icmpv4TimeExceededCode::kTtlExceeded}));
  EXPECT_EQ(ToVector(r.data), kInvoking);
}

TEST(Icmpv4Test, ParseOtherTypesGenerically) {
  const Icmpv4Packet p(kParameterProblem);
  EXPECT_TRUE(p.ChecksumValid());
  EXPECT_EQ(p.Pointer(), 20);
  Icmpv4Repr r;
  ASSERT_EQ(Icmpv4Repr::Parse(p, r), WireError::kOk);
  EXPECT_EQ(r.message,
            Icmpv4Repr::Message(Icmpv4Repr::Other{12, 0, 0x14000000}));
  EXPECT_EQ(r.Type(), static_cast<uint8_t>(Icmpv4Type::kParameterProblem));
  EXPECT_EQ(ToVector(r.data), kInvoking);
}

TEST(Icmpv4Test, EchoWithNonzeroCodeIsOther) {
  // RFC 792 defines only code 0 for echoes; anything else is kept verbatim
  // rather than answered.
  std::vector<uint8_t> b = kEchoRequest;
  b[1] = 7;
  Icmpv4Repr r;
  ASSERT_EQ(Icmpv4Repr::Parse(Icmpv4Packet(b), r), WireError::kOk);
  EXPECT_EQ(r.message,
            Icmpv4Repr::Message(Icmpv4Repr::Other{8, 7, 0x0d2c0001}));
  // Round-trips exactly, checksum included.
  MutableIcmpv4Packet(b).FillChecksum();
  EXPECT_EQ(EmitToVector(r), b);
}

TEST(Icmpv4Test, EmitRoundTripsEveryLiteral) {
  for (const auto* bytes : kAllValid) {
    Icmpv4Repr r;
    ASSERT_EQ(Icmpv4Repr::Parse(Icmpv4Packet(*bytes), r), WireError::kOk);
    EXPECT_EQ(EmitToVector(r), *bytes);
  }
}

TEST(Icmpv4Test, UnusedBytesAreIgnoredAndZeroedOnEmit) {
  std::vector<uint8_t> b = kFragNeeded;
  b[4] = 0xaa;
  b[5] = 0xbb;
  Icmpv4Repr r;
  ASSERT_EQ(Icmpv4Repr::Parse(Icmpv4Packet(b), r), WireError::kOk);
  EXPECT_EQ(std::get<Icmpv4Repr::DestUnreachable>(r.message).next_hop_mtu,
            1400);
  EXPECT_EQ(EmitToVector(r), kFragNeeded);

  b = kTimeExceeded;
  b[7] = 0x01;
  ASSERT_EQ(Icmpv4Repr::Parse(Icmpv4Packet(b), r), WireError::kOk);
  EXPECT_EQ(EmitToVector(r), kTimeExceeded);
}

TEST(Icmpv4Test, ConstructThenParse) {
  Icmpv4Repr r;
  r.message = Icmpv4Repr::DestUnreachable{
      Icmpv4UnreachableCode::kFragmentationNeeded, 1280};
  r.data = kInvoking;
  const std::vector<uint8_t> out = EmitToVector(r);
  EXPECT_EQ(out, Hex("03 04 d0 f4 00 00 05 00 45 00 00 20 12 34 40 00"
                     "40 11 14 85 0a 09 00 01 0a 09 00 02 9c 40 82 9a"
                     "00 0c 08 20"));
  EXPECT_TRUE(Icmpv4Packet(out).ChecksumValid());
  Icmpv4Repr back;
  ASSERT_EQ(Icmpv4Repr::Parse(Icmpv4Packet(out), back), WireError::kOk);
  EXPECT_EQ(back, r);
}

TEST(Icmpv4Test, ConstructEchoReplyMatchesLinux) {
  Icmpv4Repr r;
  r.message = Icmpv4Repr::EchoReply{0x0d2c, 1};
  r.data = std::span<const uint8_t>(kEchoRequest).subspan(8);
  EXPECT_EQ(EmitToVector(r), kEchoReply);
}

TEST(Icmpv4Test, EchoReplyBuiltInPlace) {
  // An echo responder turns the request buffer into the reply: the data
  // span points into the very buffer being emitted into.
  std::vector<uint8_t> buf = kEchoRequest;
  Icmpv4Repr req;
  ASSERT_EQ(Icmpv4Repr::Parse(Icmpv4Packet(buf), req), WireError::kOk);
  const auto& echo = std::get<Icmpv4Repr::EchoRequest>(req.message);
  Icmpv4Repr reply;
  reply.message = Icmpv4Repr::EchoReply{echo.ident, echo.seq_no};
  reply.data = req.data;
  reply.Emit(MutableIcmpv4Packet(buf));
  EXPECT_EQ(buf, kEchoReply);
}

TEST(Icmpv4Test, EmitChecksumsOnlyTheMessage) {
  // A view larger than the message (e.g. the rest of a frame buffer): the
  // checksum must not include the slack.
  Icmpv4Repr r;
  ASSERT_EQ(Icmpv4Repr::Parse(Icmpv4Packet(kEchoReply), r), WireError::kOk);
  std::vector<uint8_t> buf(kEchoReply.size() + 11, 0x5a);
  r.Emit(MutableIcmpv4Packet(buf));
  EXPECT_EQ(std::vector<uint8_t>(buf.begin(), buf.begin() + r.BufferLen()),
            kEchoReply);
  EXPECT_EQ(buf.back(), 0x5a);
}

TEST(Icmpv4Test, EmptyEchoData) {
  Icmpv4Repr r;
  r.message = Icmpv4Repr::EchoRequest{0xffff, 0xfffe};
  const std::vector<uint8_t> out = EmitToVector(r);
  ASSERT_EQ(out.size(), 8u);
  EXPECT_TRUE(Icmpv4Packet(out).ChecksumValid());
  Icmpv4Repr back;
  ASSERT_EQ(Icmpv4Repr::Parse(Icmpv4Packet(out), back), WireError::kOk);
  EXPECT_EQ(back, r);
}

TEST(Icmpv4Test, EqualityComparesDataContents) {
  Icmpv4Repr a, b;
  const std::vector<uint8_t> x = Hex("01 02 03");
  const std::vector<uint8_t> y = Hex("01 02 03");
  const std::vector<uint8_t> z = Hex("01 02 04");
  a.data = x;
  b.data = y;
  EXPECT_EQ(a, b);
  b.data = z;
  EXPECT_FALSE(a == b);
  b.data = y;
  b.message = Icmpv4Repr::EchoReply{};
  EXPECT_FALSE(a == b);
}

TEST(Icmpv4Test, TruncatedHeaderFails) {
  auto parse = [](std::span<const uint8_t> b) {
    Icmpv4Repr r;
    return Icmpv4Repr::Parse(Icmpv4Packet(b), r);
  };
  for (const auto* bytes : kAllValid) {
    ExpectEveryTruncationFails(std::span<const uint8_t>(*bytes).first(8),
                               parse);
  }
}

TEST(Icmpv4Test, TruncatedMessageStillParses) {
  // ICMP has no length field: its length comes from IP, so any message of
  // at least 8 bytes parses, with data up to the end of the view.
  for (const auto* bytes : kAllValid) {
    for (size_t len = 8; len < bytes->size(); ++len) {
      std::vector<uint8_t> b(bytes->begin(), bytes->begin() + len);
      b.shrink_to_fit();
      Icmpv4Repr r;
      ASSERT_EQ(Icmpv4Repr::Parse(Icmpv4Packet(b), r), WireError::kOk);
      EXPECT_EQ(r.data.size(), len - 8);
    }
    // The checksum is what catches a lost tail. Dropping one byte b
    // changes the sum by b or b << 8, which is nonzero modulo 0xffff when
    // b is nonzero, as the last byte of every literal here is.
    ASSERT_NE(bytes->back(), 0);
    std::vector<uint8_t> b(bytes->begin(), bytes->end() - 1);
    EXPECT_FALSE(Icmpv4Packet(b).ChecksumValid());
  }
}

TEST(Icmpv4Test, ChecksumValidAndInvalid) {
  for (const auto* bytes : kAllValid) {
    std::vector<uint8_t> b = *bytes;
    EXPECT_TRUE(Icmpv4Packet(b).ChecksumValid());
    b.back() ^= 0x01;  // corrupt the data, not the header
    EXPECT_FALSE(Icmpv4Packet(b).ChecksumValid());
    // Parse does not verify the checksum: the caller decides.
    Icmpv4Repr r;
    EXPECT_EQ(Icmpv4Repr::Parse(Icmpv4Packet(b), r), WireError::kOk);
    MutableIcmpv4Packet(b).FillChecksum();
    EXPECT_TRUE(Icmpv4Packet(b).ChecksumValid());
    b.back() ^= 0x01;
    MutableIcmpv4Packet(b).FillChecksum();
    EXPECT_EQ(b, *bytes);
  }
}

}  // namespace
}  // namespace netstack::wire
