#include "netstack/backend/dhcp4_message.h"

#include <cstdint>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace netstack::backend {
namespace {

wire::Ipv4Address A(uint32_t v) { return wire::Ipv4Address::FromU32(v); }

// A DISCOVER as busybox udhcpc sends it, by hand: fixed part, cookie,
// options 53=1, 61 (client id), 50=10.0.2.100, 55 (parameter list), end.
std::vector<uint8_t> Discover() {
  std::vector<uint8_t> b(240, 0);
  b[0] = 1;  // BOOTREQUEST
  b[1] = 1;
  b[2] = 6;
  b[4] = 0xde; b[5] = 0xad; b[6] = 0xbe; b[7] = 0xef;  // xid
  b[10] = 0x80;                                       // broadcast flag
  const uint8_t mac[6] = {0x02, 0x11, 0x22, 0x33, 0x44, 0x55};
  std::copy(mac, mac + 6, b.begin() + 28);
  b[236] = 99; b[237] = 130; b[238] = 83; b[239] = 99;
  const uint8_t opts[] = {53, 1, 1,  61, 7, 1, 2, 0x11, 0x22, 0x33, 0x44, 0x55,
                          50, 4, 10, 0,  2, 100, 55, 3, 1, 3, 6, 0, 0, 255};
  b.insert(b.end(), std::begin(opts), std::end(opts));
  return b;
}

TEST(Dhcp4MessageTest, ParsesLiteralDiscover) {
  Dhcp4Message m;
  ASSERT_EQ(Dhcp4Message::Parse(Discover(), m), Dhcp4ParseError::kOk);
  EXPECT_EQ(m.op, 1);
  EXPECT_EQ(m.xid, 0xdeadbeefu);
  EXPECT_TRUE(m.broadcast());
  EXPECT_EQ(m.chaddr.ToString(), "02:11:22:33:44:55");
  EXPECT_EQ(m.type, Dhcp4MessageType::kDiscover);
  ASSERT_TRUE(m.requested_ip);
  EXPECT_EQ(*m.requested_ip, A(0x0a000264));
  EXPECT_FALSE(m.server_id);
}

TEST(Dhcp4MessageTest, EmitThenParseRoundTrips) {
  Dhcp4Message r;
  r.op = 2;
  r.xid = 7;
  r.flags = 0x8000;
  r.yiaddr = A(0x0a000264);
  r.chaddr.bytes = {2, 0, 0, 0, 0, 1};
  r.type = Dhcp4MessageType::kAck;
  r.server_id = A(0x0a000202);
  r.subnet_mask = A(0xffffff00);
  r.router = A(0x0a000202);
  r.dns = A(0x0a000203);
  r.mtu = 65520;
  r.lease_time = 86400;
  r.renewal_time = 43200;
  r.rebinding_time = 75600;
  std::vector<uint8_t> out(r.BufferLen());
  ASSERT_EQ(r.Emit(out), out.size());
  EXPECT_EQ(out.size(), Dhcp4Message::kMinEmitLen);  // padded
  // Construct: the bytes a client reads.
  EXPECT_EQ(out[0], 2);
  EXPECT_EQ(out[240], 53);
  EXPECT_EQ(out[241], 1);
  EXPECT_EQ(out[242], 5);
  EXPECT_EQ(out[243], 54);  // server id next
  EXPECT_EQ(out[16], 10);   // yiaddr
  EXPECT_EQ(out[19], 100);
  Dhcp4Message back;
  ASSERT_EQ(Dhcp4Message::Parse(out, back), Dhcp4ParseError::kOk);
  EXPECT_EQ(back.type, Dhcp4MessageType::kAck);
  EXPECT_EQ(back.xid, 7u);
  EXPECT_EQ(back.yiaddr, r.yiaddr);
  EXPECT_EQ(back.server_id, r.server_id);
  EXPECT_EQ(back.subnet_mask, r.subnet_mask);
  EXPECT_EQ(back.router, r.router);
  EXPECT_EQ(back.dns, r.dns);
  EXPECT_EQ(back.mtu, r.mtu);
  EXPECT_EQ(back.lease_time, r.lease_time);
  EXPECT_EQ(back.renewal_time, r.renewal_time);
  EXPECT_EQ(back.rebinding_time, r.rebinding_time);
}

struct Hostile {
  const char* name;
  void (*mutate)(std::vector<uint8_t>&);
  Dhcp4ParseError want;
};

TEST(Dhcp4MessageTest, HostileMessagesEachHaveTheirReason) {
  const Hostile cases[] = {
      {"empty", [](std::vector<uint8_t>& b) { b.clear(); },
       Dhcp4ParseError::kTruncated},
      {"no cookie", [](std::vector<uint8_t>& b) { b.resize(239); },
       Dhcp4ParseError::kTruncated},
      {"htype", [](std::vector<uint8_t>& b) { b[1] = 6; },
       Dhcp4ParseError::kBadHtype},
      {"hlen", [](std::vector<uint8_t>& b) { b[2] = 16; },
       Dhcp4ParseError::kBadHlen},
      {"cookie", [](std::vector<uint8_t>& b) { b[239] = 98; },
       Dhcp4ParseError::kBadMagicCookie},
      {"length past end",
       [](std::vector<uint8_t>& b) {
         b.resize(240);
         b.insert(b.end(), {53, 1, 1, 12, 200, 'x'});
       },
       Dhcp4ParseError::kOptionOverrun},
      {"code without length",
       [](std::vector<uint8_t>& b) {
         b.resize(240);
         b.insert(b.end(), {53, 1, 1, 12});
       },
       Dhcp4ParseError::kOptionOverrun},
      {"type length 2",
       [](std::vector<uint8_t>& b) {
         b.resize(240);
         b.insert(b.end(), {53, 2, 1, 1, 255});
       },
       Dhcp4ParseError::kBadOptionLength},
      {"server id length 3",
       [](std::vector<uint8_t>& b) {
         b.resize(240);
         b.insert(b.end(), {53, 1, 3, 54, 3, 10, 0, 2, 255});
       },
       Dhcp4ParseError::kBadOptionLength},
      {"dns length 5",
       [](std::vector<uint8_t>& b) {
         b.resize(240);
         b.insert(b.end(), {53, 1, 3, 6, 5, 10, 0, 2, 3, 4, 255});
       },
       Dhcp4ParseError::kBadOptionLength},
      {"no type",
       [](std::vector<uint8_t>& b) {
         b.resize(240);
         b.insert(b.end(), {50, 4, 10, 0, 2, 100, 255});
       },
       Dhcp4ParseError::kMissingMessageType},
      {"type after end",
       [](std::vector<uint8_t>& b) {
         b.resize(240);
         b.insert(b.end(), {255, 53, 1, 1});
       },
       Dhcp4ParseError::kMissingMessageType},
      {"type 0",
       [](std::vector<uint8_t>& b) {
         b.resize(240);
         b.insert(b.end(), {53, 1, 0, 255});
       },
       Dhcp4ParseError::kUnknownMessageType},
      {"type 9",
       [](std::vector<uint8_t>& b) {
         b.resize(240);
         b.insert(b.end(), {53, 1, 9, 255});
       },
       Dhcp4ParseError::kUnknownMessageType},
  };
  for (const Hostile& c : cases) {
    std::vector<uint8_t> b = Discover();
    c.mutate(b);
    Dhcp4Message m;
    EXPECT_EQ(Dhcp4Message::Parse(b, m), c.want) << c.name;
  }
}

TEST(Dhcp4MessageTest, RandomBytesNeverReadOutOfBounds) {
  // Under ASan an out-of-bounds read fails this test.
  std::mt19937 rng(1);
  int ok = 0;
  for (int i = 0; i < 20000; ++i) {
    std::vector<uint8_t> b = Discover();
    b.resize(243 + rng() % 40);  // keeps 53,1,1 in front
    for (size_t j = 243; j < b.size(); ++j) b[j] = static_cast<uint8_t>(rng());
    if (rng() % 2) b.resize(rng() % b.size());
    Dhcp4Message m;
    if (Dhcp4Message::Parse(std::span<const uint8_t>(b.data(), b.size()), m) ==
        Dhcp4ParseError::kOk) {
      ++ok;
    }
  }
  EXPECT_GT(ok, 0);
}

}  // namespace
}  // namespace netstack::backend
