// The unmatched-datagram hook (UdpLayer::SetUnmatchedHandler) and
// SendFrom: what a network backend builds its UDP flows on.
#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "netstack/udp/udp_test_fixture.h"
#include "netstack/wire/checksum.h"

namespace netstack::udp {
namespace {

using testing::Bytes;
using testing::ParseSent;
using transport::Family;
using transport::SocketAddress;

struct Recorder : UnmatchedDatagramHandler {
  struct Call {
    SocketAddress src, dst;
    buffer::PayloadView payload;
  };
  bool take = true;
  std::vector<Call> calls;
  bool OnUnmatchedDatagram(const SocketAddress& src, const SocketAddress& dst,
                           const buffer::PayloadView& payload,
                           Instant) override {
    calls.push_back({src, dst, payload});
    return take;
  }
};

class UdpUnmatchedTest : public testing::UdpFixture {
 protected:
  void SetUp() override {
    LearnPeer();
    udp_->SetUnmatchedHandler(&rec_);
  }
  void TearDown() override { udp_->SetUnmatchedHandler(nullptr); }
  Recorder rec_;
};

TEST_F(UdpUnmatchedTest, TakenDatagramsGetNoIcmpAndKeepTheirPayloadView) {
  InjectUdp(Peer4(1111), Our4(2222), Bytes("hello"));
  ASSERT_EQ(rec_.calls.size(), 1u);
  EXPECT_EQ(rec_.calls[0].src, Peer4(1111));
  EXPECT_EQ(rec_.calls[0].dst, Our4(2222));
  // The payload only, cut at the UDP length, shared with the frame.
  EXPECT_EQ(std::vector<uint8_t>(rec_.calls[0].payload.bytes().begin(),
                                 rec_.calls[0].payload.bytes().end()),
            Bytes("hello"));
  EXPECT_TRUE(TakeSent().empty());  // no port unreachable
  EXPECT_EQ(udp_->counters().unmatched_handled, 1u);
  EXPECT_EQ(udp_->counters().no_port, 0u);
  EXPECT_EQ(StackDrops(stack::DropReason::kUdpNoListener), 0u);
}

TEST_F(UdpUnmatchedTest, DeclinedDatagramsGetPortUnreachableAsBefore) {
  rec_.take = false;
  InjectUdp(Peer6(1111), Our6(2222), Bytes("x"));
  ASSERT_EQ(rec_.calls.size(), 1u);
  auto sent = TakeSent();
  ASSERT_EQ(sent.size(), 1u);
  const testing::SentFrame s = ParseSent(sent[0]);
  EXPECT_EQ(s.protocol, 58);
  EXPECT_EQ(s.l4[0], 1);
  EXPECT_EQ(s.l4[1], 4);
  EXPECT_EQ(udp_->counters().no_port, 1u);
}

TEST_F(UdpUnmatchedTest, SocketsComeFirstAndBroadcastsNeverReachTheHook) {
  auto sock = udp_->Open(Family::kIpv4);
  ASSERT_TRUE(sock->Bind(Any4(53)).ok());
  InjectUdp(Peer4(1111), Our4(53), Bytes("query"));
  EXPECT_TRUE(rec_.calls.empty());
  EXPECT_TRUE(sock->NextDatagramSize().has_value());
  const wire::MacAddress bcast = wire::MacAddress::Broadcast();
  InjectUdp(Peer4(1111), {*wire::Ipv4Address::Parse("255.255.255.255"), 9},
            Bytes("everyone"), &bcast);
  EXPECT_TRUE(rec_.calls.empty());
  sock->Close();
}

TEST_F(UdpUnmatchedTest, SendFromUsesAForeignSourceWithAValidChecksum) {
  const SocketAddress foreign{*wire::Ipv4Address::Parse("198.51.100.7"), 4444};
  buffer::ChunkRef c = chunks_.Allocate();
  std::memcpy(c->unshared_tail(0).data(), "reply", 5);
  const buffer::PayloadView v(c, 0, 5);
  ASSERT_TRUE(udp_->SendFrom(foreign, Peer4(1111),
                             std::span<const buffer::PayloadView>(&v, 1), now_)
                  .ok());
  auto sent = TakeSent();
  ASSERT_EQ(sent.size(), 1u);
  const testing::SentFrame s = ParseSent(sent[0]);
  EXPECT_EQ(s.ip4.src, foreign.ip.v4());
  EXPECT_EQ(s.ip4.dst, peer_.ip4);
  wire::UdpHeader h(s.l4);
  EXPECT_EQ(h.SrcPort(), 4444);
  EXPECT_EQ(h.DstPort(), 1111);
  EXPECT_TRUE(h.ChecksumValid(
      wire::Ipv4PseudoHeaderSum(foreign.ip.v4(), peer_.ip4, 17, s.l4.size()),
      wire::UdpZeroChecksum::kReject));
  // Families must agree, and the size is checked.
  EXPECT_FALSE(udp_->SendFrom(Our6(1), Peer4(1),
                              std::span<const buffer::PayloadView>(&v, 1), now_)
                   .ok());
}


// A USO super-frame (issue #34): one UDP header over `payload`, which is
// datagrams of `segment` bytes, as a TAP with USO hands it over.
class UdpUsoTest : public UdpUnmatchedTest {
 protected:
  void InjectUso(const SocketAddress& src, const SocketAddress& dst,
                 const std::vector<uint8_t>& payload, uint16_t segment) {
    const auto packets = stack::testing::Ipv4Packets(
        src.ip.v4(), dst.ip.v4(), 17, 7,
        testing::UdpDatagram(src, dst, payload), 65535);
    ASSERT_EQ(packets.size(), 1u);
    const auto frame = stack::testing::WithEthernet(
        peer_.mac, our_mac_, testing::kEtherIpv4, packets[0]);
    buffer::ChunkRef chunk = chunks_.Allocate();
    std::memcpy(chunk->mutable_data().data(), frame.data(), frame.size());
    link::InboundFrame in;
    in.frame = buffer::PayloadView(std::move(chunk), 0,
                                   static_cast<uint32_t>(frame.size()));
    in.checksum_partial = true;
    in.udp_gso_size = segment;
    link_->Deliver(std::span<link::InboundFrame>(&in, 1), now_);
  }
};

std::vector<uint8_t> Numbered(size_t n) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 3 + 1);
  return v;
}

TEST_F(UdpUsoTest, SuperDatagramToOurSocketIsQueuedAsItsDatagrams) {
  std::unique_ptr<UdpSocket> sock = udp_->Open(Family::kIpv4);
  ASSERT_TRUE(sock->Bind(Our4(5000)).ok());
  const std::vector<uint8_t> data = Numbered(3 * 100 + 40);
  InjectUso(Peer4(1234), Our4(5000), data, 100);
  for (size_t i = 0; i < 4; ++i) {
    auto got = sock->RecvDatagram();
    ASSERT_TRUE(got.ok()) << i;
    const size_t n = i < 3 ? 100 : 40;
    ASSERT_EQ(got->payload.size(), n) << i;
    EXPECT_EQ(0, std::memcmp(got->payload.bytes().data(), &data[i * 100], n));
    EXPECT_EQ(got->from, Peer4(1234));
  }
  EXPECT_FALSE(sock->RecvDatagram().ok());
  EXPECT_TRUE(rec_.calls.empty());
}

TEST_F(UdpUsoTest, SuperDatagramNobodyTakesReachesTheHandlerInOrder) {
  const std::vector<uint8_t> data = Numbered(2 * 300 + 1);
  InjectUso(Peer4(1234), Our4(6000), data, 300);
  // A handler that does not relay super-datagrams whole gets each one.
  ASSERT_EQ(rec_.calls.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    const size_t n = i < 2 ? 300 : 1;
    ASSERT_EQ(rec_.calls[i].payload.size(), n) << i;
    EXPECT_EQ(0, std::memcmp(rec_.calls[i].payload.bytes().data(),
                             &data[i * 300], n));
  }
  EXPECT_TRUE(TakeSent().empty());
}
}  // namespace
}  // namespace netstack::udp
