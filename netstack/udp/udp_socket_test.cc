// Socket semantics: bind rules, ephemeral ports, connect, close.
#include <cerrno>
#include <set>

#include "gtest/gtest.h"
#include "netstack/udp/udp_test_fixture.h"

namespace netstack::udp {
namespace {

using testing::Bytes;
using transport::ErrnoOf;
using transport::Family;
using transport::IpAddress;
using transport::SocketAddress;

class UdpSocketTest : public testing::UdpFixture {};

TEST_F(UdpSocketTest, EphemeralPortsAreDistinctAndInRange) {
  std::vector<std::unique_ptr<UdpSocket>> sockets;
  std::set<uint16_t> ports;
  for (int i = 0; i < 500; ++i) {
    auto s = udp_->Open(i % 2 ? Family::kIpv6 : Family::kIpv4);
    ASSERT_TRUE(s->Bind(i % 2 ? Any6(0) : Any4(0)).ok());
    const uint16_t port = s->local_address().port;
    EXPECT_GE(port, 32768);
    EXPECT_LE(port, 60999);
    if (i % 2 == 0) {
      EXPECT_TRUE(ports.insert(port).second) << port;
    }
    sockets.push_back(std::move(s));
  }
  // Random starts: not one run of consecutive ports.
  EXPECT_GT(*ports.rbegin() - *ports.begin(), 10000);
}

TEST_F(UdpSocketTest, EphemeralSequenceFollowsTheSeed) {
  auto first_ports = [&](uint64_t seed) {
    RecreateLayer(seed);
    std::vector<std::unique_ptr<UdpSocket>> held;
    std::vector<uint16_t> ports;
    for (int i = 0; i < 5; ++i) {
      held.push_back(udp_->Open(Family::kIpv4));
      EXPECT_TRUE(held.back()->Bind(Any4(0)).ok());
      ports.push_back(held.back()->local_address().port);
    }
    return ports;
  };
  const auto a = first_ports(7);
  EXPECT_EQ(first_ports(7), a);
  EXPECT_NE(first_ports(8), a);
}

TEST_F(UdpSocketTest, EphemeralRangeExhaustionIsAddressInUse) {
  UdpLayerOptions options;
  options.ephemeral_low = 40000;
  options.ephemeral_high = 40003;
  RecreateLayer(1, options);
  std::vector<std::unique_ptr<UdpSocket>> held;
  held.push_back(udp_->Open(Family::kIpv4));
  ASSERT_TRUE(held.back()->Bind(Any4(40001)).ok());  // taken by hand
  std::set<uint16_t> ports;
  for (int i = 0; i < 3; ++i) {
    held.push_back(udp_->Open(Family::kIpv4));
    ASSERT_TRUE(held.back()->Bind(Any4(0)).ok());
    ports.insert(held.back()->local_address().port);
  }
  EXPECT_EQ(ports, (std::set<uint16_t>{40000, 40002, 40003}));
  auto extra = udp_->Open(Family::kIpv4);
  EXPECT_EQ(ErrnoOf(extra->Bind(Any4(0))), EADDRINUSE);
  EXPECT_EQ(ErrnoOf(extra->SendTo(Bytes("x"), Peer4(1), now_)), EADDRINUSE);
  EXPECT_FALSE(extra->is_bound());
  EXPECT_EQ(udp_->counters().ephemeral_exhausted, 2u);
  // The other family has its own ports.
  auto v6 = udp_->Open(Family::kIpv6);
  EXPECT_TRUE(v6->Bind(Any6(0)).ok());
  // A closed socket gives its port back.
  held[2]->Close();
  EXPECT_TRUE(extra->Bind(Any4(0)).ok());
}

TEST_F(UdpSocketTest, BindConflicts) {
  ASSERT_TRUE(
      stack_->AddAddress(nic_, *stack::ParseIpv4Cidr("10.8.0.2/24")).ok());
  const IpAddress second = *IpAddress::Parse("10.8.0.2");
  auto any = udp_->Open(Family::kIpv4);
  ASSERT_TRUE(any->Bind(Any4(53)).ok());
  auto specific = udp_->Open(Family::kIpv4);
  EXPECT_EQ(ErrnoOf(specific->Bind(Our4(53))), EADDRINUSE);
  EXPECT_FALSE(specific->is_bound());
  any->Close();
  ASSERT_TRUE(specific->Bind(Our4(53)).ok());
  // Another local address may use the port; any address may not.
  auto other = udp_->Open(Family::kIpv4);
  EXPECT_TRUE(other->Bind({second, 53}).ok());
  auto any2 = udp_->Open(Family::kIpv4);
  EXPECT_EQ(ErrnoOf(any2->Bind(Any4(53))), EADDRINUSE);
  auto same = udp_->Open(Family::kIpv4);
  EXPECT_EQ(ErrnoOf(same->Bind(Our4(53))), EADDRINUSE);
  // IPv6 has its own table.
  auto v6 = udp_->Open(Family::kIpv6);
  EXPECT_TRUE(v6->Bind(Any6(53)).ok());
  EXPECT_EQ(udp_->bound_sockets(Family::kIpv4), 2u);
  EXPECT_EQ(udp_->bound_sockets(Family::kIpv6), 1u);
}

TEST_F(UdpSocketTest, ReuseAddressOnBothSidesAllowsSharing) {
  auto a = udp_->Open(Family::kIpv4);
  auto b = udp_->Open(Family::kIpv4);
  auto c = udp_->Open(Family::kIpv4);
  ASSERT_TRUE(a->SetReuseAddress(true).ok());
  ASSERT_TRUE(b->SetReuseAddress(true).ok());
  ASSERT_TRUE(a->Bind(Any4(5000)).ok());
  EXPECT_TRUE(b->Bind(Any4(5000)).ok());
  EXPECT_EQ(ErrnoOf(c->Bind(Any4(5000))), EADDRINUSE);
  EXPECT_EQ(ErrnoOf(a->SetReuseAddress(false)), EINVAL);  // after bind
}

TEST_F(UdpSocketTest, BindRejectsForeignAddressesAndBadCalls) {
  auto s = udp_->Open(Family::kIpv4);
  absl::Status st = s->Bind({*IpAddress::Parse("10.9.0.77"), 1000});
  EXPECT_EQ(ErrnoOf(st), EINVAL);
  EXPECT_NE(st.message().find("not a local address"), absl::string_view::npos)
      << st;
  EXPECT_EQ(ErrnoOf(s->Bind({*IpAddress::Parse("192.0.2.1"), 1000})), EINVAL);
  EXPECT_EQ(ErrnoOf(s->Bind(Our6(1000))), EINVAL);  // other family
  EXPECT_FALSE(s->is_bound());
  ASSERT_TRUE(s->Bind(Our4(1000)).ok());
  EXPECT_EQ(s->local_address(), Our4(1000));
  EXPECT_EQ(ErrnoOf(s->Bind(Our4(1001))), EINVAL);  // already bound

  auto s6 = udp_->Open(Family::kIpv6);
  EXPECT_EQ(ErrnoOf(s6->Bind({*IpAddress::Parse("fd00:9::77"), 1})), EINVAL);
  EXPECT_TRUE(s6->Bind(Our6(1)).ok());
  // The NIC's link-local address is ours too.
  auto ll = udp_->Open(Family::kIpv6);
  EXPECT_TRUE(ll->Bind({*IpAddress::Parse("fe80::ff:fe00:2"), 1}).ok());
}

TEST_F(UdpSocketTest, ConnectFixesTheSourceAndDisconnectRestoresAny) {
  LearnPeer();
  auto s = udp_->Open(Family::kIpv6);
  ASSERT_TRUE(s->Bind(Any6(3000)).ok());
  ASSERT_TRUE(s->Connect(Peer6(53)).ok());
  EXPECT_EQ(s->local_address(), Our6(3000));
  ASSERT_TRUE(s->Disconnect().ok());
  EXPECT_EQ(s->local_address(), Any6(3000));
  EXPECT_FALSE(s->remote_address().has_value());
  // Unconnected again: every peer reaches it.
  InjectUdp(Peer6(99), Our6(3000), Bytes("x"));
  EXPECT_EQ(s->NextDatagramSize(), 1u);

  // An address bound by hand stays through connect and disconnect.
  auto t = udp_->Open(Family::kIpv6);
  ASSERT_TRUE(t->Bind(Our6(3001)).ok());
  ASSERT_TRUE(t->Connect(Peer6(53)).ok());
  ASSERT_TRUE(t->Disconnect().ok());
  EXPECT_EQ(t->local_address(), Our6(3001));
}

TEST_F(UdpSocketTest, ReconnectMovesTheFilterToTheNewPeer) {
  LearnPeer();
  auto s = udp_->Open(Family::kIpv4);
  ASSERT_TRUE(s->Connect(Peer4(1)).ok());
  const uint16_t port = s->local_address().port;
  ASSERT_TRUE(s->Connect(Peer4(2)).ok());
  EXPECT_EQ(s->local_address().port, port);  // same binding
  InjectUdp(Peer4(1), Our4(port), Bytes("old"));
  InjectUdp(Peer4(2), Our4(port), Bytes("new!"));
  EXPECT_EQ(s->NextDatagramSize(), 4u);
  uint8_t buf[8];
  (void)s->RecvFrom(buf);
  EXPECT_FALSE(s->NextDatagramSize().has_value());
}

TEST_F(UdpSocketTest, ClosedSocketRefusesEverything) {
  auto s = udp_->Open(Family::kIpv4);
  ASSERT_TRUE(s->Bind(Any4(2000)).ok());
  InjectUdp(Peer4(1), Our4(2000), Bytes("queued"));
  const size_t chunks_with_data = chunks_.stats().in_use;
  s->Close();
  s->Close();                                           // idempotent
  EXPECT_LT(chunks_.stats().in_use, chunks_with_data);  // queue dropped
  EXPECT_TRUE(s->is_closed());
  uint8_t buf[8];
  EXPECT_EQ(ErrnoOf(s->RecvFrom(buf).status()), EINVAL);
  EXPECT_EQ(ErrnoOf(s->SendTo(Bytes("x"), Peer4(1), now_)), EINVAL);
  EXPECT_EQ(ErrnoOf(s->Bind(Any4(2001))), EINVAL);
  EXPECT_EQ(ErrnoOf(s->Connect(Peer4(1))), EINVAL);
  EXPECT_EQ(udp_->bound_sockets(Family::kIpv4), 0u);
  EXPECT_EQ(udp_->open_sockets(), 1u);  // until destroyed
  s.reset();
  EXPECT_EQ(udp_->open_sockets(), 0u);
}

TEST_F(UdpSocketTest, CountersFormat) {
  LearnPeer();
  InjectUdp(Peer4(1), Our4(2), Bytes("x"));
  EXPECT_EQ(udp_->counters().Format(), "udp.no_port 1\n");
}

}  // namespace
}  // namespace netstack::udp
