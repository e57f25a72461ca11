// The send side: what the link gets, byte for byte, and the errors.
#include <cerrno>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "netstack/udp/udp_test_fixture.h"
#include "netstack/wire/bytes.h"
#include "netstack/wire/checksum.h"

namespace netstack::udp {
namespace {

using testing::Bytes;
using transport::ErrnoOf;
using transport::Family;
using transport::SocketAddress;

class UdpSendTest : public testing::UdpFixture {};

// The expected UDP datagram, checksum computed here from a hand-built
// pseudo-header (RFC 768) rather than by the wire helpers under test.
std::vector<uint8_t> ExpectedIpv4Udp(const wire::Ipv4Address& src,
                                     const wire::Ipv4Address& dst,
                                     uint16_t sport, uint16_t dport,
                                     const std::vector<uint8_t>& payload) {
  const uint16_t len = static_cast<uint16_t>(8 + payload.size());
  std::vector<uint8_t> udp = {static_cast<uint8_t>(sport >> 8),
                              static_cast<uint8_t>(sport),
                              static_cast<uint8_t>(dport >> 8),
                              static_cast<uint8_t>(dport),
                              static_cast<uint8_t>(len >> 8),
                              static_cast<uint8_t>(len),
                              0,
                              0};
  udp.insert(udp.end(), payload.begin(), payload.end());
  std::vector<uint8_t> pseudo(src.bytes.begin(), src.bytes.end());
  pseudo.insert(pseudo.end(), dst.bytes.begin(), dst.bytes.end());
  pseudo.insert(pseudo.end(), {0, 17, udp[4], udp[5]});
  pseudo.insert(pseudo.end(), udp.begin(), udp.end());
  uint16_t sum = wire::InternetChecksum(pseudo);
  if (sum == 0) sum = 0xffff;
  udp[6] = static_cast<uint8_t>(sum >> 8);
  udp[7] = static_cast<uint8_t>(sum);
  return udp;
}

TEST_F(UdpSendTest, Ipv4DatagramOnTheWireIsExact) {
  LearnPeer();
  auto s = udp_->Open(Family::kIpv4);
  ASSERT_TRUE(s->Bind(Our4(6000)).ok());
  const auto payload = Bytes("abc");
  ASSERT_TRUE(s->SendTo(payload, Peer4(7000), now_).ok());
  auto sent = TakeSent();
  ASSERT_EQ(sent.size(), 1u);
  testing::SentFrame f = testing::ParseSent(sent[0]);
  EXPECT_EQ(f.eth.dst, peer_.mac);
  EXPECT_EQ(f.eth.src, our_mac_);
  ASSERT_TRUE(f.is_v4);
  EXPECT_EQ(f.ip4.src, our_ip4_);
  EXPECT_EQ(f.ip4.dst, peer_.ip4);
  EXPECT_EQ(f.ip4.protocol, 17);
  EXPECT_EQ(f.ip4.payload_len, 11);
  EXPECT_EQ(sent[0].size(), 14u + 20u + 11u);
  EXPECT_EQ(f.l4, ExpectedIpv4Udp(our_ip4_, peer_.ip4, 6000, 7000, payload));
  // And the wire helpers agree that the checksum is valid.
  wire::UdpHeader udp(f.l4);
  ASSERT_EQ(udp.Check(), wire::WireError::kOk);
  EXPECT_TRUE(udp.HasChecksum());
  EXPECT_TRUE(udp.ChecksumValid(
      wire::Ipv4PseudoHeaderSum(our_ip4_, peer_.ip4, 17, udp.Length()),
      wire::UdpZeroChecksum::kReject));
  EXPECT_EQ(udp_->counters().datagrams_sent, 1u);
  EXPECT_EQ(s->stats().datagrams_sent, 1u);
}

TEST_F(UdpSendTest, ViewsGoOutAsOneDatagramWithoutACopy) {
  LearnPeer();
  auto s = udp_->Open(Family::kIpv4);
  ASSERT_TRUE(s->Bind(Our4(6000)).ok());
  // Two views of one chunk and one of another, as a relay holds them.
  buffer::ChunkRef a = chunks_.Allocate();
  buffer::ChunkRef b = chunks_.Allocate();
  const auto p1 = Bytes("hello, ");
  const auto p2 = Bytes("view");
  const auto p3 = Bytes("s!");
  std::memcpy(a->mutable_data().data(), p1.data(), p1.size());
  std::memcpy(a->mutable_data().data() + 100, p2.data(), p2.size());
  std::memcpy(b->mutable_data().data(), p3.data(), p3.size());
  const buffer::PayloadView views[] = {
      {a, 0, static_cast<uint32_t>(p1.size())},
      {a, 100, static_cast<uint32_t>(p2.size())},
      {b, 0, static_cast<uint32_t>(p3.size())}};
  const uint64_t allocations = chunks_.stats().allocations;
  ASSERT_TRUE(s->SendViewsTo(views, Peer4(7000), now_).ok());
  EXPECT_EQ(chunks_.stats().allocations, allocations);  // no copy
  auto sent = TakeSent();
  ASSERT_EQ(sent.size(), 1u);
  testing::SentFrame f = testing::ParseSent(sent[0]);
  EXPECT_EQ(f.l4, ExpectedIpv4Udp(our_ip4_, peer_.ip4, 6000, 7000,
                                  Bytes("hello, views!")));
  // Too many views for one packet: refused, counted.
  std::vector<buffer::PayloadView> many(
      buffer::PacketBuffer::kMaxPayloadViews + 1, views[0]);
  EXPECT_EQ(ErrnoOf(s->SendViewsTo(many, Peer4(7000), now_)), EINVAL);
  EXPECT_EQ(udp_->counters().send_too_many_views, 1u);
}

// SendTo copied every datagram into a fresh 64 KiB chunk; small ones now
// share the layer's send chunk.
TEST_F(UdpSendTest, SmallDatagramsShareASendChunk) {
  LearnPeer();
  auto s = udp_->Open(Family::kIpv4);
  ASSERT_TRUE(s->Bind(Our4(6000)).ok());
  const uint64_t allocations = chunks_.stats().allocations;
  for (int i = 0; i < 100; ++i) {
    ASSERT_TRUE(s->SendTo(Bytes("ping"), Peer4(7000), now_).ok());
  }
  EXPECT_LE(chunks_.stats().allocations - allocations, 1u);
  auto sent = TakeSent();
  ASSERT_EQ(sent.size(), 100u);
  for (const auto& frame : sent) {
    EXPECT_EQ(testing::ParseSent(frame).l4,
              ExpectedIpv4Udp(our_ip4_, peer_.ip4, 6000, 7000, Bytes("ping")));
  }
}

TEST_F(UdpSendTest, Ipv6DatagramCarriesAValidChecksum) {
  LearnPeer();
  auto s = udp_->Open(Family::kIpv6);
  ASSERT_TRUE(s->Bind(Any6(6001)).ok());
  // Sizes with odd lengths too, and empty.
  for (size_t size : {0u, 1u, 2u, 333u, 1452u}) {
    std::vector<uint8_t> payload(size);
    for (size_t i = 0; i < size; ++i)
      payload[i] = static_cast<uint8_t>(i * 31 + 7);
    ASSERT_TRUE(s->SendTo(payload, Peer6(53), now_).ok()) << size;
    auto sent = TakeSent();
    ASSERT_EQ(sent.size(), 1u) << size;
    testing::SentFrame f = testing::ParseSent(sent[0]);
    ASSERT_FALSE(f.is_v4);
    EXPECT_EQ(f.ip6.src, our_ip6_);  // the route's source: bound to any
    EXPECT_EQ(f.ip6.dst, peer_.ip6);
    EXPECT_EQ(f.ip6.next_header, 17);
    wire::UdpHeader udp(f.l4);
    ASSERT_EQ(udp.Check(), wire::WireError::kOk);
    EXPECT_EQ(udp.SrcPort(), 6001);
    EXPECT_EQ(udp.DstPort(), 53);
    EXPECT_EQ(udp.Length(), 8 + size);
    EXPECT_NE(udp.Checksum(), 0);  // mandatory over IPv6 (RFC 8200 8.1)
    EXPECT_TRUE(udp.ChecksumValid(
        wire::Ipv6PseudoHeaderSum(our_ip6_, peer_.ip6, 17, udp.Length()),
        wire::UdpZeroChecksum::kReject))
        << size;
    EXPECT_TRUE(
        std::equal(payload.begin(), payload.end(), udp.Payload().begin()));
  }
}

TEST_F(UdpSendTest, UnboundSocketSendsFromAnEphemeralPort) {
  LearnPeer();
  auto s = udp_->Open(Family::kIpv4);
  EXPECT_FALSE(s->is_bound());
  ASSERT_TRUE(s->SendTo(Bytes("q"), Peer4(53), now_).ok());
  ASSERT_TRUE(s->is_bound());
  const uint16_t port = s->local_address().port;
  EXPECT_GE(port, 32768);
  EXPECT_LE(port, 60999);
  EXPECT_TRUE(s->local_address().ip.IsUnspecified());
  auto sent = TakeSent();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(wire::UdpHeader(testing::ParseSent(sent[0]).l4).SrcPort(), port);
  // The answer comes back to it.
  InjectUdp(Peer4(53), Our4(port), Bytes("answer"));
  EXPECT_EQ(s->NextDatagramSize(), 6u);
}

TEST_F(UdpSendTest, ConnectedSocketSendsToItsPeer) {
  LearnPeer();
  auto s = udp_->Open(Family::kIpv4);
  EXPECT_EQ(ErrnoOf(s->Send(Bytes("x"), now_)), ENOTCONN);
  ASSERT_TRUE(s->Connect(Peer4(4242)).ok());
  // Connect bound an ephemeral port and fixed the route's source.
  EXPECT_EQ(s->local_address().ip, transport::IpAddress(our_ip4_));
  EXPECT_NE(s->local_address().port, 0);
  EXPECT_EQ(s->remote_address(), Peer4(4242));
  ASSERT_TRUE(s->Send(Bytes("hi"), now_).ok());
  auto sent = TakeSent();
  ASSERT_EQ(sent.size(), 1u);
  testing::SentFrame f = testing::ParseSent(sent[0]);
  EXPECT_EQ(f.ip4.dst, peer_.ip4);
  wire::UdpHeader udp(f.l4);
  EXPECT_EQ(udp.DstPort(), 4242);
  EXPECT_EQ(udp.SrcPort(), s->local_address().port);
}

TEST_F(UdpSendTest, OversizedDatagramsAreRefused) {
  LearnPeer();
  auto s4 = udp_->Open(Family::kIpv4);
  auto s6 = udp_->Open(Family::kIpv6);
  std::vector<uint8_t> big(UdpLayer::kMaxIpv6Payload + 1);
  EXPECT_EQ(ErrnoOf(s6->SendTo(big, Peer6(9), now_)), EMSGSIZE);
  big.resize(UdpLayer::kMaxIpv4Payload + 1);
  EXPECT_EQ(ErrnoOf(s4->SendTo(big, Peer4(9), now_)), EMSGSIZE);
  EXPECT_EQ(udp_->counters().send_message_too_long, 2u);
  EXPECT_FALSE(s4->is_bound());  // refused before anything happened
  // The largest datagram goes out, fragmented by the stack.
  big.resize(UdpLayer::kMaxIpv4Payload);
  ASSERT_TRUE(s4->SendTo(big, Peer4(9), now_).ok());
  auto sent = TakeSent();
  // 8 + 65507 bytes of IP payload in fragments of 1480 (MTU 1500).
  EXPECT_EQ(sent.size(), (8u + 65507u + 1479u) / 1480u);
  EXPECT_EQ(stack_->counters().ipv4_fragments_sent, sent.size());
}

TEST_F(UdpSendTest, LargeIpv6DatagramIsFragmentedWithItsChecksum) {
  LearnPeer();
  auto s = udp_->Open(Family::kIpv6);
  std::vector<uint8_t> big(3000, 0x5a);
  ASSERT_TRUE(s->SendTo(big, Peer6(9), now_).ok());
  auto sent = TakeSent();
  EXPECT_EQ(sent.size(), 3u);
  EXPECT_EQ(stack_->counters().ipv6_fragments_sent, 3u);
}

TEST_F(UdpSendTest, NoRouteIsHostUnreachable) {
  auto s = udp_->Open(Family::kIpv4);
  const SocketAddress far{*wire::Ipv4Address::Parse("192.0.2.1"), 53};
  EXPECT_EQ(ErrnoOf(s->SendTo(Bytes("x"), far, now_)), EHOSTUNREACH);
  EXPECT_EQ(ErrnoOf(s->Connect(far)), EHOSTUNREACH);
  EXPECT_FALSE(s->remote_address().has_value());
  auto s6 = udp_->Open(Family::kIpv6);
  const SocketAddress far6{*wire::Ipv6Address::Parse("2001:db8::1"), 53};
  EXPECT_EQ(ErrnoOf(s6->SendTo(Bytes("x"), far6, now_)), EHOSTUNREACH);
  EXPECT_EQ(udp_->counters().send_no_route, 2u);
  EXPECT_TRUE(TakeSent().empty());
}

TEST_F(UdpSendTest, BadDestinationsAreInvalidArguments) {
  auto s4 = udp_->Open(Family::kIpv4);
  auto s6 = udp_->Open(Family::kIpv6);
  EXPECT_EQ(ErrnoOf(s4->SendTo(Bytes("x"), Peer4(0), now_)), EINVAL);
  EXPECT_EQ(ErrnoOf(s4->SendTo(Bytes("x"), Any4(53), now_)), EINVAL);
  EXPECT_EQ(ErrnoOf(s4->SendTo(Bytes("x"), Peer6(53), now_)), EINVAL);
  EXPECT_EQ(ErrnoOf(s6->SendTo(Bytes("x"), Peer4(53), now_)), EINVAL);
  const SocketAddress mapped{*wire::Ipv6Address::Parse("::ffff:10.9.0.1"), 53};
  EXPECT_EQ(ErrnoOf(s6->SendTo(Bytes("x"), mapped, now_)), EINVAL);
  EXPECT_EQ(ErrnoOf(s6->Connect(mapped)), EINVAL);
  EXPECT_TRUE(TakeSent().empty());
}

TEST_F(UdpSendTest, ExhaustedPoolsAreNoBuffers) {
  LearnPeer();
  auto s = udp_->Open(Family::kIpv4);
  // Take every chunk the pool can give.
  std::vector<buffer::ChunkRef> hoard;
  while (buffer::ChunkRef c = chunks_.Allocate()) hoard.push_back(std::move(c));
  EXPECT_EQ(ErrnoOf(s->SendTo(Bytes("x"), Peer4(9), now_)), ENOBUFS);
  EXPECT_EQ(udp_->counters().send_no_buffer, 1u);
  // An empty datagram needs no chunk.
  EXPECT_TRUE(s->SendTo({}, Peer4(9), now_).ok());
  hoard.clear();
  EXPECT_TRUE(s->SendTo(Bytes("x"), Peer4(9), now_).ok());
  EXPECT_EQ(TakeSent().size(), 2u);
}

TEST_F(UdpSendTest, SentChunksGoBackToThePool) {
  LearnPeer();
  auto s = udp_->Open(Family::kIpv4);
  const size_t before = chunks_.stats().in_use;
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(s->SendTo(Bytes("data"), Peer4(9), now_).ok());
  }
  // The ten share the layer's send chunk, which it keeps for the next
  // datagrams (it was one chunk per datagram).
  EXPECT_EQ(chunks_.stats().in_use, before + 1);
  EXPECT_EQ(TakeSent().size(), 10u);
  EXPECT_EQ(chunks_.stats().in_use, before + 1);
  // A full chunk goes back once its datagrams have left: sending 200
  // more 1000-byte datagrams (three chunks' worth) holds no more chunks.
  const std::vector<uint8_t> big(1000, 1);
  for (int i = 0; i < 200; ++i) {
    ASSERT_TRUE(s->SendTo(big, Peer4(9), now_).ok());
    if (i % 10 == 9) TakeSent();
  }
  EXPECT_LE(chunks_.stats().in_use, before + 2);
}

}  // namespace
}  // namespace netstack::udp
