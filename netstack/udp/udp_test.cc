// The receive side: frames injected on the fake link reach the right
// socket (or draw a port unreachable), byte for byte and without a copy.
#include <cerrno>

#include "gtest/gtest.h"
#include "netstack/udp/udp_test_fixture.h"
#include "netstack/wire/bytes.h"

namespace netstack::udp {
namespace {

using stack::DropReason;
using testing::Bytes;
using transport::Family;
using transport::SocketAddress;
namespace event = transport::event;

class UdpReceiveTest : public testing::UdpFixture {};

TEST_F(UdpReceiveTest, Ipv4DatagramReachesBoundSocketWithItsSource) {
  auto s = udp_->Open(Family::kIpv4);
  ASSERT_TRUE(s->Bind(Any4(5353)).ok());
  EXPECT_EQ(s->Events(), event::kWritable);
  InjectUdp(Peer4(40000), Our4(5353), Bytes("hello"));
  EXPECT_EQ(s->Events(), event::kWritable | event::kReadable);
  EXPECT_EQ(s->NextDatagramSize(), 5u);

  uint8_t buf[64];
  auto r = s->RecvFrom(buf);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->bytes, 5u);
  EXPECT_FALSE(r->truncated);
  EXPECT_EQ(r->from, Peer4(40000));
  EXPECT_EQ(std::string(buf, buf + 5), "hello");
  EXPECT_TRUE(transport::IsWouldBlock(s->RecvFrom(buf).status()));
  EXPECT_EQ(s->Events(), event::kWritable);
  EXPECT_EQ(udp_->counters().datagrams_received, 1u);
  EXPECT_EQ(s->stats().datagrams_received, 1u);
  EXPECT_TRUE(TakeSent().empty());  // no ICMP
  EXPECT_EQ(stack_->counters().rx_dropped_frames, 0u);
}

TEST_F(UdpReceiveTest, Ipv6DatagramIsQueuedAsAViewOfTheReceivedFrame) {
  auto s = udp_->Open(Family::kIpv6);
  ASSERT_TRUE(s->Bind(Our6(5353)).ok());
  InjectUdp(Peer6(40001), Our6(5353), Bytes("zero copy"));
  auto d = s->RecvDatagram();
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->from, Peer6(40001));
  EXPECT_EQ(std::string(d->payload.bytes().begin(), d->payload.bytes().end()),
            "zero copy");
  // The view points into the chunk the link received the frame in, just
  // after the Ethernet, IPv6 and UDP headers: nothing was copied.
  EXPECT_EQ(d->payload.offset(), 14u + 40u + 8u);
  const uint8_t* frame = d->payload.chunk()->data().data();
  EXPECT_EQ(wire::LoadBe16(frame + 12), testing::kEtherIpv6);
  EXPECT_EQ(wire::LoadBe16(frame + 14 + 40 + 2), 5353);  // UDP dst port
}

TEST_F(UdpReceiveTest, FamiliesAreSeparate) {
  auto v6 = udp_->Open(Family::kIpv6);
  ASSERT_TRUE(v6->Bind(Any6(7000)).ok());
  LearnPeer();
  // An IPv4 datagram to the port finds no IPv4 socket: port unreachable,
  // although an IPv6 wildcard socket holds the port.
  InjectUdp(Peer4(1234), Our4(7000), Bytes("v4"));
  EXPECT_FALSE(v6->NextDatagramSize().has_value());
  EXPECT_EQ(udp_->counters().no_port, 1u);
  EXPECT_EQ(TakeSent().size(), 1u);
  // And an IPv4 socket may bind the same port.
  auto v4 = udp_->Open(Family::kIpv4);
  ASSERT_TRUE(v4->Bind(Any4(7000)).ok());
  InjectUdp(Peer4(1234), Our4(7000), Bytes("v4"));
  InjectUdp(Peer6(1234), Our6(7000), Bytes("v6!"));
  EXPECT_EQ(v4->NextDatagramSize(), 2u);
  EXPECT_EQ(v6->NextDatagramSize(), 3u);
}

TEST_F(UdpReceiveTest, ClosedPortGetsIcmpv4PortUnreachable) {
  LearnPeer();
  auto s = udp_->Open(Family::kIpv4);
  ASSERT_TRUE(s->Bind(Any4(9999)).ok());
  s->Close();  // closed again: the port is free
  InjectUdp(Peer4(5555), Our4(9999), Bytes("anyone?"));
  auto sent = TakeSent();
  ASSERT_EQ(sent.size(), 1u);
  testing::SentFrame f = testing::ParseSent(sent[0]);
  ASSERT_TRUE(f.is_v4);
  EXPECT_EQ(f.ip4.protocol, 1);
  EXPECT_EQ(f.ip4.dst, peer_.ip4);
  ASSERT_GE(f.l4.size(), 8u + 20u + 8u);
  EXPECT_EQ(f.l4[0], 3);  // destination unreachable
  EXPECT_EQ(f.l4[1], 3);  // port unreachable
  EXPECT_EQ(wire::InternetChecksum(f.l4), 0);
  // It quotes our datagram's IP header and UDP ports.
  EXPECT_EQ(wire::LoadBe16(&f.l4[8 + 20]), 5555);
  EXPECT_EQ(wire::LoadBe16(&f.l4[8 + 20 + 2]), 9999);
  EXPECT_EQ(udp_->counters().no_port, 1u);
  EXPECT_EQ(StackDrops(DropReason::kUdpNoListener), 1u);
}

TEST_F(UdpReceiveTest, ClosedPortGetsIcmpv6PortUnreachable) {
  LearnPeer();
  InjectUdp(Peer6(5555), Our6(9999), Bytes("anyone?"));
  auto sent = TakeSent();
  ASSERT_EQ(sent.size(), 1u);
  testing::SentFrame f = testing::ParseSent(sent[0]);
  ASSERT_FALSE(f.is_v4);
  EXPECT_EQ(f.ip6.next_header, 58);
  EXPECT_EQ(f.ip6.dst, peer_.ip6);
  ASSERT_GE(f.l4.size(), 8u + 40u + 8u);
  EXPECT_EQ(f.l4[0], 1);  // destination unreachable
  EXPECT_EQ(f.l4[1], 4);  // port unreachable
  EXPECT_EQ(wire::LoadBe16(&f.l4[8 + 40 + 2]), 9999);
  EXPECT_EQ(udp_->counters().no_port, 1u);
  EXPECT_EQ(StackDrops(DropReason::kUdpNoListener), 1u);
}

TEST_F(UdpReceiveTest, ConnectedSocketTakesOnlyItsPeer) {
  LearnPeer();
  auto s = udp_->Open(Family::kIpv4);
  ASSERT_TRUE(s->Bind(Any4(9000)).ok());
  ASSERT_TRUE(s->Connect(Peer4(7000)).ok());
  InjectUdp(Peer4(7000), Our4(9000), Bytes("mine"));
  InjectUdp(Peer4(7001), Our4(9000), Bytes("other port"));
  auto other_host = *transport::IpAddress::Parse("10.9.0.7");
  InjectUdp({other_host, 7000}, Our4(9000), Bytes("other host"));
  uint8_t buf[32];
  auto r = s->RecvFrom(buf);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->from, Peer4(7000));
  EXPECT_TRUE(transport::IsWouldBlock(s->RecvFrom(buf).status()));
  // The others matched no socket: port unreachable, as Linux answers.
  EXPECT_EQ(udp_->counters().no_port, 2u);
}

TEST_F(UdpReceiveTest, FourTupleBeatsAddressBeatsWildcard) {
  LearnPeer();
  auto any = udp_->Open(Family::kIpv4);
  auto addr = udp_->Open(Family::kIpv4);
  auto conn = udp_->Open(Family::kIpv4);
  for (auto* s : {any.get(), addr.get(), conn.get()}) {
    ASSERT_TRUE(s->SetReuseAddress(true).ok());
  }
  ASSERT_TRUE(any->Bind(Any4(4433)).ok());
  ASSERT_TRUE(addr->Bind(Our4(4433)).ok());
  ASSERT_TRUE(conn->Bind(Any4(4433)).ok());
  ASSERT_TRUE(conn->Connect(Peer4(5000)).ok());
  InjectUdp(Peer4(5000), Our4(4433), Bytes("a"));
  InjectUdp(Peer4(5001), Our4(4433), Bytes("bb"));
  EXPECT_EQ(conn->NextDatagramSize(), 1u);
  EXPECT_EQ(addr->NextDatagramSize(), 2u);
  EXPECT_FALSE(any->NextDatagramSize().has_value());
  // Without the address-bound socket, the wildcard one gets it.
  addr->Close();
  InjectUdp(Peer4(5001), Our4(4433), Bytes("ccc"));
  EXPECT_EQ(any->NextDatagramSize(), 3u);
}

TEST_F(UdpReceiveTest, BroadcastGoesToEveryWildcardSocket) {
  auto a = udp_->Open(Family::kIpv4);
  auto b = udp_->Open(Family::kIpv4);
  auto unicast_only = udp_->Open(Family::kIpv4);
  for (auto* s : {a.get(), b.get(), unicast_only.get()}) {
    ASSERT_TRUE(s->SetReuseAddress(true).ok());
  }
  ASSERT_TRUE(a->Bind(Any4(6767)).ok());
  ASSERT_TRUE(b->Bind(Any4(6767)).ok());
  ASSERT_TRUE(unicast_only->Bind(Our4(6767)).ok());
  const wire::MacAddress bcast = wire::MacAddress::Broadcast();
  const SocketAddress subnet_bcast{*wire::Ipv4Address::Parse("10.9.0.255"),
                                   6767};
  InjectUdp(Peer4(68), subnet_bcast, Bytes("dhcp-ish"), &bcast);
  EXPECT_EQ(a->NextDatagramSize(), 8u);
  EXPECT_EQ(b->NextDatagramSize(), 8u);
  EXPECT_FALSE(unicast_only->NextDatagramSize().has_value());
  // Both views share the one received chunk.
  auto da = a->RecvDatagram();
  auto db = b->RecvDatagram();
  ASSERT_TRUE(da.ok() && db.ok());
  EXPECT_EQ(da->payload.chunk().get(), db->payload.chunk().get());
  EXPECT_EQ(udp_->counters().datagrams_received, 2u);
  // A broadcast to a closed port draws no ICMP (RFC 1122 3.2.2).
  InjectUdp(Peer4(68), {subnet_bcast.ip, 1}, Bytes("x"), &bcast);
  EXPECT_TRUE(TakeSent().empty());
  EXPECT_EQ(udp_->counters().no_port, 1u);
}

TEST_F(UdpReceiveTest, FullReceiveQueueDropsAreCountedWithoutIcmp) {
  LearnPeer();
  auto s = udp_->Open(Family::kIpv4);
  ASSERT_TRUE(s->Bind(Any4(8000)).ok());
  ASSERT_TRUE(s->SetReceiveBufferSize(2 * DatagramQueue::Charge(100)).ok());
  const std::vector<uint8_t> payload(100, 0xab);
  for (int i = 0; i < 3; ++i) InjectUdp(Peer4(1000 + i), Our4(8000), payload);
  EXPECT_EQ(udp_->counters().datagrams_received, 2u);
  EXPECT_EQ(udp_->counters().receive_queue_full, 1u);
  EXPECT_EQ(s->stats().receive_queue_full, 1u);
  EXPECT_EQ(udp_->counters().no_port, 0u);
  EXPECT_TRUE(TakeSent().empty());  // a listener exists: no ICMP
  EXPECT_EQ(StackDrops(DropReason::kUdpNoListener), 0u);
  EXPECT_EQ(StackDrops(DropReason::kUdpReceiveBufferFull), 1u);
  // The first two arrived in order; after reading, there is room again.
  uint8_t buf[200];
  EXPECT_EQ(s->RecvFrom(buf)->from.port, 1000);
  InjectUdp(Peer4(1003), Our4(8000), payload);
  EXPECT_EQ(s->RecvFrom(buf)->from.port, 1001);
  EXPECT_EQ(s->RecvFrom(buf)->from.port, 1003);
  EXPECT_EQ(udp_->counters().receive_queue_full, 1u);
}

TEST_F(UdpReceiveTest, DefaultReceiveBufferHolds256KiBCharged) {
  auto s = udp_->Open(Family::kIpv4);
  ASSERT_TRUE(s->Bind(Any4(8001)).ok());
  EXPECT_EQ(s->receive_buffer_size(), 256u * 1024u);
  const std::vector<uint8_t> payload(1472, 1);
  for (int i = 0; i < 140; ++i) InjectUdp(Peer4(1), Our4(8001), payload);
  const size_t fits = 256 * 1024 / DatagramQueue::Charge(1472);  // 132
  EXPECT_EQ(s->stats().datagrams_received, fits);
  EXPECT_EQ(s->stats().receive_queue_full, 140 - fits);
}

TEST_F(UdpReceiveTest, RecvFromTruncatesAndDiscardsTheRest) {
  auto s = udp_->Open(Family::kIpv4);
  ASSERT_TRUE(s->Bind(Any4(8002)).ok());
  InjectUdp(Peer4(1), Our4(8002), Bytes("0123456789"));
  InjectUdp(Peer4(2), Our4(8002), Bytes("ab"));
  uint8_t buf[4];
  auto r = s->RecvFrom(buf);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->bytes, 4u);
  EXPECT_TRUE(r->truncated);
  EXPECT_EQ(std::string(buf, buf + 4), "0123");
  // The next read is the next datagram, not the rest of the first.
  r = s->RecvFrom(buf);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->bytes, 2u);
  EXPECT_FALSE(r->truncated);
  EXPECT_EQ(r->from.port, 2);
}

TEST_F(UdpReceiveTest, EmptyDatagramIsADatagram) {
  auto s = udp_->Open(Family::kIpv4);
  ASSERT_TRUE(s->Bind(Any4(8003)).ok());
  InjectUdp(Peer4(1), Our4(8003), {});
  EXPECT_EQ(s->Events() & event::kReadable, event::kReadable);
  uint8_t buf[4];
  auto r = s->RecvFrom(buf);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->bytes, 0u);
  EXPECT_FALSE(r->truncated);
}

TEST_F(UdpReceiveTest, UdpLengthNotIpLengthBoundsThePayload) {
  auto s = udp_->Open(Family::kIpv4);
  ASSERT_TRUE(s->Bind(Any4(8004)).ok());
  // A 3-byte datagram followed by 5 bytes inside the IP payload that are
  // not part of it (RFC 768: Length counts the datagram).
  std::vector<uint8_t> l4 =
      testing::UdpDatagram(Peer4(1), Our4(8004), Bytes("abc"));
  for (uint8_t b : Bytes("junk!")) l4.push_back(b);
  InjectL4(peer_.ip4, our_ip4_, l4);
  uint8_t buf[16];
  auto r = s->RecvFrom(buf);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(std::string(buf, buf + r->bytes), "abc");
}

TEST_F(UdpReceiveTest, ReassembledDatagramArrivesWhole) {
  auto s = udp_->Open(Family::kIpv4);
  ASSERT_TRUE(s->Bind(Any4(8005)).ok());
  auto s6 = udp_->Open(Family::kIpv6);
  ASSERT_TRUE(s6->Bind(Any6(8005)).ok());
  std::vector<uint8_t> big(4000);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<uint8_t>(i * 13);
  InjectUdp(Peer4(1), Our4(8005), big);
  InjectUdp(Peer6(1), Our6(8005), big);
  for (auto* sock : {s.get(), s6.get()}) {
    std::vector<uint8_t> out(5000);
    auto r = sock->RecvFrom(out);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->bytes, big.size());
    out.resize(r->bytes);
    EXPECT_EQ(out, big);
  }
  EXPECT_EQ(stack_->counters().ipv4_reassembled, 1u);
  EXPECT_EQ(stack_->counters().ipv6_reassembled, 1u);
}

TEST_F(UdpReceiveTest, BadChecksumNeverReachesTheSocket) {
  auto s = udp_->Open(Family::kIpv6);
  ASSERT_TRUE(s->Bind(Any6(8006)).ok());
  auto l4 = testing::UdpDatagram(Peer6(1), Our6(8006), Bytes("x"));
  l4[8] ^= 1;
  InjectL4(peer_.ip6, our_ip6_, l4);
  EXPECT_FALSE(s->NextDatagramSize().has_value());
  EXPECT_EQ(StackDrops(DropReason::kUdpBadChecksum), 1u);
  EXPECT_EQ(udp_->counters().datagrams_received, 0u);
}

TEST_F(UdpReceiveTest, ReadinessCallbackRunsOncePerDispatch) {
  auto s = udp_->Open(Family::kIpv4);
  ASSERT_TRUE(s->Bind(Any4(8007)).ok());
  std::vector<uint32_t> calls;
  s->set_callback([&](uint32_t events) { calls.push_back(events); });
  EXPECT_TRUE(calls.empty());  // never from inside an API call
  EXPECT_EQ(notifier_.Dispatch(), 1u);
  EXPECT_EQ(calls, std::vector<uint32_t>{event::kWritable});
  EXPECT_EQ(notifier_.Dispatch(), 0u);

  // Two datagrams in two batches: one callback at the next dispatch.
  InjectUdp(Peer4(1), Our4(8007), Bytes("1"));
  InjectUdp(Peer4(1), Our4(8007), Bytes("2"));
  EXPECT_EQ(calls.size(), 1u);
  EXPECT_EQ(notifier_.Dispatch(), 1u);
  EXPECT_EQ(calls, (std::vector<uint32_t>{event::kWritable, event::kReadable}));
  EXPECT_EQ(notifier_.Dispatch(), 0u);
  // A dropped datagram (full queue) does not wake the socket.
  ASSERT_TRUE(s->SetReceiveBufferSize(1).ok());
  InjectUdp(Peer4(1), Our4(8007), Bytes("3"));
  EXPECT_EQ(notifier_.Dispatch(), 0u);
  EXPECT_EQ(s->stats().receive_queue_full, 1u);
}

TEST_F(UdpReceiveTest, CallbackMayCloseOrDestroyTheSocket) {
  auto s = udp_->Open(Family::kIpv4);
  ASSERT_TRUE(s->Bind(Any4(8008)).ok());
  int calls = 0;
  s->set_callback([&](uint32_t events) {
    ++calls;
    if (events & event::kReadable) s.reset();
  });
  notifier_.Dispatch();
  InjectUdp(Peer4(1), Our4(8008), Bytes("bye"));
  EXPECT_EQ(notifier_.Dispatch(), 1u);
  EXPECT_EQ(s, nullptr);
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(udp_->open_sockets(), 0u);

  // Closed with an event pending: the callback does not run.
  auto t = udp_->Open(Family::kIpv4);
  ASSERT_TRUE(t->Bind(Any4(8008)).ok());
  int t_calls = 0;
  t->set_callback([&](uint32_t) { ++t_calls; });
  t->Close();
  notifier_.Dispatch();
  EXPECT_EQ(t_calls, 0);
  EXPECT_EQ(t->Events(), 0u);
}

}  // namespace
}  // namespace netstack::udp
