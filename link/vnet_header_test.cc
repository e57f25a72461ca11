#include "link/vnet_header.h"

#include <array>
#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "link/fd_util.h"
#include "link/vnet_header_test_util.h"
#include "netstack/buffer/chunk.h"
#include "netstack/buffer/packet.h"

namespace netstack::link {
namespace {

using testing::MakeTcpGsoPacket;
using testing::PatternBytes;
using testing::TcpGsoSpec;
using Header = std::array<uint8_t, kVnetHdrLen>;

TcpGsoSpec Spec(bool v6) {
  TcpGsoSpec s;
  s.src_mac = *wire::MacAddress::Parse("02:00:00:00:00:01");
  s.dst_mac = *wire::MacAddress::Parse("02:00:00:00:00:02");
  s.v6 = v6;
  s.src4 = *wire::Ipv4Address::Parse("10.0.0.1");
  s.dst4 = *wire::Ipv4Address::Parse("10.0.0.2");
  s.src6 = *wire::Ipv6Address::Parse("fd00::1");
  s.dst6 = *wire::Ipv6Address::Parse("fd00::2");
  return s;
}

class VnetHeaderTest : public ::testing::Test {
 protected:
  buffer::PacketPtr Make(const TcpGsoSpec& s, size_t payload = 60000) {
    buffer::PacketPtr p =
        MakeTcpGsoPacket(packets_, chunks_, s, PatternBytes(payload, 1));
    EXPECT_NE(p, nullptr);
    return p;
  }
  // Overwrites header byte `at` (of headers()) with `v`.
  static void Poke(buffer::PacketBuffer& p, size_t at, uint8_t v) {
    auto h = p.headers().data();
    const_cast<uint8_t*>(h.data())[at] = v;
  }
  static VnetTxKind Fill(const buffer::PacketBuffer& p, Header& h) {
    return FillVnetHeader(p, std::span<uint8_t, kVnetHdrLen>(h));
  }

  buffer::ChunkPool chunks_{16};
  buffer::PacketPool packets_{16};
};

// Literal headers, field by field (little-endian 16-bit fields).
TEST_F(VnetHeaderTest, TcpV4) {
  buffer::PacketPtr p = Make(Spec(false));
  Header h;
  h.fill(0xee);
  ASSERT_EQ(Fill(*p, h), VnetTxKind::kGso);
  // hdr_len 14 + 20 + 32 = 66, gso_size 1448, csum_start 34, offset 16.
  const Header want = {0x01, 0x01, 66, 0, 0xa8, 0x05, 34, 0, 16, 0};
  EXPECT_EQ(h, want);
}

TEST_F(VnetHeaderTest, TcpV6) {
  TcpGsoSpec s = Spec(true);
  s.mss = 1428;
  buffer::PacketPtr p = Make(s);
  Header h;
  ASSERT_EQ(Fill(*p, h), VnetTxKind::kGso);
  // hdr_len 14 + 40 + 32 = 86, gso_size 1428 = 0x594, csum_start 54.
  const Header want = {0x01, 0x04, 86, 0, 0x94, 0x05, 54, 0, 16, 0};
  EXPECT_EQ(h, want);
}

TEST_F(VnetHeaderTest, VlanTaggedMovesTheOffsetsByFour) {
  for (bool v6 : {false, true}) {
    TcpGsoSpec s = Spec(v6);
    s.vlan_tci = 7;
    buffer::PacketPtr p = Make(s);
    Header h;
    ASSERT_EQ(Fill(*p, h), VnetTxKind::kGso) << v6;
    const uint8_t l4 = v6 ? 58 : 38;
    const Header want = {0x01, static_cast<uint8_t>(v6 ? 4 : 1),
                         static_cast<uint8_t>(l4 + 32), 0, 0xa8, 0x05, l4, 0,
                         16, 0};
    EXPECT_EQ(h, want) << v6;
  }
}

TEST_F(VnetHeaderTest, CwrAsksForEcnHandling) {
  TcpGsoSpec s = Spec(false);
  s.flags = 0x80 | 0x10;  // CWR | ACK
  buffer::PacketPtr p = Make(s);
  Header h;
  ASSERT_EQ(Fill(*p, h), VnetTxKind::kGso);
  EXPECT_EQ(h[1], 0x81);  // TCPV4 | ECN
  EXPECT_TRUE(ParseVnetHeader(h.data()).gso);
}

TEST_F(VnetHeaderTest, NonGsoPacketGetsAZeroHeader) {
  buffer::PacketPtr p = Make(Spec(false), 100);
  p->gso() = buffer::GsoInfo{};
  Header h;
  h.fill(0xee);
  EXPECT_EQ(Fill(*p, h), VnetTxKind::kPlain);
  EXPECT_EQ(h, Header{});
}

TEST_F(VnetHeaderTest, ContractBreachesAreMalformed) {
  struct Case {
    const char* what;
    bool v6;
    size_t at;
    uint8_t value;
  };
  // Offsets in an untagged frame: IP at 14, TCP at 34 (v4) / 54 (v6).
  const Case cases[] = {
      {"ARP EtherType", false, 13, 0x06},  // 0x0806
      {"IPv4 version 5", false, 14, 0x55},
      {"IPv4 IHL 4", false, 14, 0x44},
      {"IPv4 UDP", false, 23, 17},
      {"IPv4 short total length", false, 16, 0x01},
      {"TCP data offset 16", false, 34 + 12, 0x40},
      {"TCP data offset past headers", false, 34 + 12, 0xf0},
      {"IPv6 version 4", true, 14, 0x40},
      {"IPv6 UDP", true, 20, 17},
      {"IPv6 payload length", true, 18, 0x01},
  };
  for (const Case& c : cases) {
    buffer::PacketPtr p = Make(Spec(c.v6));
    Poke(*p, c.at, c.value);
    Header h;
    h.fill(0xee);
    EXPECT_EQ(Fill(*p, h), VnetTxKind::kMalformed) << c.what;
    EXPECT_EQ(h, Header{}) << c.what;
  }
  // GSO type and EtherType disagree.
  buffer::PacketPtr p = Make(Spec(false));
  p->gso().type = buffer::GsoType::kTcpV6;
  Header h;
  EXPECT_EQ(Fill(*p, h), VnetTxKind::kMalformed);
  p->gso() = buffer::GsoInfo{buffer::GsoType::kTcpV4, 0};
  EXPECT_EQ(Fill(*p, h), VnetTxKind::kMalformed);  // GSO size 0
}

TEST_F(VnetHeaderTest, RxFlags) {
  const uint8_t none[kVnetHdrLen] = {};
  VnetRxInfo i = ParseVnetHeader(none);
  EXPECT_FALSE(i.checksum_partial || i.checksum_verified || i.gso);
  const uint8_t tso6[kVnetHdrLen] = {1, 4};
  i = ParseVnetHeader(tso6);
  EXPECT_TRUE(i.checksum_partial);
  EXPECT_TRUE(i.gso);
}

// CheckTxFrame: GSO packets pass only with host GSO, within its size.
TEST_F(VnetHeaderTest, CheckTxFrame) {
  buffer::PacketPtr big = Make(Spec(false), 60000);  // IP: 60052 bytes
  Header h;
  EXPECT_EQ(CheckTxFrame(*big, 1500, 0, h.data()), TxVerdict::kBadGso);
  EXPECT_EQ(CheckTxFrame(*big, 1500, 65535, nullptr), TxVerdict::kBadGso);
  EXPECT_EQ(CheckTxFrame(*big, 1500, 65535, h.data()), TxVerdict::kOk);
  EXPECT_EQ(h[1], 1);
  EXPECT_EQ(CheckTxFrame(*big, 1500, 60052, h.data()), TxVerdict::kOk);
  EXPECT_EQ(CheckTxFrame(*big, 1500, 60051, h.data()), TxVerdict::kOversize);
  Poke(*big, 23, 17);  // UDP: not what GsoType says
  EXPECT_EQ(CheckTxFrame(*big, 1500, 65535, h.data()), TxVerdict::kBadGso);

  // Without GSO the MTU rule holds even with host GSO on, and the header
  // is zeroed.
  buffer::PacketPtr plain = Make(Spec(false), 1500 - 52);
  plain->gso() = buffer::GsoInfo{};
  h.fill(0xee);
  EXPECT_EQ(CheckTxFrame(*plain, 1500, 65535, h.data()), TxVerdict::kOk);
  EXPECT_EQ(h, Header{});
  EXPECT_EQ(CheckTxFrame(*plain, 1499, 65535, h.data()), TxVerdict::kOversize);
  EXPECT_EQ(CheckTxFrame(*plain, 1500, 0, nullptr), TxVerdict::kOk);
}

}  // namespace
}  // namespace netstack::link
