// Once warmed up, delivering datagrams into a bound socket, reading them
// and sending does not touch the heap: the frame's chunk is shared with
// the receive queue, whose ring has reached its working size, and the
// send path takes chunks and packets from their pools. (Its own binary:
// alloc_counter replaces the global operator new.)
#include <cstring>

#include "gtest/gtest.h"
#include "netstack/ip/alloc_counter.h"
#include "netstack/udp/udp_test_fixture.h"

namespace netstack::udp {
namespace {

using ip::testing::HeapAllocations;
using transport::Family;

class UdpAllocTest : public testing::UdpFixture {
 protected:
  // One Ethernet frame carrying a UDP datagram, in a chunk of its own,
  // as a link endpoint would hand it over (delivered without a copy).
  link::InboundFrame Frame(const transport::SocketAddress& src,
                           const transport::SocketAddress& dst,
                           size_t payload_len) {
    const std::vector<uint8_t> payload(payload_len, 0x42);
    const auto packets = stack::testing::Ipv4Packets(
        src.ip.v4(), dst.ip.v4(), 17, 1,
        testing::UdpDatagram(src, dst, payload), 1500);
    const auto frame = stack::testing::WithEthernet(
        peer_.mac, our_mac_, testing::kEtherIpv4, packets[0]);
    buffer::ChunkRef chunk = chunks_.Allocate();
    std::memcpy(chunk->mutable_data().data(), frame.data(), frame.size());
    link::InboundFrame in;
    in.frame = buffer::PayloadView(std::move(chunk), 0,
                                   static_cast<uint32_t>(frame.size()));
    return in;
  }
};

TEST_F(UdpAllocTest, ReceivePathIntoBoundSocketDoesNotAllocate) {
  auto s = udp_->Open(Family::kIpv4);
  ASSERT_TRUE(s->Bind(Any4(5000)).ok());
  uint64_t callbacks = 0;
  s->set_callback([&](uint32_t) { ++callbacks; });
  link::InboundFrame batch[8];
  for (auto& f : batch) f = Frame(Peer4(7), Our4(5000), 512);
  uint8_t buf[2048];
  auto round = [&] {
    link_->Deliver(batch, now_);
    notifier_.Dispatch();
    for (size_t i = 0; i < std::size(batch); ++i) {
      auto r = s->RecvFrom(buf);
      ASSERT_TRUE(r.ok());
      ASSERT_EQ(r->bytes, 512u);
    }
    auto d = [&] {
      link_->Deliver(std::span(batch, 1), now_);
      return s->RecvDatagram();  // zero-copy read
    }();
    ASSERT_TRUE(d.ok());
    ASSERT_EQ(d->payload.size(), 512u);
  };
  round();  // warm-up: the queue's ring, the notifier's list
  const uint64_t before = HeapAllocations();
  for (int i = 0; i < 100; ++i) round();
  EXPECT_EQ(HeapAllocations() - before, 0u);
  EXPECT_EQ(s->stats().datagrams_received, 101u * 9u);
  // One callback per dispatch: the first carried kWritable with the first
  // round's kReadable.
  EXPECT_EQ(callbacks, 101u);
}

TEST_F(UdpAllocTest, SendPathDoesNotAllocate) {
  LearnPeer();
  link_->set_record(false);
  auto s = udp_->Open(Family::kIpv4);
  ASSERT_TRUE(s->Connect(Peer4(9)).ok());
  const std::vector<uint8_t> payload(1000, 7);
  auto round = [&] {
    for (int i = 0; i < 8; ++i) ASSERT_TRUE(s->Send(payload, now_).ok());
    stack_->Flush(now_);
  };
  round();
  const uint64_t before = HeapAllocations();
  for (int i = 0; i < 100; ++i) round();
  EXPECT_EQ(HeapAllocations() - before, 0u);
  EXPECT_EQ(udp_->counters().datagrams_sent, 808u);
}

}  // namespace
}  // namespace netstack::udp
