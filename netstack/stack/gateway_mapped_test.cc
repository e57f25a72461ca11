// Gateway mode: IPv6 destinations that embed an IPv4 address
// (IPv4-mapped ::ffff:0:0/96, IPv4-compatible ::/96) are dropped before any
// transport sees them. An AF_INET6 host socket connected to
// ::ffff:127.0.0.1 talks IPv4 to the host's loopback, and ::ffff:0.0.0.0
// is 0.0.0.0, which Linux also takes as the loopback: the review of
// 2026-12-06 (finding 3) reached the host's 127.0.0.1 over UDP that way,
// with host loopback off. A guest's kernel never puts these addresses on
// the wire (RFC 4291 2.5.5; RFC 6890 marks ::ffff:0:0/96 not forwardable);
// only a crafted frame (AF_PACKET, a raw socket, a VM's own NIC) does.
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "gtest/gtest.h"
#include "netstack/stack/fake_link.h"
#include "netstack/stack/stack.h"
#include "netstack/stack/test_frames.h"
#include "netstack/wire/bytes.h"
#include "netstack/wire/checksum.h"
#include "netstack/wire/ipv6.h"

namespace netstack::stack {
namespace {

constexpr uint16_t kIpv6 = 0x86dd;
constexpr uint8_t kTcp = 6;
constexpr uint8_t kUdp = 17;

wire::Ipv6Address A6(const char* s) { return *wire::Ipv6Address::Parse(s); }

// Records the destinations that reach a transport.
class Recorder : public TransportHandler {
 public:
  std::optional<DropReason> Deliver(const Ipv4Datagram&, Instant) override {
    return std::nullopt;
  }
  std::optional<DropReason> Deliver(const Ipv6Datagram& d, Instant) override {
    dst6.push_back(d.ip.dst);
    return std::nullopt;
  }
  void OnIcmpError(const IcmpError&, Instant) override {}
  std::vector<wire::Ipv6Address> dst6;
};

class GatewayMappedTest : public ::testing::Test {
 protected:
  GatewayMappedTest() {
    link::LinkCapabilities caps;
    caps.mtu = 1500;
    caps.mac = *wire::MacAddress::Parse("02:00:00:00:00:02");
    our_mac_ = caps.mac;
    link_ = std::make_unique<FakeLink>(chunks_, caps);
    stack_ = std::make_unique<Stack>(StackOptions{}, chunks_, packets_);
    nic_ = *stack_->AddNic(link_.get(), "guest0");
    EXPECT_TRUE(stack_->AddAddress(nic_, *ParseIpv4Cidr("10.0.2.2/24")).ok());
    EXPECT_TRUE(stack_->AddAddress(nic_, *ParseIpv6Cidr("fd00::2/64")).ok());
    GatewayOptions g;
    g.guest4 = *wire::Ipv4Address::Parse("10.0.2.100");
    g.guest6_prefix = *ParseIpv6Cidr("fd00::/64");
    EXPECT_TRUE(stack_->SetGateway(nic_, g).ok());
    stack_->SetTransport(kTcp, &tcp_);
    stack_->SetTransport(kUdp, &udp_);
    guest_mac_ = *wire::MacAddress::Parse("02:00:00:00:00:64");
  }
  ~GatewayMappedTest() override {
    const auto& c = stack_->counters();
    EXPECT_EQ(c.rx_frames, c.rx_consumed + c.rx_dropped_frames);
    stack_->SetTransport(kTcp, nullptr);
    stack_->SetTransport(kUdp, nullptr);
    stack_.reset();
    link_.reset();
    EXPECT_EQ(chunks_.stats().in_use, 0u);
  }

  // One IPv6 packet from the guest to `dst` carrying `l4` as `nh`.
  void Send6(const wire::Ipv6Address& dst, uint8_t nh,
             const std::vector<uint8_t>& l4) {
    for (auto& p : testing::Ipv6Packets(guest6_, dst, nh, 64, 1, l4, 1500)) {
      link_->Inject(testing::WithEthernet(guest_mac_, our_mac_, kIpv6, p),
                    now_);
    }
  }
  // A UDP datagram 40000 -> `port` with a valid checksum, so that only the
  // destination decides its fate.
  void SendUdp(const wire::Ipv6Address& dst, uint16_t port) {
    std::vector<uint8_t> udp = {0x9c, 0x40, 0, 0, 0, 12, 0, 0, 'p', 'o', 'c',
                                '!'};
    wire::StoreBe16(&udp[2], port);
    wire::ChecksumAccumulator sum;
    sum.AddFolded(wire::Ipv6PseudoHeaderSum(guest6_, dst, kUdp,
                                            static_cast<uint32_t>(udp.size())));
    sum.Add(udp);
    uint16_t c = sum.Checksum();
    if (c == 0) c = 0xffff;
    wire::StoreBe16(&udp[6], c);
    Send6(dst, kUdp, udp);
  }
  uint64_t Drops(DropReason r) const { return stack_->counters().drop(r); }

  buffer::ChunkPool chunks_{256};
  buffer::PacketPool packets_{256};
  std::unique_ptr<FakeLink> link_;
  std::unique_ptr<Stack> stack_;
  NicId nic_ = 0;
  Recorder tcp_, udp_;
  wire::MacAddress our_mac_, guest_mac_;
  const wire::Ipv6Address guest6_ = A6("fd00::100");
  Instant now_ = absl::UnixEpoch() + absl::Seconds(1000);
};

const std::vector<uint8_t> kSegment(20, 0x5a);  // the recorder reads nothing

TEST_F(GatewayMappedTest, Ipv4MappedAndCompatibleDestinationsNeverReachUdp) {
  // The review's two (the host's 127.0.0.1, and 0.0.0.0, which Linux
  // takes as it), a remote IPv4 host, and the same as IPv4-compatible.
  const char* kDestinations[] = {"::ffff:127.0.0.1", "::ffff:0.0.0.0",
                                 "::ffff:93.184.216.34", "::7f00:1",
                                 "::5db8:d822"};
  for (const char* d : kDestinations) SendUdp(A6(d), 5555);
  EXPECT_TRUE(udp_.dst6.empty());
  EXPECT_EQ(Drops(DropReason::kIpv6MappedDestination), 5u);
  EXPECT_EQ(Drops(DropReason::kIpv6NotForUs), 0u);
  EXPECT_TRUE(link_->sent.empty()) << "dropped silently, as a martian";
}

TEST_F(GatewayMappedTest, Ipv4MappedDestinationsNeverReachTcp) {
  Send6(A6("::ffff:127.0.0.1"), kTcp, kSegment);
  Send6(A6("::7f00:1"), kTcp, kSegment);
  EXPECT_TRUE(tcp_.dst6.empty());
  EXPECT_EQ(Drops(DropReason::kIpv6MappedDestination), 2u);
}

// What stays forwarded: global addresses, NAT64's well-known prefix (the
// host decides), and the reasons :: and ::1 always had.
TEST_F(GatewayMappedTest, OtherDestinationsAreUnchanged) {
  SendUdp(A6("2001:db8:7::1"), 5555);
  SendUdp(A6("64:ff9b::7f00:1"), 5555);
  ASSERT_EQ(udp_.dst6.size(), 2u);
  EXPECT_EQ(udp_.dst6[0], A6("2001:db8:7::1"));
  EXPECT_EQ(udp_.dst6[1], A6("64:ff9b::7f00:1"));
  SendUdp(A6("::1"), 5555);
  SendUdp(A6("::"), 5555);
  EXPECT_EQ(udp_.dst6.size(), 2u);
  EXPECT_EQ(Drops(DropReason::kIpv6NotForUs), 2u);
  EXPECT_EQ(Drops(DropReason::kIpv6MappedDestination), 0u);
}

}  // namespace
}  // namespace netstack::stack
