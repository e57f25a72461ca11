#include "link/vnet_header.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "link/fd_util.h"
#include "link/frame_util.h"
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

// USO toward the guest (issue #34): a UDP super-datagram asks for
// UDP_L4, csum_offset 6 and hdr_len through the UDP header; a UDP Length
// that does not cover the payload, or TCP's type over it, is malformed.
TEST_F(VnetHeaderTest, UdpSuperDatagramAsksForUdpL4) {
  for (bool v6 : {false, true}) {
    const size_t ip = v6 ? 40 : 20;
    const uint16_t payload = 7205;
    buffer::PacketPtr p = packets_.Allocate();
    ASSERT_TRUE(p->AppendPayload(
        buffer::PayloadView(chunks_.Allocate(), 0, payload)));
    std::span<uint8_t> h = *p->headers().Prepend(14 + ip + 8);
    std::fill(h.begin(), h.end(), uint8_t{0});
    auto be16 = [&](size_t at, size_t v) {
      h[at] = static_cast<uint8_t>(v >> 8);
      h[at + 1] = static_cast<uint8_t>(v);
    };
    be16(12, v6 ? 0x86dd : 0x0800);
    if (v6) {
      h[14] = 0x60;
      be16(18, 8 + payload);
      h[20] = 17;
    } else {
      h[14] = 0x45;
      be16(16, ip + 8 + payload);
      h[23] = 17;
    }
    be16(14 + ip + 4, 8 + payload);
    p->gso() = buffer::GsoInfo{
        v6 ? buffer::GsoType::kUdpV6 : buffer::GsoType::kUdpV4, 1200};
    Header vh;
    ASSERT_EQ(Fill(*p, vh), VnetTxKind::kGso) << v6;
    const uint8_t l4 = static_cast<uint8_t>(14 + ip);
    // gso_size 1200 = 0x4b0.
    const Header want = {0x01, 0x05, static_cast<uint8_t>(l4 + 8), 0, 0xb0,
                         0x04, l4, 0, 6, 0};
    EXPECT_EQ(vh, want) << v6;
    be16(14 + ip + 4, 8 + payload - 1);
    EXPECT_EQ(Fill(*p, vh), VnetTxKind::kMalformed) << v6;
    be16(14 + ip + 4, 8 + payload);
    p->gso().type = v6 ? buffer::GsoType::kTcpV6 : buffer::GsoType::kTcpV4;
    EXPECT_EQ(Fill(*p, vh), VnetTxKind::kMalformed) << v6;
  }
}

TEST_F(VnetHeaderTest, NonGsoPacketGetsAZeroHeader) {
  buffer::PacketPtr p = Make(Spec(false), 100);
  p->gso() = buffer::GsoInfo{};
  Header h;
  h.fill(0xee);
  EXPECT_EQ(Fill(*p, h), VnetTxKind::kPlain);
  EXPECT_EQ(h, Header{});
}

// A single TCP segment whose checksum is left to the link (issue #34):
// NEEDS_CSUM with GSO_NONE, csum_start at its TCP header and offset 16.
// Without the mark it gets the zero header, as before.
TEST_F(VnetHeaderTest, PartialChecksumWithoutGsoAsksForNeedsCsum) {
  for (const bool v6 : {false, true}) {
    buffer::PacketPtr p = Make(Spec(v6), 100);
    p->gso() = buffer::GsoInfo{};
    p->partial_checksum() = buffer::PartialChecksum{32, 16};
    Header h;
    h.fill(0xee);
    EXPECT_EQ(Fill(*p, h), VnetTxKind::kPartialChecksum) << v6;
    // csum_start 14 + 20 (IPv4) or 14 + 40 (IPv6); hdr_len and gso_size 0.
    const uint8_t start = v6 ? 54 : 34;
    const Header want = {0x01, 0x00, 0, 0, 0, 0, start, 0, 16, 0};
    EXPECT_EQ(h, want) << v6;
  }
  // A mark that points outside headers() is not sent.
  buffer::PacketPtr p = Make(Spec(false), 100);
  p->gso() = buffer::GsoInfo{};
  p->partial_checksum() = buffer::PartialChecksum{32, 31};
  Header h;
  EXPECT_EQ(Fill(*p, h), VnetTxKind::kMalformed);
  EXPECT_EQ(h, Header{});
  p->partial_checksum() = buffer::PartialChecksum{60, 16};  // > 66 - 14
  EXPECT_EQ(Fill(*p, h), VnetTxKind::kMalformed);
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
  EXPECT_EQ(i.udp_gso_size, 0);  // gso_size only counts for UDP_L4
}

// USO (issue #34): a UDP_L4 header gives its segment size (little-endian).
TEST_F(VnetHeaderTest, RxUdpL4GivesTheSegmentSize) {
  const uint8_t uso[kVnetHdrLen] = {1, 5, 42, 0, 0x78, 0x05, 34, 0, 6, 0};
  const VnetRxInfo i = ParseVnetHeader(uso);
  EXPECT_TRUE(i.checksum_partial);
  EXPECT_TRUE(i.gso);
  EXPECT_EQ(i.udp_gso_size, 1400);
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

  // A partial checksum needs a vnet header, which then says NEEDS_CSUM.
  plain->partial_checksum() = buffer::PartialChecksum{32, 16};
  h.fill(0xee);
  EXPECT_EQ(CheckTxFrame(*plain, 1500, 0, h.data()), TxVerdict::kOk);
  EXPECT_EQ(h[0], vnet::kFlagNeedsCsum);
  EXPECT_EQ(h[1], vnet::kGsoNone);
  EXPECT_EQ(h[6], 34);
  EXPECT_EQ(CheckTxFrame(*plain, 1500, 0, nullptr), TxVerdict::kBadGso);
}

// ValidateVnetRx: a guest's header and frame, each lie refused with its
// reason, and the honest forms accepted.
class ValidateVnetRxTest : public VnetHeaderTest {
 protected:
  // A TSO super-frame (60000 payload bytes, MSS 1448) as a guest writes
  // it, with the header a Linux guest puts in front.
  void SetUpFrame(bool v6) {
    TcpGsoSpec spec = Spec(v6);
    spec.mss = v6 ? 1428 : 1448;  // 1500 - IP - TCP with timestamps
    buffer::PacketPtr p = Make(spec);
    frame_ = PacketBytes(*p);
    ASSERT_EQ(Fill(*p, hdr_), VnetTxKind::kGso);
  }
  VnetRxVerdict Check(uint32_t mtu = 1500) {
    return ValidateVnetRx(hdr_, frame_, mtu);
  }
  void SetLe16(size_t at, uint16_t v) { vnet::StoreLe16(&hdr_[at], v); }

  std::vector<uint8_t> frame_;
  Header hdr_{};
};

TEST_F(ValidateVnetRxTest, HonestTsoFramesPass) {
  for (bool v6 : {false, true}) {
    SetUpFrame(v6);
    EXPECT_EQ(Check(), VnetRxVerdict::kOk) << v6;
    hdr_[1] |= vnet::kGsoEcn;
    EXPECT_EQ(Check(), VnetRxVerdict::kOk) << v6;
    // Linux guests put their linear length in hdr_len: any value up to the
    // frame's end is a hint, not a lie.
    SetLe16(vnet::kHdrLenOffset, static_cast<uint16_t>(frame_.size()));
    EXPECT_EQ(Check(), VnetRxVerdict::kOk) << v6;
  }
}

TEST_F(ValidateVnetRxTest, GsoLiesAreRefusedWithTheirReason) {
  SetUpFrame(false);  // IPv4: IP at 14, TCP at 34 (32-byte header)
  const Header good = hdr_;
  const std::vector<uint8_t> good_frame = frame_;
  auto expect = [&](VnetRxVerdict want, const char* what) {
    EXPECT_EQ(Check(), want) << what << ": got " << VnetRxVerdictName(Check());
    hdr_ = good;
    frame_ = good_frame;
  };
  hdr_[1] = vnet::kGsoTcpV6;
  expect(VnetRxVerdict::kGsoTypeMismatch, "TCPV6 on an IPv4 frame");
  hdr_[1] = 3;  // VIRTIO_NET_HDR_GSO_UDP (UFO), never offered
  expect(VnetRxVerdict::kUnsupportedGso, "UFO");
  hdr_[1] = 5;  // VIRTIO_NET_HDR_GSO_UDP_L4, never offered
  expect(VnetRxVerdict::kUnsupportedGso, "USO");
  hdr_[0] = 0;
  expect(VnetRxVerdict::kGsoWithoutCsum, "TSO without NEEDS_CSUM");
  hdr_[0] = 0x84;
  expect(VnetRxVerdict::kBadFlags, "unknown flag bits");
  SetLe16(vnet::kGsoSizeOffset, 0);
  expect(VnetRxVerdict::kGsoBadSize, "gso_size 0");
  SetLe16(vnet::kGsoSizeOffset, 1500 - 20 - 32 + 1);
  expect(VnetRxVerdict::kGsoBadSize, "segment one byte past the MTU");
  SetLe16(vnet::kGsoSizeOffset, 1500 - 20 - 32);
  expect(VnetRxVerdict::kOk, "segment exactly the MTU");
  SetLe16(vnet::kHdrLenOffset, static_cast<uint16_t>(frame_.size() + 1));
  expect(VnetRxVerdict::kGsoBadHdrLen, "hdr_len past the frame");
  SetLe16(vnet::kCsumStartOffset, 0xfff0);
  expect(VnetRxVerdict::kBadCsum, "csum_start past the frame");
  SetLe16(vnet::kCsumStartOffset, 4);
  expect(VnetRxVerdict::kBadCsum, "csum_start inside Ethernet");
  SetLe16(vnet::kCsumOffsetOffset, 6);
  expect(VnetRxVerdict::kGsoTypeMismatch, "csum_offset of UDP on TCP");
  SetLe16(vnet::kCsumStartOffset, 14);
  expect(VnetRxVerdict::kGsoTypeMismatch, "csum_start at the IP header");
  frame_[23] = 17;
  expect(VnetRxVerdict::kGsoTypeMismatch, "IPv4 protocol UDP");
  frame_[14] = 0x4f;  // IHL 60: TCP would start past the headers
  expect(VnetRxVerdict::kGsoTypeMismatch, "IHL 15");
  frame_[34 + 12] = 0x40;
  expect(VnetRxVerdict::kGsoTypeMismatch, "TCP data offset 16");
  frame_[16] ^= 0x01;
  expect(VnetRxVerdict::kGsoBadIpLength, "IPv4 total length");
  frame_.resize(frame_.size() - 1);
  expect(VnetRxVerdict::kGsoBadIpLength, "frame one byte short");
  frame_.resize(52);  // the checksum field fits, the TCP options do not
  frame_[17] = 52 - 14;
  frame_[16] = 0;
  expect(VnetRxVerdict::kGsoTypeMismatch, "frame cut inside TCP");
  frame_.resize(10);
  expect(VnetRxVerdict::kShortFrame, "frame shorter than Ethernet");
  EXPECT_EQ(ValidateVnetRx(std::span<const uint8_t>(hdr_).first(9), frame_,
                           1500),
            VnetRxVerdict::kShortHeader);

  SetUpFrame(true);  // IPv6: TCP at 54
  frame_[20] = 0;  // Hop-by-Hop extension header instead of TCP
  EXPECT_EQ(Check(), VnetRxVerdict::kGsoTypeMismatch);
}

TEST_F(ValidateVnetRxTest, PlainFrames) {
  std::vector<uint8_t> f(14 + 1500, 0);
  Header h{};
  EXPECT_EQ(ValidateVnetRx(h, f, 1500), VnetRxVerdict::kOk);
  f.resize(14 + 4 + 1500);  // one VLAN tag's worth of slack
  EXPECT_EQ(ValidateVnetRx(h, f, 1500), VnetRxVerdict::kOk);
  f.resize(14 + 4 + 1501);
  EXPECT_EQ(ValidateVnetRx(h, f, 1500), VnetRxVerdict::kFrameTooLong);
  f.resize(60);
  // A partial checksum whose 2 bytes end exactly at the frame's end, then
  // one byte beyond it.
  h[0] = vnet::kFlagNeedsCsum;
  vnet::StoreLe16(&h[vnet::kCsumStartOffset], 34);
  vnet::StoreLe16(&h[vnet::kCsumOffsetOffset], 24);
  EXPECT_EQ(ValidateVnetRx(h, f, 1500), VnetRxVerdict::kOk);
  vnet::StoreLe16(&h[vnet::kCsumOffsetOffset], 25);
  EXPECT_EQ(ValidateVnetRx(h, f, 1500), VnetRxVerdict::kBadCsum);
  vnet::StoreLe16(&h[vnet::kCsumOffsetOffset], 0xffff);
  vnet::StoreLe16(&h[vnet::kCsumStartOffset], 0xffff);
  EXPECT_EQ(ValidateVnetRx(h, f, 1500), VnetRxVerdict::kBadCsum);
  // Every verdict has its own counter name.
  for (size_t i = 0; i < kVnetRxVerdictCount; ++i) {
    for (size_t j = 0; j < i; ++j) {
      EXPECT_STRNE(VnetRxVerdictName(static_cast<VnetRxVerdict>(i)),
                   VnetRxVerdictName(static_cast<VnetRxVerdict>(j)));
    }
  }
}

}  // namespace
}  // namespace netstack::link
