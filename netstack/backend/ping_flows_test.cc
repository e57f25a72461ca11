// PingForwarder against the kernel's ping sockets. The test runs in a
// network namespace of its own (isolated_netns_test_env: unshare, as
// root) with only `lo`, so it
// can set net.ipv4.ping_group_range both ways and nothing leaves it. The
// guest is the fixture's peer; the stack carries 127.0.0.1, ::1 and an
// unroutable address as extra addresses so the guest's echoes to them
// reach the echo hook.
#include "netstack/backend/ping_flows.h"

#include <fcntl.h>
#include <net/if.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <set>
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "netstack/eventloop/event_loop.h"
#include "netstack/stack/test_frames.h"
#include "netstack/udp/udp_test_fixture.h"
#include "netstack/wire/bytes.h"
#include "netstack/wire/checksum.h"
#include "netstack/wire/icmpv6.h"

namespace netstack::backend {
namespace {

using transport::IpAddress;
using udp::testing::ParseSent;
using udp::testing::SentFrame;

const IpAddress kLo4 = *IpAddress::Parse("127.0.0.1");
const IpAddress kLo6 = *IpAddress::Parse("::1");
// Nothing routes there inside the test's namespace.
const IpAddress kNowhere = *IpAddress::Parse("10.255.255.1");

void SetPingGroupRange(const char* range) {
  std::ofstream("/proc/sys/net/ipv4/ping_group_range") << range;
}

class PingFlowsTest : public udp::testing::UdpFixture {
 protected:
  PingFlowsTest() {
    loop_ = std::move(*eventloop::EventLoop::Create());
    now_ = loop_->Now();
    EXPECT_TRUE(stack_->AddAddress(nic_, stack::Ipv4Cidr{kLo4.v4(), 32}).ok());
    EXPECT_TRUE(stack_->AddAddress(nic_, stack::Ipv4Cidr{kNowhere.v4(), 32}).ok());
    EXPECT_TRUE(stack_->AddAddress(nic_, stack::Ipv6Cidr{kLo6.v6(), 128}).ok());
    LearnPeer();
  }
  void SetUp() override {
    SetPingGroupRange("0 2147483647");
    PingOptions o;
    o.self_addresses = {IpAddress(our_ip4_), IpAddress(our_ip6_)};
    fwd_ = std::make_unique<PingForwarder>(*stack_, chunks_, packets_, *loop_, o);
  }
  void Ping(const IpAddress& dst, uint16_t id, uint16_t seq, size_t size) {
    if (dst.is_v4()) {
      InjectL4(IpAddress(peer_.ip4), dst, stack::testing::Icmpv4Echo(id, seq, size),
               nullptr, 1);
    } else {
      InjectL4(IpAddress(peer_.ip6), dst,
               stack::testing::Icmpv6Echo(peer_.ip6, dst.v6(), id, seq, size),
               nullptr, 58);
    }
  }
  // The ICMP messages the guest got within `wait` (IPv4 fragments put
  // together), with their IP source.
  struct Got {
    IpAddress src;
    std::vector<uint8_t> icmp;
  };
  std::vector<Got> Replies(size_t n, absl::Duration wait = absl::Seconds(2)) {
    std::vector<Got> out;
    std::vector<uint8_t> pending;
    const Instant until = loop_->Now() + wait;
    while (out.size() < n && loop_->Now() < until) {
      (void)loop_->RunOnce(absl::Milliseconds(20));
      for (const auto& f : TakeSent()) {
        SentFrame s = ParseSent(f);
        if (s.is_v4) {
          const size_t off = s.ip4.fragment_offset;
          if (pending.size() < off + s.l4.size()) pending.resize(off + s.l4.size());
          std::copy(s.l4.begin(), s.l4.end(), pending.begin() + off);
          if (s.ip4.more_fragments) continue;
          EXPECT_EQ(s.protocol, 1);
          out.push_back({IpAddress(s.ip4.src), std::move(pending)});
          pending.clear();
        } else {
          EXPECT_EQ(s.protocol, 58);
          out.push_back({IpAddress(s.ip6.src), std::move(s.l4)});
        }
      }
    }
    return out;
  }
  bool ChecksumOk(const Got& g) const {
    if (g.src.is_v4()) return wire::InternetChecksum(g.icmp) == 0;
    return wire::Icmpv6Packet(g.icmp).ChecksumValid(g.src.v6(), peer_.ip6);
  }

  std::unique_ptr<eventloop::EventLoop> loop_;
  std::unique_ptr<PingForwarder> fwd_;
};

TEST_F(PingFlowsTest, EchoesGoThroughPingSocketsWithTheGuestsIdAndData) {
  for (const IpAddress& dst : {kLo4, kLo6}) {
    for (uint16_t seq = 1; seq <= 3; ++seq) {
      SCOPED_TRACE(dst.ToString() + " seq " + std::to_string(seq));
      const size_t size = seq == 3 && dst.is_v4() ? 3000 : 56;
      Ping(dst, 0x4242, seq, size);
      std::vector<Got> got = Replies(1);
      ASSERT_EQ(got.size(), 1u);
      const Got& g = got[0];
      EXPECT_EQ(g.src, dst);
      ASSERT_EQ(g.icmp.size(), 8 + size);
      EXPECT_EQ(g.icmp[0], dst.is_v4() ? 0 : 129);
      EXPECT_EQ(wire::LoadBe16(&g.icmp[4]), 0x4242);
      EXPECT_EQ(wire::LoadBe16(&g.icmp[6]), seq);
      const auto req =
          dst.is_v4() ? stack::testing::Icmpv4Echo(0x4242, seq, size)
                      : stack::testing::Icmpv6Echo(peer_.ip6, dst.v6(), 0x4242,
                                                   seq, size);
      EXPECT_TRUE(std::equal(req.begin() + 8, req.end(), g.icmp.begin() + 8));
      EXPECT_TRUE(ChecksumOk(g));
    }
  }
  EXPECT_EQ(fwd_->counters().opened, 2u);
  EXPECT_EQ(fwd_->counters().replies, 6u);
  // The stack itself answered none of them.
  EXPECT_EQ(stack_->counters().icmpv4_echo_replies_sent, 0u);
  EXPECT_EQ(stack_->counters().icmpv6_echo_replies_sent, 0u);
  EXPECT_EQ(stack_->counters().icmpv4_echo_requests_handed_off, 3u);
}

TEST_F(PingFlowsTest, TwoGuestIdsAreTwoFlowsAndEachGetsItsOwnId) {
  Ping(kLo4, 1, 10, 8);
  Ping(kLo4, 2, 20, 8);
  std::vector<Got> got = Replies(2);
  ASSERT_EQ(got.size(), 2u);
  std::set<std::pair<uint16_t, uint16_t>> ids;
  for (const Got& g : got) {
    ids.emplace(wire::LoadBe16(&g.icmp[4]), wire::LoadBe16(&g.icmp[6]));
  }
  EXPECT_EQ(ids, (std::set<std::pair<uint16_t, uint16_t>>{{1, 10}, {2, 20}}));
  EXPECT_EQ(fwd_->size(), 2u);
}

TEST_F(PingFlowsTest, OurOwnAddressesAreAnsweredByTheStack) {
  Ping(IpAddress(our_ip4_), 5, 1, 8);
  std::vector<Got> got = Replies(1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].src, IpAddress(our_ip4_));
  EXPECT_EQ(fwd_->counters().requests, 0u);
  EXPECT_EQ(stack_->counters().icmpv4_echo_replies_sent, 1u);
}

TEST_F(PingFlowsTest, NoRouteMeansNoAnswerNeverAForgedOne) {
  Ping(kNowhere, 9, 1, 8);
  EXPECT_TRUE(Replies(1, absl::Milliseconds(300)).empty());
  EXPECT_EQ(fwd_->counters().refused_connect, 1u);
  EXPECT_EQ(stack_->counters().icmpv4_echo_replies_sent, 0u);
}

TEST_F(PingFlowsTest, ForbiddenPingSocketsAreCountedAndUnanswered) {
  SetPingGroupRange("1 0");
  for (uint16_t seq = 1; seq <= 3; ++seq) Ping(kLo4, 3, seq, 8);
  EXPECT_TRUE(Replies(1, absl::Milliseconds(300)).empty());
  EXPECT_EQ(fwd_->counters().refused_forbidden, 3u);
  EXPECT_EQ(fwd_->size(), 0u);
  EXPECT_EQ(stack_->counters().icmpv4_echo_replies_sent, 0u);
}

TEST_F(PingFlowsTest, IdleFlowsClose) {
  Ping(kLo6, 4, 1, 8);
  ASSERT_EQ(Replies(1).size(), 1u);
  EXPECT_EQ(fwd_->size(), 1u);
  fwd_->Poll(loop_->Now() + absl::Seconds(61));
  EXPECT_EQ(fwd_->size(), 0u);
  EXPECT_EQ(fwd_->counters().closed_idle, 1u);
}

// The egress policy's hooks (PingOptions::admit, closed; the Backend
// wires them to the policy).
class PingPolicyTest : public PingFlowsTest {
 protected:
  void Remake(PingOptions o) {
    fwd_.reset();
    o.self_addresses = {IpAddress(our_ip4_), IpAddress(our_ip6_)};
    fwd_ = std::make_unique<PingForwarder>(*stack_, chunks_, packets_, *loop_,
                                           o);
  }
};

TEST_F(PingPolicyTest, RefusedEchoIsAnsweredAdminProhibitedQuotingIt) {
  PingOptions o;
  o.admit = [](const transport::SocketAddress&,
               const transport::SocketAddress& peer, Instant) {
    EXPECT_EQ(peer.port, 0);
    return false;
  };
  Remake(o);
  for (const IpAddress& dst : {kLo4, kLo6}) {
    SCOPED_TRACE(dst.ToString());
    const std::vector<uint8_t> echo =
        dst.is_v4() ? stack::testing::Icmpv4Echo(0x77, 5, 56)
                    : stack::testing::Icmpv6Echo(peer_.ip6, dst.v6(), 0x77, 5,
                                                 56);
    Ping(dst, 0x77, 5, 56);
    // At once: the answer is already on the link, no loop turn needed.
    std::vector<std::vector<uint8_t>> frames = TakeSent();
    ASSERT_EQ(frames.size(), 1u);
    SentFrame f = ParseSent(frames[0]);
    const std::vector<uint8_t>& icmp = f.l4;
    size_t quoted_l4;
    if (dst.is_v4()) {
      ASSERT_EQ(f.protocol, 1);
      EXPECT_EQ(icmp[0], 3);
      EXPECT_EQ(icmp[1], 13);
      ASSERT_GE(icmp.size(), 8u + 20 + 8);
      EXPECT_EQ(icmp[8 + 9], 1);  // the quoted datagram is ICMP
      EXPECT_TRUE(std::equal(icmp.begin() + 8 + 16, icmp.begin() + 8 + 20,
                             dst.v4().bytes.begin()));
      quoted_l4 = 8 + 20;
      EXPECT_EQ(wire::InternetChecksum(icmp), 0);
    } else {
      ASSERT_EQ(f.protocol, 58);
      EXPECT_EQ(icmp[0], 1);
      EXPECT_EQ(icmp[1], 1);
      ASSERT_GE(icmp.size(), 8u + 40 + 8);
      EXPECT_EQ(icmp[8 + 6], 58);
      EXPECT_TRUE(std::equal(icmp.begin() + 8 + 24, icmp.begin() + 8 + 40,
                             dst.v6().bytes.begin()));
      quoted_l4 = 8 + 40;
      EXPECT_TRUE(wire::Icmpv6Packet(icmp).ChecksumValid(f.ip6.src, peer_.ip6));
    }
    // The request's first 8 bytes, as the guest sent them: type, code,
    // checksum, id, sequence.
    EXPECT_TRUE(std::equal(echo.begin(), echo.begin() + 8,
                           icmp.begin() + quoted_l4));
  }
  EXPECT_EQ(fwd_->size(), 0u);
  EXPECT_EQ(fwd_->counters().refused_policy, 2u);
  EXPECT_EQ(fwd_->counters().opened, 0u);
}

TEST_F(PingPolicyTest, AdmittedFlowIsAskedOnceAndClosesOnAPolicyChange) {
  PingOptions o;
  int asked = 0;
  std::vector<std::pair<uint64_t, uint64_t>> closed;
  o.admit = [&](const transport::SocketAddress&,
                const transport::SocketAddress&, Instant) {
    ++asked;
    return true;
  };
  o.closed = [&](const transport::SocketAddress&,
                 const transport::SocketAddress&, uint64_t out, uint64_t in,
                 Instant) { closed.push_back({out, in}); };
  Remake(o);
  for (uint16_t seq = 1; seq <= 2; ++seq) {
    Ping(kLo4, 8, seq, 56);
    ASSERT_EQ(Replies(1).size(), 1u);
  }
  Ping(kLo6, 8, 1, 16);
  ASSERT_EQ(Replies(1).size(), 1u);
  EXPECT_EQ(asked, 2);
  EXPECT_EQ(fwd_->CloseIf([&](const transport::SocketAddress&,
                              const transport::SocketAddress& peer) {
              return peer.ip == kLo4;
            }),
            1u);
  EXPECT_EQ(fwd_->size(), 1u);
  EXPECT_EQ(fwd_->counters().closed_policy, 1u);
  ASSERT_EQ(closed.size(), 1u);
  EXPECT_EQ(closed[0], (std::pair<uint64_t, uint64_t>{112, 112}));
  fwd_.reset();  // before `closed` goes
  ASSERT_EQ(closed.size(), 2u);  // every admitted flow's end is reported
  EXPECT_EQ(closed[1], (std::pair<uint64_t, uint64_t>{16, 16}));
}

}  // namespace
}  // namespace netstack::backend
