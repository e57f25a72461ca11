// The TCP data path does not touch the heap once warmed up: two stacks
// over an in-memory channel move megabytes through Write/Read, ACKs,
// window updates and timers with zero operator new calls.
#include <cstdint>
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "link/channel_endpoint.h"
#include "netstack/ip/alloc_counter.h"
#include "netstack/stack/stack.h"
#include "netstack/tcp/tcp_layer.h"
#include "netstack/transport/notifier.h"

namespace netstack::tcp {
namespace {

struct Side {
  Side(buffer::ChunkPool& chunks, buffer::PacketPool& packets,
       link::ChannelEndpoint& ep, uint8_t id)
      : stack(stack::StackOptions{}, chunks, packets) {
    const stack::NicId nic = *stack.AddNic(&ep, "chan");
    (void)stack.AddAddress(
        nic, stack::Ipv4Cidr{wire::Ipv4Address::FromU32(0x0a000000u | id),
                             24});
    TcpLayerOptions o;
    o.seed = id;
    tcp = std::make_unique<TcpLayer>(stack, chunks, packets, notifier, o);
  }
  stack::Stack stack;
  transport::Notifier notifier;
  std::unique_ptr<TcpLayer> tcp;
};

TEST(TcpAllocTest, SteadyStateTransferDoesNotAllocate) {
  buffer::ChunkPool chunks(2048);
  buffer::PacketPool packets(4096);
  chunks.Reserve(2048);
  packets.Reserve(4096);
  link::ChannelOptions co;
  co.mac_a.bytes = {2, 0, 0, 0, 0, 1};
  co.mac_b.bytes = {2, 0, 0, 0, 0, 2};
  co.queue_limit = 4096;
  auto pair = link::CreateChannelPair(chunks, co);
  ASSERT_TRUE(pair.ok());
  Side a(chunks, packets, *pair->a, 1);
  Side b(chunks, packets, *pair->b, 2);
  const transport::SocketAddress dst{
      transport::IpAddress(wire::Ipv4Address::FromU32(0x0a000002u)), 9};
  auto listener = b.tcp->Open(transport::Family::kIpv4);
  ASSERT_TRUE(listener->Bind(dst).ok());
  ASSERT_TRUE(listener->Listen(4).ok());
  auto client = a.tcp->Open(transport::Family::kIpv4);
  ASSERT_TRUE(client->Connect(dst).ok());

  Instant now = absl::FromUnixSeconds(1'700'000'000);
  std::unique_ptr<TcpSocket> server;
  std::vector<uint8_t> out(64 * 1024, 0x5a);
  std::vector<uint8_t> in(64 * 1024);
  uint64_t sent = 0;
  uint64_t received = 0;
  auto turn = [&] {
    now += absl::Microseconds(20);
    pair->a->Poll(now);
    pair->b->Poll(now);
    a.notifier.Dispatch();
    b.notifier.Dispatch();
    if (server == nullptr) {
      auto s = listener->Accept();
      if (s.ok()) server = std::move(*s);
    }
    if (client->state() == TcpState::kEstablished) {
      auto w = client->Write(out);
      if (w.ok()) sent += *w;
    }
    if (server != nullptr) {
      while (true) {
        auto r = server->Read(in);
        if (!r.ok() || *r == 0) break;
        received += *r;
      }
    }
    a.tcp->Poll(now);
    b.tcp->Poll(now);
    a.stack.Poll(now);
    b.stack.Poll(now);
  };
  // Warm up: handshake, slow start, rings and hash tables at size.
  for (int i = 0; i < 20000 && received < (64u << 20); ++i) turn();
  ASSERT_GE(received, 64u << 20) << client->Info().ToString();
  const uint64_t before_bytes = received;
  const uint64_t before = ip::testing::HeapAllocations();
  for (int i = 0; i < 5000; ++i) turn();
  const uint64_t allocations = ip::testing::HeapAllocations() - before;
  const uint64_t moved = received - before_bytes;
  EXPECT_GT(moved, 32u << 20) << client->Info().ToString();
  EXPECT_EQ(allocations, 0u) << "over " << moved << " bytes";
  EXPECT_EQ(client->Info().retransmits, 0u);
}

}  // namespace
}  // namespace netstack::tcp
