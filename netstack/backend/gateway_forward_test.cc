// A gateway-mode NIC hands what the guest sends to hosts beyond it to the
// backend's hooks: echo requests to the EchoHandler (the ping forwarder),
// UDP to the UDP layer's unmatched handler (the UDP flow table). Crafted
// frames, as a guest would send them; no forged reply either way.
#include <arpa/inet.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <vector>

#include "gtest/gtest.h"
#include "netstack/backend/backend.h"
#include "netstack/eventloop/event_loop.h"
#include "netstack/policy/flow_log.h"
#include "netstack/policy/policy.h"
#include "netstack/tcp/tcp_layer.h"
#include "netstack/buffer/chunk.h"
#include "netstack/buffer/packet.h"
#include "netstack/stack/fake_link.h"
#include "netstack/stack/stack.h"
#include "netstack/stack/test_frames.h"
#include "netstack/transport/notifier.h"
#include "netstack/udp/udp_layer.h"
#include "netstack/wire/checksum.h"

namespace netstack::backend {
namespace {

using stack::testing::Peer;

constexpr uint16_t kIpv4 = 0x0800;
constexpr uint16_t kIpv6 = 0x86dd;
constexpr uint8_t kUdp = 17;

wire::Ipv4Address A4(const char* s) { return *wire::Ipv4Address::Parse(s); }
wire::Ipv6Address A6(const char* s) { return *wire::Ipv6Address::Parse(s); }

class EchoRecorder : public stack::EchoHandler {
 public:
  bool OnEchoRequest(const stack::EchoRequest& r, Instant) override {
    requests.push_back(r);
    return take;
  }
  bool take = true;
  std::vector<stack::EchoRequest> requests;
};

class UnmatchedRecorder : public udp::UnmatchedDatagramHandler {
 public:
  bool OnUnmatchedDatagram(const transport::SocketAddress& src,
                           const transport::SocketAddress& dst,
                           const buffer::PayloadView& payload,
                           Instant) override {
    srcs.push_back(src);
    dsts.push_back(dst);
    sizes.push_back(payload.size());
    return true;
  }
  std::vector<transport::SocketAddress> srcs, dsts;
  std::vector<size_t> sizes;
};

// A UDP datagram with a valid checksum (`v6` picks the pseudo-header).
std::vector<uint8_t> Udp(uint16_t sport, uint16_t dport, size_t size,
                         const void* src, const void* dst, bool v6) {
  std::vector<uint8_t> u(8 + size, 0x42);
  const uint16_t len = static_cast<uint16_t>(u.size());
  u[0] = sport >> 8; u[1] = sport & 0xff;
  u[2] = dport >> 8; u[3] = dport & 0xff;
  u[4] = len >> 8;   u[5] = len & 0xff;
  u[6] = u[7] = 0;
  const uint16_t pseudo =
      v6 ? wire::Ipv6PseudoHeaderSum(
               *static_cast<const wire::Ipv6Address*>(src),
               *static_cast<const wire::Ipv6Address*>(dst), kUdp, len)
         : wire::Ipv4PseudoHeaderSum(
               *static_cast<const wire::Ipv4Address*>(src),
               *static_cast<const wire::Ipv4Address*>(dst), kUdp, len);
  // Sum of the pseudo-header (folded) and the datagram, complemented.
  std::vector<uint8_t> all(u);
  all.push_back(static_cast<uint8_t>(pseudo >> 8));
  all.push_back(static_cast<uint8_t>(pseudo & 0xff));
  if (all.size() % 2 != 0) {
    // Keep the pseudo-header word 16-bit aligned.
    all.insert(all.end() - 2, 0);
  }
  uint16_t c = wire::InternetChecksum(all);
  if (c == 0) c = 0xffff;
  u[6] = static_cast<uint8_t>(c >> 8);
  u[7] = static_cast<uint8_t>(c & 0xff);
  return u;
}

class GatewayForwardTest : public ::testing::Test {
 protected:
  GatewayForwardTest() {
    link::LinkCapabilities caps;
    caps.mtu = 1500;
    caps.mac = *wire::MacAddress::Parse("02:00:00:00:00:02");
    our_mac_ = caps.mac;
    link_ = std::make_unique<stack::FakeLink>(chunks_, caps);
    stack_ = std::make_unique<stack::Stack>(stack::StackOptions{}, chunks_,
                                            packets_);
    nic_ = *stack_->AddNic(link_.get(), "guest0");
    EXPECT_TRUE(
        stack_->AddAddress(nic_, *stack::ParseIpv4Cidr("10.0.2.2/24")).ok());
    EXPECT_TRUE(
        stack_->AddAddress(nic_, *stack::ParseIpv6Cidr("fd00::2/64")).ok());
    stack::GatewayOptions g;
    g.guest4 = A4("10.0.2.100");
    g.guest6_prefix = *stack::ParseIpv6Cidr("fd00::/64");
    EXPECT_TRUE(stack_->SetGateway(nic_, g).ok());
    udp_ = std::make_unique<udp::UdpLayer>(*stack_, chunks_, packets_,
                                           notifier_, 7);
    udp_->SetUnmatchedHandler(&unmatched_);
    stack_->SetEchoHandler(&echo_);
    guest_.mac = *wire::MacAddress::Parse("02:00:00:00:00:64");
    guest_.ip4 = A4("10.0.2.100");
    guest_.ip6 = A6("fd00::100");
  }
  ~GatewayForwardTest() override {
    stack_->SetEchoHandler(nullptr);
    udp_->SetUnmatchedHandler(nullptr);
    echo_.requests.clear();  // their data views hold chunks
    udp_.reset();
    stack_.reset();
    link_.reset();
    EXPECT_EQ(chunks_.stats().in_use, 0u);
  }
  void Send4(const wire::Ipv4Address& dst, uint8_t proto,
             const std::vector<uint8_t>& l4) {
    for (auto& p : stack::testing::Ipv4Packets(guest_.ip4, dst, proto, 1, l4,
                                               1500)) {
      link_->Inject(
          stack::testing::WithEthernet(guest_.mac, our_mac_, kIpv4, p), now_);
    }
  }
  void Send6(const wire::Ipv6Address& dst, uint8_t nh,
             const std::vector<uint8_t>& l4) {
    for (auto& p : stack::testing::Ipv6Packets(guest_.ip6, dst, nh, 64, 1, l4,
                                               1500)) {
      link_->Inject(
          stack::testing::WithEthernet(guest_.mac, our_mac_, kIpv6, p), now_);
    }
  }
  uint64_t Drops(stack::DropReason r) const {
    return stack_->counters().drop(r);
  }

  buffer::ChunkPool chunks_{256};
  buffer::PacketPool packets_{256};
  transport::Notifier notifier_;
  std::unique_ptr<stack::FakeLink> link_;
  std::unique_ptr<stack::Stack> stack_;
  std::unique_ptr<udp::UdpLayer> udp_;
  stack::NicId nic_ = 0;
  EchoRecorder echo_;
  UnmatchedRecorder unmatched_;
  Peer guest_;
  wire::MacAddress our_mac_;
  Instant now_ = absl::UnixEpoch() + absl::Seconds(1000);
};

TEST_F(GatewayForwardTest, PingToAForeignHostReachesTheEchoHandler) {
  Send4(A4("93.184.216.34"), 1, stack::testing::Icmpv4Echo(7, 1, 32));
  const wire::Ipv6Address far = A6("2001:db8:7::1");
  Send6(far, 58, stack::testing::Icmpv6Echo(guest_.ip6, far, 8, 2, 40));
  ASSERT_EQ(echo_.requests.size(), 2u);
  EXPECT_FALSE(echo_.requests[0].v6);
  EXPECT_EQ(echo_.requests[0].dst4, A4("93.184.216.34"));
  EXPECT_EQ(echo_.requests[0].src4, guest_.ip4);
  EXPECT_EQ(echo_.requests[0].id, 7);
  EXPECT_EQ(echo_.requests[0].data.size(), 32u);
  EXPECT_TRUE(echo_.requests[1].v6);
  EXPECT_EQ(echo_.requests[1].dst6, far);
  EXPECT_EQ(echo_.requests[1].seq, 2);
  EXPECT_EQ(echo_.requests[1].data.size(), 40u);
  // Taken by the handler: the stack sent nothing of its own.
  EXPECT_TRUE(link_->sent.empty());
  EXPECT_EQ(stack_->counters().icmpv4_echo_requests_handed_off, 1u);
  EXPECT_EQ(stack_->counters().icmpv6_echo_requests_handed_off, 1u);
}

TEST_F(GatewayForwardTest, PingNotTakenIsNeverForged) {
  // The handler declines (no ping socket, say): a foreign host's echo is
  // dropped, never answered by the stack; the gateway's own is answered.
  echo_.take = false;
  Send4(A4("93.184.216.34"), 1, stack::testing::Icmpv4Echo(7, 1, 32));
  const wire::Ipv6Address far = A6("2001:db8:7::1");
  Send6(far, 58, stack::testing::Icmpv6Echo(guest_.ip6, far, 8, 2, 40));
  EXPECT_EQ(echo_.requests.size(), 2u);
  EXPECT_TRUE(link_->sent.empty());
  EXPECT_EQ(Drops(stack::DropReason::kIpv4NotForUs), 1u);
  EXPECT_EQ(Drops(stack::DropReason::kIpv6NotForUs), 1u);
  Send4(A4("10.0.2.2"), 1, stack::testing::Icmpv4Echo(7, 3, 32));
  EXPECT_EQ(link_->sent.size(), 1u);
  EXPECT_EQ(stack_->counters().icmpv4_echo_replies_sent, 1u);
}

TEST_F(GatewayForwardTest, UdpToAForeignHostReachesTheUnmatchedHandler) {
  const wire::Ipv4Address far4 = A4("93.184.216.34");
  const wire::Ipv6Address far6 = A6("2001:db8:7::1");
  Send4(far4, kUdp, Udp(40000, 9999, 100, &guest_.ip4, &far4, false));
  Send6(far6, kUdp, Udp(40001, 7777, 1200, &guest_.ip6, &far6, true));
  ASSERT_EQ(unmatched_.dsts.size(), 2u);
  EXPECT_EQ(unmatched_.dsts[0].ToString(), "93.184.216.34:9999");
  EXPECT_EQ(unmatched_.srcs[0].ToString(), "10.0.2.100:40000");
  EXPECT_EQ(unmatched_.sizes[0], 100u);
  EXPECT_EQ(unmatched_.dsts[1].ToString(), "[2001:db8:7::1]:7777");
  EXPECT_EQ(unmatched_.srcs[1].ToString(), "[fd00::100]:40001");
  EXPECT_EQ(unmatched_.sizes[1], 1200u);
  EXPECT_EQ(udp_->counters().unmatched_handled, 2u);
  EXPECT_TRUE(link_->sent.empty());  // no port unreachable
}

// The whole backend (Backend::Create with a UDP layer) wires its parts
// into the same hooks: the UDP flow table behind the guest config
// services, the ping forwarder, the DNS forwarder. Nothing is sent off
// the machine: the guest only talks to the gateway address here.
class FullBackendTest : public ::testing::Test {
 protected:
  FullBackendTest() {
    link::LinkCapabilities caps;
    caps.mtu = 1500;
    caps.mac = *wire::MacAddress::Parse("02:00:00:00:00:02");
    our_mac_ = caps.mac;
    loop_ = *eventloop::EventLoop::Create();
    link_ = std::make_unique<stack::FakeLink>(chunks_, caps);
    stack_ = std::make_unique<stack::Stack>(stack::StackOptions{}, chunks_,
                                            packets_);
    nic_ = *stack_->AddNic(link_.get(), "guest0");
    tcp::TcpLayerOptions to;
    to.seed = 3;
    tcp_ = std::make_unique<tcp::TcpLayer>(*stack_, chunks_, packets_,
                                           notifier_, to);
    udp_ = std::make_unique<udp::UdpLayer>(*stack_, chunks_, packets_,
                                           notifier_, 7);
    guest_mac_ = *wire::MacAddress::Parse("02:00:00:00:00:64");
  }
  ~FullBackendTest() override {
    backend_.reset();
    udp_.reset();
    tcp_.reset();
    stack_.reset();
    link_.reset();
  }
  absl::Status Build(BackendConfig config) {
    auto b = Backend::Create(config, *stack_, nic_, *tcp_, *udp_, *loop_,
                             chunks_, packets_);
    if (!b.ok()) return b.status();
    backend_ = *std::move(b);
    return absl::OkStatus();
  }
  static BackendConfig WithUpstream() {
    BackendConfig c;
    // Never asked in these tests: the forwarder only opens its socket.
    c.policy.dns_upstreams = {*transport::SocketAddress::Parse("127.0.0.1:9")};
    return c;
  }
  void SendUdp4(const wire::Ipv4Address& dst, uint16_t port) {
    const wire::Ipv4Address src = A4("10.0.2.100");
    for (auto& p : stack::testing::Ipv4Packets(
             src, dst, kUdp, 1, Udp(40000, port, 20, &src, &dst, false),
             1500)) {
      link_->Inject(stack::testing::WithEthernet(guest_mac_, our_mac_, kIpv4,
                                                 p),
                    now_);
    }
  }

  buffer::ChunkPool chunks_{256};
  buffer::PacketPool packets_{256};
  transport::Notifier notifier_;
  std::unique_ptr<eventloop::EventLoop> loop_;
  std::unique_ptr<stack::FakeLink> link_;
  std::unique_ptr<stack::Stack> stack_;
  std::unique_ptr<tcp::TcpLayer> tcp_;
  std::unique_ptr<udp::UdpLayer> udp_;
  std::unique_ptr<Backend> backend_;
  stack::NicId nic_ = 0;
  wire::MacAddress our_mac_, guest_mac_;
  Instant now_ = absl::UnixEpoch() + absl::Seconds(1000);
};

TEST_F(FullBackendTest, NoDnsUpstreamIsAnError) {
  BackendConfig c;
  c.policy.resolv_conf = "/nonexistent/resolv.conf";
  absl::Status s = Build(c);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("--dns-upstream"), std::string::npos) << s;
}

TEST_F(FullBackendTest, WithoutDnsThereIsNoForwarderAndNoUpstreamNeeded) {
  BackendConfig c;
  c.policy.dns = false;  // libslirp's disable_dns; the C ABI's
  c.policy.resolv_conf = "/nonexistent/resolv.conf";
  ASSERT_TRUE(Build(c).ok());
  EXPECT_EQ(backend_->dns(), nullptr);
  // DNS to the DNS address finds no listener: the flow table never relays
  // the stack's own addresses either.
  SendUdp4(A4("10.0.2.3"), 53);
  EXPECT_EQ(backend_->udp_flows()->counters().refused_self, 1u);
}

TEST_F(FullBackendTest, OwnsEveryPartAndCountsThem) {
  ASSERT_TRUE(Build(WithUpstream()).ok());
  ASSERT_NE(backend_->udp_flows(), nullptr);
  ASSERT_NE(backend_->ping(), nullptr);
  ASSERT_NE(backend_->dns(), nullptr);
  ASSERT_NE(backend_->guest_config(), nullptr);
  // UDP to the gateway, port 9: past the guest config services (not a
  // DHCP port) and the UDP layer (no socket), to the flow table, which
  // never relays the stack's own address.
  SendUdp4(A4("10.0.2.2"), 9);
  EXPECT_EQ(backend_->udp_flows()->counters().refused_self, 1u);
  EXPECT_EQ(udp_->counters().unmatched_handled, 0u);
  const std::string text = backend_->FormatCounters();
  for (const char* want :
       {"backend.tcp_flows_opened 0\n", "backend.udp.refused.self 1\n",
        "backend.udp.flows_open 0\n", "backend.ping.requests 0\n",
        "backend.dns.queries.udp 0\n"}) {
    EXPECT_NE(text.find(want), std::string::npos) << want << "\n" << text;
  }
}

TEST_F(FullBackendTest, DestroyingItGivesUdpBackToTheLayer) {
  ASSERT_TRUE(Build(WithUpstream()).ok());
  backend_.reset();
  // The stack's protocol 17 handler is the UDP layer again, with no
  // unmatched handler: port unreachable territory, counted as no_port.
  const uint64_t before = udp_->counters().no_port;
  SendUdp4(A4("10.0.2.2"), 9);
  EXPECT_EQ(udp_->counters().no_port, before + 1);
}

// The egress policy in the whole backend: UDP and ping flows are judged
// to their destination, refused with administratively prohibited at
// once, and a new policy closes the open ones it denies.
class EgressFullBackendTest : public FullBackendTest {
 protected:
  absl::Status BuildWith(const char* policy_text) {
    BackendConfig c = WithUpstream();
    if (policy_text != nullptr) {
      auto pc = policy::ParsePolicyFile(policy_text);
      if (!pc.ok()) return pc.status();
      auto p = policy::Policy::Create(*std::move(pc));
      if (!p.ok()) return p.status();
      c.policy.egress = *std::move(p);
    }
    if (absl::Status s = Build(c); !s.ok()) return s;
    // The guest makes itself known (ARP, NDP), so what the stack sends it
    // goes out at once.
    Peer g;
    g.mac = guest_mac_;
    g.ip4 = A4("10.0.2.100");
    g.ip6 = A6("fd00::100");
    link_->Inject(stack::testing::ArpRequest(g, A4("10.0.2.2")), now_);
    const wire::Ipv6Address gw6 = A6("fd00::2");
    link_->Inject(stack::testing::Icmpv6NeighborSolicitation(g, gw6), now_);
    link_->sent.clear();
    return absl::OkStatus();
  }
  void SendUdp6(const wire::Ipv6Address& dst, uint16_t port) {
    const wire::Ipv6Address src = A6("fd00::100");
    for (auto& p : stack::testing::Ipv6Packets(
             src, dst, kUdp, 64, 1, Udp(40000, port, 20, &src, &dst, true),
             1500)) {
      link_->Inject(
          stack::testing::WithEthernet(guest_mac_, our_mac_, kIpv6, p), now_);
    }
  }
  void Ping4(const wire::Ipv4Address& dst) {
    for (auto& p : stack::testing::Ipv4Packets(
             A4("10.0.2.100"), dst, 1, 1, stack::testing::Icmpv4Echo(9, 1, 32),
             1500)) {
      link_->Inject(
          stack::testing::WithEthernet(guest_mac_, our_mac_, kIpv4, p), now_);
    }
  }
  // The ICMP (IPv4) or ICMPv6 messages sent to the guest so far, taken.
  std::vector<std::vector<uint8_t>> TakeIcmp() {
    std::vector<std::vector<uint8_t>> out;
    for (const auto& f : link_->sent) {
      if (f.size() < 14) continue;
      const uint16_t type = static_cast<uint16_t>(f[12] << 8 | f[13]);
      if (type == kIpv4 && f.size() >= 34 && f[14 + 9] == 1) {
        const size_t ihl = size_t{f[14] & 0x0fu} * 4;
        out.emplace_back(f.begin() + 14 + ihl, f.end());
      } else if (type == kIpv6 && f.size() >= 54 && f[14 + 6] == 58 &&
                 f[54] < 128) {  // an error, not NDP
        out.emplace_back(f.begin() + 54, f.end());
      }
    }
    link_->sent.clear();
    return out;
  }
  uint64_t Refused(policy::Reason r) const {
    return backend_->counters().policy_refused[static_cast<size_t>(r)];
  }
};

// 192.0.2.1 on lo (this test's own namespace; isolated_netns_test_env).
void AddLoopbackAddress(const char* label, const char* addr) {
  const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  ifreq ifr{};
  std::strncpy(ifr.ifr_name, label, IFNAMSIZ - 1);
  auto* sin = reinterpret_cast<sockaddr_in*>(&ifr.ifr_addr);
  sin->sin_family = AF_INET;
  ASSERT_EQ(inet_pton(AF_INET, addr, &sin->sin_addr), 1);
  const int rc = ioctl(fd, SIOCSIFADDR, &ifr);
  const int err = errno;
  if (rc == 0) {
    inet_pton(AF_INET, "255.255.255.255", &sin->sin_addr);
    EXPECT_EQ(ioctl(fd, SIOCSIFNETMASK, &ifr), 0);
  }
  close(fd);
  ASSERT_TRUE(rc == 0 || err == EEXIST) << std::strerror(err);
}

TEST_F(EgressFullBackendTest, MetadataUdpAndPingAreRefusedInOpenMode) {
  ASSERT_TRUE(BuildWith(nullptr).ok());  // no policy: the open one
  SendUdp4(A4("169.254.169.254"), 80);
  std::vector<std::vector<uint8_t>> icmp = TakeIcmp();
  ASSERT_EQ(icmp.size(), 1u);
  EXPECT_EQ(icmp[0][0], 3);
  EXPECT_EQ(icmp[0][1], 13);
  EXPECT_EQ(icmp[0][8 + 9], kUdp);  // quoting the datagram
  EXPECT_EQ(icmp[0][8 + 20 + 2] << 8 | icmp[0][8 + 20 + 3], 80);
  SendUdp6(A6("fd00:ec2::254"), 80);
  icmp = TakeIcmp();
  ASSERT_EQ(icmp.size(), 1u);
  EXPECT_EQ(icmp[0][0], 1);
  EXPECT_EQ(icmp[0][1], 1);
  Ping4(A4("169.254.169.254"));
  icmp = TakeIcmp();
  ASSERT_EQ(icmp.size(), 1u);
  EXPECT_EQ(icmp[0][0], 3);
  EXPECT_EQ(icmp[0][1], 13);
  EXPECT_EQ(icmp[0][8 + 9], 1);       // quoting the echo request
  EXPECT_EQ(icmp[0][8 + 20], 8);
  EXPECT_EQ(backend_->udp_flows()->size(), 0u);
  EXPECT_EQ(backend_->ping()->size(), 0u);
  EXPECT_EQ(backend_->udp_flows()->counters().refused_policy, 2u);
  EXPECT_EQ(backend_->ping()->counters().refused_policy, 1u);
  EXPECT_EQ(Refused(policy::Reason::kMetadata), 3u);
  EXPECT_EQ(backend_->counters().policy_refused_protocol[1], 2u);
  EXPECT_EQ(backend_->counters().policy_refused_protocol[2], 1u);
}

TEST_F(EgressFullBackendTest, DeniedPingIsAdminProhibitedAndAllowedUdpFlows) {
  AddLoopbackAddress("lo:1", "192.0.2.1");
  ASSERT_TRUE(BuildWith("allow udp:192.0.2.0/24\n").ok());
  Ping4(A4("192.0.2.1"));  // udp: only
  std::vector<std::vector<uint8_t>> icmp = TakeIcmp();
  ASSERT_EQ(icmp.size(), 1u);
  EXPECT_EQ(icmp[0][1], 13);
  EXPECT_EQ(Refused(policy::Reason::kNotAllowed), 1u);
  SendUdp4(A4("192.0.2.1"), 5000);  // no one listens: fine, it is UDP
  EXPECT_TRUE(TakeIcmp().empty());
  EXPECT_EQ(backend_->udp_flows()->size(), 1u);
  EXPECT_EQ(backend_->counters().policy_allowed, 1u);
}

TEST_F(EgressFullBackendTest, PolicyChangeClosesTheUdpFlowsItDenies) {
  AddLoopbackAddress("lo:1", "192.0.2.1");
  ASSERT_TRUE(BuildWith(nullptr).ok());
  const int server = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(5353);
  inet_pton(AF_INET, "192.0.2.1", &a.sin_addr);
  ASSERT_EQ(bind(server, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  SendUdp4(A4("192.0.2.1"), 5353);
  char b[64];
  EXPECT_EQ(recv(server, b, sizeof(b), MSG_DONTWAIT), 20);
  ASSERT_EQ(backend_->udp_flows()->size(), 1u);
  // Still allowed: untouched.
  EXPECT_EQ(backend_->SetEgressPolicy(nullptr), 0u);
  EXPECT_EQ(backend_->udp_flows()->size(), 1u);
  auto pc = policy::ParsePolicyFile("deny udp:192.0.2.1\n");
  ASSERT_TRUE(pc.ok());
  auto p = policy::Policy::Create(*std::move(pc));
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(backend_->SetEgressPolicy(*p), 1u);
  EXPECT_EQ(backend_->udp_flows()->size(), 0u);
  EXPECT_EQ(backend_->counters().policy_reset_on_change, 1u);
  EXPECT_EQ(backend_->udp_flows()->counters().closed_policy, 1u);
  // The next datagram is a new flow, refused.
  SendUdp4(A4("192.0.2.1"), 5353);
  std::vector<std::vector<uint8_t>> icmp = TakeIcmp();
  ASSERT_EQ(icmp.size(), 1u);
  EXPECT_EQ(icmp[0][1], 13);
  EXPECT_EQ(recv(server, b, sizeof(b), MSG_DONTWAIT), -1);
  close(server);
}

// A DNS query (A, RD) for `name` with id `id`.
std::vector<uint8_t> DnsQuery(uint16_t id, const std::string& name) {
  std::vector<uint8_t> q = {static_cast<uint8_t>(id >> 8),
                            static_cast<uint8_t>(id & 0xff), 0x01, 0x00, 0, 1,
                            0, 0, 0, 0, 0, 0};
  size_t start = 0;
  while (start < name.size()) {
    size_t dot = name.find('.', start);
    if (dot == std::string::npos) dot = name.size();
    q.push_back(static_cast<uint8_t>(dot - start));
    q.insert(q.end(), name.begin() + start, name.begin() + dot);
    start = dot + 1;
  }
  q.insert(q.end(), {0, 0, 1, 0, 1});
  return q;
}

// The DNS forwarder answers from the backend's policy and pins into the
// backend's table: a name rule admits the address its answer gave, and
// only then.
TEST_F(EgressFullBackendTest, DnsAnswersPinAddressesForNameRules) {
  AddLoopbackAddress("lo:1", "192.0.2.1");
  // A stand-in upstream on 127.0.0.1 that answers every A query with
  // 192.0.2.1, TTL 30.
  const int up = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  sockaddr_in ua{};
  ua.sin_family = AF_INET;
  inet_pton(AF_INET, "127.0.0.1", &ua.sin_addr);
  ASSERT_EQ(bind(up, reinterpret_cast<sockaddr*>(&ua), sizeof(ua)), 0);
  socklen_t ulen = sizeof(ua);
  getsockname(up, reinterpret_cast<sockaddr*>(&ua), &ulen);
  BackendConfig c;
  c.policy.dns_upstreams = {*transport::SocketAddress::Parse(
      "127.0.0.1:" + std::to_string(ntohs(ua.sin_port)))};
  auto pc = policy::ParsePolicyFile("allow example.test\n");
  ASSERT_TRUE(pc.ok());
  auto pol = policy::Policy::Create(*std::move(pc));
  ASSERT_TRUE(pol.ok());
  c.policy.egress = *pol;
  ASSERT_TRUE(Build(c).ok());
  Peer g;
  g.mac = guest_mac_;
  g.ip4 = A4("10.0.2.100");
  g.ip6 = A6("fd00::100");
  link_->Inject(stack::testing::ArpRequest(g, A4("10.0.2.2")), now_);
  link_->sent.clear();

  // Unpinned: the name rule admits nothing yet.
  SendUdp4(A4("192.0.2.1"), 5000);
  ASSERT_EQ(TakeIcmp().size(), 1u);
  EXPECT_EQ(backend_->udp_flows()->size(), 0u);

  const wire::Ipv4Address src = A4("10.0.2.100"), dns = A4("10.0.2.3");
  auto send_query = [&](uint16_t id, const std::string& name) {
    const std::vector<uint8_t> q = DnsQuery(id, name);
    std::vector<uint8_t> u = Udp(40053, 53, q.size(), &src, &dns, false);
    // Udp() fills the payload with 0x42: the query goes in its place,
    // with no checksum (allowed over IPv4).
    std::copy(q.begin(), q.end(), u.begin() + 8);
    u[6] = u[7] = 0;
    for (auto& p : stack::testing::Ipv4Packets(src, dns, kUdp, 1, u, 1500)) {
      link_->Inject(
          stack::testing::WithEthernet(guest_mac_, our_mac_, kIpv4, p), now_);
    }
  };
  // A name no rule allows: NXDOMAIN from the forwarder, nothing upstream,
  // and a line in the flow log.
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string path =
      std::string(tmp != nullptr ? tmp : "/tmp") + "/gateway_dns_flows.log";
  std::remove(path.c_str());
  policy::FlowLog::Options lo;
  lo.path = path;
  auto log = policy::FlowLog::Open(lo, loop_->Now());
  ASSERT_TRUE(log.ok()) << log.status();
  backend_->SetFlowLog(log->get());
  send_query(0x1111, "denied.test");
  std::optional<std::vector<uint8_t>> reply;
  auto take_dns_reply = [&]() -> std::optional<std::vector<uint8_t>> {
    for (const auto& f : link_->sent) {
      if (f.size() > 14 + 20 + 8 + 12 && f[12] == 0x08 && f[13] == 0 &&
          f[14 + 9] == kUdp) {
        const size_t ihl = size_t{f[14] & 0x0fu} * 4;
        std::vector<uint8_t> m(f.begin() + 14 + ihl + 8, f.end());
        link_->sent.clear();
        return m;
      }
    }
    return std::nullopt;
  };
  for (int i = 0; i < 100 && !(reply = take_dns_reply()); ++i) {
    (void)loop_->RunOnce(absl::Milliseconds(10));
    notifier_.Dispatch();
    stack_->Flush(loop_->Now());
  }
  ASSERT_TRUE(reply.has_value());
  EXPECT_EQ((*reply)[0] << 8 | (*reply)[1], 0x1111);
  EXPECT_EQ((*reply)[3] & 0x0f, 3);  // NXDOMAIN
  uint8_t buf[512];
  EXPECT_EQ(recv(up, buf, sizeof(buf), MSG_DONTWAIT), -1);
  backend_->SetFlowLog(nullptr);
  log->reset();  // flushes
  {
    std::FILE* f = std::fopen(path.c_str(), "r");
    ASSERT_NE(f, nullptr);
    char line[1024] = {};
    ASSERT_NE(std::fgets(line, sizeof(line), f), nullptr);
    std::fclose(f);
    const std::string l(line);
    EXPECT_NE(l.find("\"name\":\"denied.test\""), std::string::npos) << l;
    EXPECT_NE(l.find("\"verdict\":\"deny\""), std::string::npos) << l;
    // The guest's address and the port it asked from (send_query's).
    EXPECT_NE(l.find("\"src\":\"10.0.2.100:40053\""), std::string::npos)
        << l;
  }

  // The allowed name: asked upstream, answered, pinned.
  send_query(0x2222, "example.test");
  ssize_t n = -1;
  sockaddr_in from{};
  socklen_t flen = sizeof(from);
  for (int i = 0; i < 100 && n < 0; ++i) {
    (void)loop_->RunOnce(absl::Milliseconds(10));
    notifier_.Dispatch();
    stack_->Flush(loop_->Now());
    n = recvfrom(up, buf, sizeof(buf), MSG_DONTWAIT,
                 reinterpret_cast<sockaddr*>(&from), &flen);
  }
  ASSERT_GT(n, 12);
  std::vector<uint8_t> ans(buf, buf + n);
  ans[2] = 0x81;
  ans[3] = 0x80;  // QR, RD, RA, NOERROR
  ans[7] = 1;     // one answer
  ans.insert(ans.end(), {0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 30, 0, 4, 192, 0,
                         2, 1});
  ASSERT_EQ(sendto(up, ans.data(), ans.size(), 0,
                   reinterpret_cast<sockaddr*>(&from), flen),
            static_cast<ssize_t>(ans.size()));
  reply.reset();
  for (int i = 0; i < 100 && !(reply = take_dns_reply()); ++i) {
    (void)loop_->RunOnce(absl::Milliseconds(10));
    notifier_.Dispatch();
    stack_->Flush(loop_->Now());
  }
  ASSERT_TRUE(reply.has_value());
  EXPECT_EQ((*reply)[3] & 0x0f, 0);
  const std::optional<std::string_view> pinned = backend_->pins().Find(
      transport::IpAddress(A4("192.0.2.1")), loop_->Now());
  ASSERT_TRUE(pinned.has_value());
  EXPECT_EQ(*pinned, "example.test");

  // Now the name rule admits the address.
  SendUdp4(A4("192.0.2.1"), 5000);
  EXPECT_TRUE(TakeIcmp().empty());
  EXPECT_EQ(backend_->udp_flows()->size(), 1u);
  EXPECT_EQ(backend_->counters().policy_allowed, 1u);
  close(up);
}

}  // namespace
}  // namespace netstack::backend
