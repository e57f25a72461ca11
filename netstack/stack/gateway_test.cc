// Gateway mode (GatewayOptions): a guest on the link, the stack standing
// in for every host beyond it. Crafted frames, as a hostile guest would
// send them.
#include <optional>
#include <vector>

#include "gtest/gtest.h"
#include "netstack/stack/fake_link.h"
#include "netstack/stack/stack.h"
#include "netstack/stack/test_frames.h"
#include "netstack/wire/checksum.h"
#include "netstack/wire/ethernet.h"
#include "netstack/wire/icmpv4.h"
#include "netstack/wire/icmpv6.h"
#include "netstack/wire/ipv4.h"
#include "netstack/wire/ipv6.h"

namespace netstack::stack {
namespace {

using testing::Peer;

constexpr uint16_t kIpv4 = 0x0800;
constexpr uint16_t kIpv6 = 0x86dd;
constexpr uint8_t kTcp = 6;
constexpr uint8_t kUdp = 17;

wire::Ipv4Address A4(const char* s) { return *wire::Ipv4Address::Parse(s); }
wire::Ipv6Address A6(const char* s) { return *wire::Ipv6Address::Parse(s); }

// Records what reaches a transport.
class Recorder : public TransportHandler {
 public:
  std::optional<DropReason> Deliver(const Ipv4Datagram& d, Instant) override {
    dst4.push_back(d.ip.dst);
    src4.push_back(d.ip.src);
    return std::nullopt;
  }
  std::optional<DropReason> Deliver(const Ipv6Datagram& d, Instant) override {
    dst6.push_back(d.ip.dst);
    src6.push_back(d.ip.src);
    return std::nullopt;
  }
  void OnIcmpError(const IcmpError& e, Instant) override { errors.push_back(e); }
  std::vector<wire::Ipv4Address> dst4, src4;
  std::vector<wire::Ipv6Address> dst6, src6;
  std::vector<IcmpError> errors;
};

class GatewayTest : public ::testing::TestWithParam<bool> {
 protected:
  GatewayTest() {
    link::LinkCapabilities caps;
    caps.mtu = 1500;
    caps.mac = *wire::MacAddress::Parse("02:00:00:00:00:02");
    our_mac_ = caps.mac;
    link_ = std::make_unique<FakeLink>(chunks_, caps);
    stack_ = std::make_unique<Stack>(StackOptions{}, chunks_, packets_);
    nic_ = *stack_->AddNic(link_.get(), "guest0");
    EXPECT_TRUE(stack_->AddAddress(nic_, *ParseIpv4Cidr("10.0.2.2/24")).ok());
    EXPECT_TRUE(stack_->AddAddress(nic_, *ParseIpv4Cidr("10.0.2.3/32")).ok());
    EXPECT_TRUE(stack_->AddAddress(nic_, *ParseIpv6Cidr("fd00::2/64")).ok());
    if (gateway()) {
      GatewayOptions g;
      g.guest4 = A4("10.0.2.100");
      g.guest6_prefix = *ParseIpv6Cidr("fd00::/64");
      EXPECT_TRUE(stack_->SetGateway(nic_, g).ok());
    }
    stack_->SetTransport(kTcp, &tcp_);
    stack_->SetTransport(kUdp, &udp_);
    guest_.mac = *wire::MacAddress::Parse("02:00:00:00:00:64");
    guest_.ip4 = A4("10.0.2.100");
    guest_.ip6 = A6("fd00::100");
  }
  ~GatewayTest() override {
    const auto& c = stack_->counters();
    EXPECT_EQ(c.rx_frames, c.rx_consumed + c.rx_dropped_frames);
    EXPECT_EQ(c.RxDrops(), c.rx_dropped_frames);
    stack_->SetTransport(kTcp, nullptr);
    stack_->SetTransport(kUdp, nullptr);
    stack_.reset();
    link_.reset();
    EXPECT_EQ(chunks_.stats().in_use, 0u);
  }
  bool gateway() const { return GetParam(); }

  void Send4(const wire::Ipv4Address& src, const wire::Ipv4Address& dst,
             uint8_t proto, const std::vector<uint8_t>& l4,
             const wire::MacAddress* dst_mac = nullptr) {
    for (auto& p : testing::Ipv4Packets(src, dst, proto, 1, l4, 1500)) {
      link_->Inject(testing::WithEthernet(guest_.mac,
                                          dst_mac ? *dst_mac : our_mac_, kIpv4,
                                          p),
                    now_);
    }
  }
  void Send6(const wire::Ipv6Address& src, const wire::Ipv6Address& dst,
             uint8_t nh, const std::vector<uint8_t>& l4) {
    for (auto& p : testing::Ipv6Packets(src, dst, nh, 64, 1, l4, 1500)) {
      link_->Inject(testing::WithEthernet(guest_.mac, our_mac_, kIpv6, p),
                    now_);
    }
  }
  std::vector<std::vector<uint8_t>> TakeSent() {
    auto s = std::move(link_->sent);
    link_->sent.clear();
    return s;
  }
  uint64_t Drops(DropReason r) const { return stack_->counters().drop(r); }

  buffer::ChunkPool chunks_{256};
  buffer::PacketPool packets_{256};
  std::unique_ptr<FakeLink> link_;
  std::unique_ptr<Stack> stack_;
  NicId nic_ = 0;
  Recorder tcp_, udp_;
  Peer guest_;
  wire::MacAddress our_mac_;
  Instant now_ = absl::UnixEpoch() + absl::Seconds(1000);
};

const std::vector<uint8_t> kSegment(20, 0x5a);  // the recorder reads nothing

// The behaviours that exist only in gateway mode run only there (no
// skipped host-mode half).
class GatewayOnlyTest : public GatewayTest {};

// A peer's multicast to groups we have not joined (mDNS, MLD reports) is
// normal on a shared link: counted under a name that says so, apart from
// unicast that is not for us.
TEST_P(GatewayTest, MulticastToOtherGroupsIsCountedApart) {
  const wire::MacAddress mdns_mac = *wire::MacAddress::Parse("01:00:5e:00:00:fb");
  Send4(guest_.ip4, A4("224.0.0.251"), kUdp, kSegment, &mdns_mac);
  Send6(guest_.ip6, A6("ff02::16"), kUdp, kSegment);
  EXPECT_EQ(Drops(DropReason::kIpv4MulticastNotJoined), 1u);
  EXPECT_EQ(Drops(DropReason::kIpv6MulticastNotJoined), 1u);
  EXPECT_EQ(Drops(DropReason::kIpv4NotForUs), 0u);
  EXPECT_EQ(Drops(DropReason::kIpv6NotForUs), 0u);
  EXPECT_TRUE(udp_.dst4.empty());
}

TEST_P(GatewayTest, AnyDestinationReachesTheTransportOnlyInGatewayMode) {
  Send4(guest_.ip4, A4("93.184.216.34"), kTcp, kSegment);
  Send6(guest_.ip6, A6("2001:db8:7::1"), kTcp, kSegment);
  if (gateway()) {
    ASSERT_EQ(tcp_.dst4.size(), 1u);
    EXPECT_EQ(tcp_.dst4[0], A4("93.184.216.34"));
    ASSERT_EQ(tcp_.dst6.size(), 1u);
    EXPECT_EQ(tcp_.dst6[0], A6("2001:db8:7::1"));
  } else {
    EXPECT_TRUE(tcp_.dst4.empty());
    EXPECT_TRUE(tcp_.dst6.empty());
    EXPECT_EQ(Drops(DropReason::kIpv4NotForUs), 1u);
    EXPECT_EQ(Drops(DropReason::kIpv6NotForUs), 1u);
  }
}

TEST_P(GatewayOnlyTest, SpoofedSourcesNeverReachATransport) {
  // Another address of the guest's subnet, a remote address, the DNS
  // address, a martian: each dropped before TCP sees it.
  for (const char* src : {"10.0.2.55", "93.184.216.34", "10.0.2.3", "127.0.0.1",
                          "0.0.0.0"}) {
    Send4(A4(src), A4("93.184.216.34"), kTcp, kSegment);
  }
  for (const char* src : {"fd01::100", "2001:db8:7::1"}) {
    Send6(A6(src), A6("2001:db8:7::1"), kTcp, kSegment);
  }
  EXPECT_TRUE(tcp_.dst4.empty());
  EXPECT_TRUE(tcp_.dst6.empty());
  // 10.0.2.3 is ours: as spoofed as the rest.
  EXPECT_EQ(Drops(DropReason::kSpoofedSource), 7u);
  // The guest's own addresses pass: the lease, any address of its
  // prefix (SLAAC, privacy addresses), its link-local address.
  Send4(guest_.ip4, A4("93.184.216.34"), kTcp, kSegment);
  Send6(A6("fd00::1234:5678"), A6("2001:db8:7::1"), kTcp, kSegment);
  Send6(A6("fe80::64"), A6("2001:db8:7::1"), kTcp, kSegment);
  EXPECT_EQ(tcp_.dst4.size(), 1u);
  EXPECT_EQ(tcp_.dst6.size(), 2u);
}

TEST_P(GatewayOnlyTest, UnspecifiedSourceOnlyForDhcpToUs) {
  // A DHCP DISCOVER: 0.0.0.0:68 -> 255.255.255.255:67, UDP (zero
  // checksum, as RFC 768 allows).
  std::vector<uint8_t> udp = {0, 68, 0, 67, 0, 12, 0, 0, 1, 2, 3, 4};
  const wire::MacAddress bcast = wire::MacAddress::Broadcast();
  Send4(A4("0.0.0.0"), A4("255.255.255.255"), kUdp, udp, &bcast);
  EXPECT_EQ(udp_.dst4.size(), 1u);
  // The same to a remote host: spoofed.
  Send4(A4("0.0.0.0"), A4("8.8.8.8"), kUdp, udp);
  EXPECT_EQ(udp_.dst4.size(), 1u);
  EXPECT_EQ(Drops(DropReason::kSpoofedSource), 1u);
}

TEST_P(GatewayTest, OnlyOurAddressesAnswerArpAndPing) {
  // ARP for the gateway and the DNS address: answered. For another host
  // of the subnet (or beyond): silence.
  link_->Inject(testing::ArpRequest(guest_, A4("10.0.2.2")), now_);
  link_->Inject(testing::ArpRequest(guest_, A4("10.0.2.3")), now_);
  EXPECT_EQ(TakeSent().size(), 2u);
  link_->Inject(testing::ArpRequest(guest_, A4("10.0.2.50")), now_);
  EXPECT_TRUE(TakeSent().empty());
  // Ping to the gateway: answered by the stack. Ping to a host beyond:
  // never a forged reply.
  Send4(guest_.ip4, A4("10.0.2.2"), 1, testing::Icmpv4Echo(1, 1, 32));
  EXPECT_EQ(TakeSent().size(), 1u);
  Send4(guest_.ip4, A4("93.184.216.34"), 1, testing::Icmpv4Echo(1, 2, 32));
  EXPECT_TRUE(TakeSent().empty());
  Send6(guest_.ip6, A6("2001:db8:7::1"), 58,
        testing::Icmpv6Echo(guest_.ip6, A6("2001:db8:7::1"), 1, 3, 32));
  EXPECT_TRUE(TakeSent().empty());
  EXPECT_EQ(stack_->counters().icmpv4_echo_replies_sent, 1u);
}

TEST_P(GatewayOnlyTest, SendsFromAnySourceAndRefusesWithIcmp) {
  // Learn the guest's MAC.
  link_->Inject(testing::ArpRequest(guest_, A4("10.0.2.2")), now_);
  TakeSent();
  buffer::PacketPtr p = packets_.Allocate();
  ASSERT_NE(p, nullptr);
  auto hdr = p->headers().Prepend(20);
  ASSERT_TRUE(hdr.has_value());
  std::fill(hdr->begin(), hdr->end(), 0);
  wire::Ipv4Repr ip;
  ip.src = A4("93.184.216.34");
  ip.dst = guest_.ip4;
  ip.protocol = kTcp;
  ASSERT_TRUE(stack_->SendIpv4(ip, std::move(p), now_));
  stack_->Flush(now_);
  auto sent = TakeSent();
  ASSERT_EQ(sent.size(), 1u);
  wire::Ipv4Repr out;
  ASSERT_EQ(wire::Ipv4Repr::Parse(
                wire::Ipv4Packet(std::span<const uint8_t>(sent[0]).subspan(14)),
                out),
            wire::WireError::kOk);
  EXPECT_EQ(out.src, A4("93.184.216.34"));

  // A refused flow: host unreachable from the gateway, quoting the
  // guest's datagram (ports and sequence number).
  const std::vector<uint8_t> head = {0x9c, 0x40, 0, 80, 1, 2, 3, 4};
  ASSERT_TRUE(stack_->SendDestUnreachable(guest_.ip4, A4("203.0.113.9"), kTcp,
                                          head, IcmpErrorKind::kHostUnreachable,
                                          now_));
  stack_->Flush(now_);
  sent = TakeSent();
  ASSERT_EQ(sent.size(), 1u);
  const auto bytes = std::span<const uint8_t>(sent[0]).subspan(14);
  ASSERT_EQ(wire::Ipv4Repr::Parse(wire::Ipv4Packet(bytes), out),
            wire::WireError::kOk);
  EXPECT_EQ(out.src, A4("10.0.2.2"));
  EXPECT_EQ(out.dst, guest_.ip4);
  EXPECT_EQ(out.protocol, 1);
  const auto icmp = bytes.subspan(20);
  ASSERT_GE(icmp.size(), 8u + 20u + 8u);
  EXPECT_EQ(icmp[0], 3);  // destination unreachable
  EXPECT_EQ(icmp[1], 1);  // host
  // The quoted header names the guest's datagram.
  wire::Ipv4Repr quoted;
  ASSERT_EQ(wire::Ipv4Repr::Parse(wire::Ipv4Packet(icmp.subspan(8, 28)), quoted),
            wire::WireError::kOk);
  EXPECT_EQ(quoted.src, guest_.ip4);
  EXPECT_EQ(quoted.dst, A4("203.0.113.9"));
  EXPECT_TRUE(std::equal(head.begin(), head.end(), icmp.begin() + 28));
}

TEST_P(GatewayOnlyTest, IcmpErrorAboutAFlowWeRelayReachesTheTransport) {
  // The guest's kernel reports an error about a segment we sent from
  // 93.184.216.34 (a gateway's source): it concerns our flow.
  std::vector<uint8_t> inner(28, 0);
  inner[0] = 0x45;
  inner[9] = kTcp;
  const auto remote = A4("93.184.216.34");
  std::copy(remote.bytes.begin(), remote.bytes.end(), inner.begin() + 12);
  std::copy(guest_.ip4.bytes.begin(), guest_.ip4.bytes.end(), inner.begin() + 16);
  std::vector<uint8_t> icmp = {3, 3, 0, 0, 0, 0, 0, 0};
  icmp.insert(icmp.end(), inner.begin(), inner.end());
  wire::ChecksumAccumulator sum;
  sum.Add(icmp);
  const uint16_t c = sum.Checksum();
  icmp[2] = static_cast<uint8_t>(c >> 8);
  icmp[3] = static_cast<uint8_t>(c);
  Send4(guest_.ip4, A4("93.184.216.34"), 1, icmp);
  ASSERT_EQ(tcp_.errors.size(), 1u);
  EXPECT_EQ(tcp_.errors[0].src4, remote);
}

INSTANTIATE_TEST_SUITE_P(HostAndGateway, GatewayTest, ::testing::Bool(),
                         [](const auto& info) {
                           return info.param ? "Gateway" : "Host";
                         });
INSTANTIATE_TEST_SUITE_P(Gateway, GatewayOnlyTest, ::testing::Values(true),
                         [](const auto&) { return "Gateway"; });

}  // namespace
}  // namespace netstack::stack
