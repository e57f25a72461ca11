#include "netstack/runtime/runtime.h"

#include <poll.h>

#include <memory>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "link/channel_endpoint.h"
#include "netstack/stack/test_frames.h"
#include "netstack/wire/address.h"

namespace netstack::runtime {
namespace {

const uint8_t kOurMacBytes[6] = {0x02, 0, 0, 0, 0, 0x01};
const uint8_t kPeerMacBytes[6] = {0x02, 0, 0, 0, 0, 0x02};
const wire::MacAddress kOurMac = wire::MacAddress::FromBytes(kOurMacBytes);
const wire::MacAddress kPeerMac = wire::MacAddress::FromBytes(kPeerMacBytes);
const wire::Ipv4Address kOurIp = wire::Ipv4Address::FromU32(0x0a000202);
const stack::testing::Peer kPeer{
    kPeerMac, wire::Ipv4Address::FromU32(0x0a000264), {}};

// A runtime on one side of a channel; the test holds that side to inject
// frames and to see what the runtime transmits.
struct ChannelRuntime {
  std::unique_ptr<Runtime> rt;
  link::ChannelEndpoint* side = nullptr;  // owned by rt
  std::unique_ptr<link::ChannelEndpoint> other;
};

ChannelRuntime Make(bool backend = false) {
  ChannelRuntime c;
  RuntimeOptions o;
  o.open_link = [&c](buffer::ChunkPool& chunks, buffer::PacketPool&)
      -> absl::StatusOr<std::unique_ptr<link::LinkEndpoint>> {
    link::ChannelOptions co;
    co.mac_a = kOurMac;
    co.mac_b = kPeerMac;
    absl::StatusOr<link::ChannelPair> pair =
        link::CreateChannelPair(chunks, co);
    if (!pair.ok()) return pair.status();
    c.side = pair->a.get();
    c.side->set_capture(true);
    c.other = std::move(pair->b);
    return std::unique_ptr<link::LinkEndpoint>(std::move(pair->a));
  };
  o.chunks = 64;
  o.packets = 512;
  o.addrs4 = {stack::Ipv4Cidr{kOurIp, 24}};
  if (backend) o.backend = backend::BackendConfig{};
  absl::StatusOr<std::unique_ptr<Runtime>> rt = Runtime::Create(std::move(o));
  EXPECT_TRUE(rt.ok()) << rt.status();
  if (rt.ok()) c.rt = *std::move(rt);
  return c;
}

// The ARP replies among the frames `side` transmitted.
int ArpRepliesFrom(link::ChannelEndpoint& side) {
  int n = 0;
  for (const auto& f : side.TakeCaptured()) {
    if (f.bytes.size() >= 22 && f.bytes[12] == 0x08 && f.bytes[13] == 0x06 &&
        f.bytes[21] == 2) {
      ++n;
    }
  }
  return n;
}

TEST(RuntimeTest, TheCallersLoopSeesWorkByDeadlineAndPollDoesIt) {
  ChannelRuntime c = Make();
  ASSERT_NE(c.rt, nullptr);
  Runtime& rt = *c.rt;
  // A quiet runtime has nothing due now.
  EXPECT_GT(rt.NextDeadline(), eventloop::EventLoop::MonotonicNow());
  ASSERT_TRUE(c.side->InjectFrame(stack::testing::ArpRequest(kPeer, kOurIp),
                                  eventloop::EventLoop::MonotonicNow()));
  // A queued frame: the link's poller is due, so the caller must poll now.
  EXPECT_LE(rt.NextDeadline(), eventloop::EventLoop::MonotonicNow());
  ASSERT_TRUE(rt.Poll().ok());
  EXPECT_EQ(ArpRepliesFrom(*c.side), 1);
}

TEST(RuntimeTest, TheFdIsAPollableEpollFd) {
  ChannelRuntime c = Make();
  ASSERT_NE(c.rt, nullptr);
  pollfd p{c.rt->fd(), POLLIN, 0};
  // Nothing registered is ready: not readable.
  EXPECT_EQ(::poll(&p, 1, 0), 0);
}

TEST(RuntimeTest, RunTurnsUntilStopAndSweepsRunEveryTurn) {
  ChannelRuntime c = Make();
  ASSERT_NE(c.rt, nullptr);
  Runtime& rt = *c.rt;
  int turns = 0;
  rt.AddSweep([&](Instant now) {
    if (++turns == 3) rt.Stop();
    // Keep the loop turning without waiting on a timer.
    (void)c.side->InjectFrame(stack::testing::ArpRequest(kPeer, kOurIp), now);
  });
  ASSERT_TRUE(c.side->InjectFrame(stack::testing::ArpRequest(kPeer, kOurIp),
                                  eventloop::EventLoop::MonotonicNow()));
  ASSERT_TRUE(rt.Run().ok());
  EXPECT_EQ(turns, 3);
  EXPECT_EQ(ArpRepliesFrom(*c.side), 3);
}

TEST(RuntimeTest, ARemovedSweepDoesNotRunAgain) {
  ChannelRuntime c = Make();
  ASSERT_NE(c.rt, nullptr);
  int runs = 0;
  Runtime::SweepId id = 0;
  id = c.rt->AddSweep([&](Instant) {
    ++runs;
    c.rt->RemoveSweep(id);
  });
  ASSERT_TRUE(c.rt->Poll().ok());
  ASSERT_TRUE(c.rt->Poll().ok());
  EXPECT_EQ(runs, 1);
}

TEST(RuntimeTest, TwoRuntimesInOneProcessAreIndependent) {
  ChannelRuntime a = Make();
  ChannelRuntime b = Make();
  ASSERT_NE(a.rt, nullptr);
  ASSERT_NE(b.rt, nullptr);
  EXPECT_NE(a.rt->fd(), b.rt->fd());
  ASSERT_TRUE(a.side->InjectFrame(stack::testing::ArpRequest(kPeer, kOurIp),
                                  eventloop::EventLoop::MonotonicNow()));
  ASSERT_TRUE(b.rt->Poll().ok());
  EXPECT_EQ(ArpRepliesFrom(*b.side), 0);
  ASSERT_TRUE(a.rt->Poll().ok());
  EXPECT_EQ(ArpRepliesFrom(*a.side), 1);
  b.rt.reset();
  ASSERT_TRUE(a.side->InjectFrame(stack::testing::ArpRequest(kPeer, kOurIp),
                                  eventloop::EventLoop::MonotonicNow()));
  ASSERT_TRUE(a.rt->Poll().ok());
  EXPECT_EQ(ArpRepliesFrom(*a.side), 1);
}

TEST(RuntimeTest, ABackendRuntimeCountsItsParts) {
  ChannelRuntime c = Make(/*backend=*/true);
  ASSERT_NE(c.rt, nullptr);
  ASSERT_NE(c.rt->backend(), nullptr);
  ASSERT_NE(c.rt->forwards(), nullptr);
  c.rt->AddCounters([] { return std::string("mine.thing 7\n"); });
  const std::string text = c.rt->FormatCounters();
  EXPECT_NE(text.find("backend."), std::string::npos) << text;
  EXPECT_NE(text.find("mine.thing 7\n"), std::string::npos) << text;
}

TEST(RuntimeTest, BorrowedPoolsAreTheCallersAndOutliveIt) {
  buffer::ChunkPool chunks(64);
  buffer::PacketPool packets(512);
  std::unique_ptr<link::ChannelEndpoint> other;
  link::ChannelEndpoint* side = nullptr;
  {
    RuntimeOptions o;
    o.chunk_pool = &chunks;
    o.packet_pool = &packets;
    o.open_link = [&](buffer::ChunkPool& c, buffer::PacketPool& p)
        -> absl::StatusOr<std::unique_ptr<link::LinkEndpoint>> {
      EXPECT_EQ(&c, &chunks);
      EXPECT_EQ(&p, &packets);
      link::ChannelOptions co;
      co.mac_a = kOurMac;
      co.mac_b = kPeerMac;
      absl::StatusOr<link::ChannelPair> pair = link::CreateChannelPair(c, co);
      if (!pair.ok()) return pair.status();
      side = pair->a.get();
      other = std::move(pair->b);
      return std::unique_ptr<link::LinkEndpoint>(std::move(pair->a));
    };
    o.addrs4 = {stack::Ipv4Cidr{kOurIp, 24}};
    absl::StatusOr<std::unique_ptr<Runtime>> rt = Runtime::Create(std::move(o));
    ASSERT_TRUE(rt.ok()) << rt.status();
    EXPECT_EQ(&(*rt)->chunks(), &chunks);
    EXPECT_EQ(&(*rt)->packets(), &packets);
    ASSERT_TRUE(side->InjectFrame(stack::testing::ArpRequest(kPeer, kOurIp),
                                  eventloop::EventLoop::MonotonicNow()));
    ASSERT_TRUE((*rt)->Poll().ok());
    // The reply went out through the caller's pools.
    EXPECT_GT(packets.stats().created, 0u);
    EXPECT_EQ(other->queued_frames(), 1u);
  }
  // The runtime is gone; the pools are still the caller's to check.
  other.reset();
  EXPECT_EQ(chunks.stats().in_use, 0u);
  EXPECT_EQ(packets.stats().in_use, 0u);
}

TEST(RuntimeTest, SoftwareGsoIsReachable) {
  for (uint32_t size : {0u, 65535u}) {
    RuntimeOptions o;
    o.open_link = [](buffer::ChunkPool& chunks, buffer::PacketPool&)
        -> absl::StatusOr<std::unique_ptr<link::LinkEndpoint>> {
      absl::StatusOr<link::ChannelPair> pair =
          link::CreateChannelPair(chunks, {});
      if (!pair.ok()) return pair.status();
      return std::unique_ptr<link::LinkEndpoint>(std::move(pair->a));
    };
    o.decorators.software_gso_max_size = size;
    absl::StatusOr<std::unique_ptr<Runtime>> rt = Runtime::Create(std::move(o));
    ASSERT_TRUE(rt.ok()) << rt.status();
    if (size == 0) {
      EXPECT_EQ((*rt)->gso(), nullptr);
    } else {
      ASSERT_NE((*rt)->gso(), nullptr);
      EXPECT_EQ(static_cast<link::LinkEndpoint*>((*rt)->gso()), &(*rt)->link());
    }
  }
}

TEST(RuntimeTest, TheLoopsTimerWheelIsTheOptions) {
  for (size_t slots : {size_t{512}, size_t{16}}) {
    RuntimeOptions o;
    o.open_link = [](buffer::ChunkPool& chunks, buffer::PacketPool&)
        -> absl::StatusOr<std::unique_ptr<link::LinkEndpoint>> {
      absl::StatusOr<link::ChannelPair> pair =
          link::CreateChannelPair(chunks, {});
      if (!pair.ok()) return pair.status();
      return std::unique_ptr<link::LinkEndpoint>(std::move(pair->a));
    };
    o.timers.slots = slots;
    absl::StatusOr<std::unique_ptr<Runtime>> rt =
        Runtime::Create(std::move(o));
    ASSERT_TRUE(rt.ok()) << rt.status();
    EXPECT_EQ((*rt)->loop().timers().slot_count(), slots);
  }
}

TEST(RuntimeTest, ATcpOnlyBackendHasNoUdpServices) {
  for (bool tcp_only : {false, true}) {
    RuntimeOptions o;
    o.open_link = [](buffer::ChunkPool& chunks, buffer::PacketPool&)
        -> absl::StatusOr<std::unique_ptr<link::LinkEndpoint>> {
      absl::StatusOr<link::ChannelPair> pair =
          link::CreateChannelPair(chunks, {});
      if (!pair.ok()) return pair.status();
      return std::unique_ptr<link::LinkEndpoint>(std::move(pair->a));
    };
    o.backend = backend::BackendConfig{};
    o.backend->policy.dns_upstreams = {
        *transport::SocketAddress::Parse("127.0.0.1:53")};
    o.backend_tcp_only = tcp_only;
    absl::StatusOr<std::unique_ptr<Runtime>> rt =
        Runtime::Create(std::move(o));
    ASSERT_TRUE(rt.ok()) << rt.status();
    ASSERT_NE((*rt)->backend(), nullptr);
    EXPECT_EQ((*rt)->backend()->dns() == nullptr, tcp_only);
    EXPECT_EQ((*rt)->backend()->ping() == nullptr, tcp_only);
  }
}

TEST(RuntimeTest, ALinkThatFailsToOpenIsNamed) {
  RuntimeOptions o;
  o.open_link = [](buffer::ChunkPool&, buffer::PacketPool&)
      -> absl::StatusOr<std::unique_ptr<link::LinkEndpoint>> {
    return absl::NotFoundError("no such device");
  };
  absl::StatusOr<std::unique_ptr<Runtime>> rt = Runtime::Create(std::move(o));
  ASSERT_FALSE(rt.ok());
  EXPECT_EQ(rt.status().message(), "link: no such device");
}

TEST(RuntimeTest, AnAddressThatDoesNotFitIsNamed) {
  RuntimeOptions o;
  o.open_link = [](buffer::ChunkPool& chunks, buffer::PacketPool&)
      -> absl::StatusOr<std::unique_ptr<link::LinkEndpoint>> {
    absl::StatusOr<link::ChannelPair> pair =
        link::CreateChannelPair(chunks, {});
    if (!pair.ok()) return pair.status();
    return std::unique_ptr<link::LinkEndpoint>(std::move(pair->a));
  };
  o.addrs4 = {stack::Ipv4Cidr{kOurIp, 40}};
  absl::StatusOr<std::unique_ptr<Runtime>> rt = Runtime::Create(std::move(o));
  ASSERT_FALSE(rt.ok());
  EXPECT_TRUE(absl::StartsWith(rt.status().message(), "address 10.0.2.2/40: "))
      << rt.status();
}

}  // namespace
}  // namespace netstack::runtime
