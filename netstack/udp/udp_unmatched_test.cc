// The unmatched-datagram hook (UdpLayer::SetUnmatchedHandler) and
// SendFrom: what a network backend builds its UDP flows on.
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

}  // namespace
}  // namespace netstack::udp
