// Hostile segments against a live connection: while a transfer runs, a
// forged copy of a quarter of the frames on the wire follows the original:
// its payload stripped and a field of its TCP header rewritten (sequence
// and acknowledgment numbers near and far, flags, window, data offset,
// option bytes, truncation), with the checksums fixed so the forgery
// reaches the TCP layer (tcp_forge_test_util.h says what is never
// forged, and why). Nothing may crash (ASan runs this too), every frame is accounted for by the stack's invariants, and
// each connection either completes with the right bytes or ends with an
// error the application is told about.
#include <cstdint>
#include <cstdio>
#include <optional>

#include "gtest/gtest.h"
#include "netstack/tcp/tcp_forge_test_util.h"
#include "netstack/tcp/tcp_test_util.h"

namespace netstack::tcp {
namespace {

using testing::BulkTransfer;
using testing::Connect;
using testing::ForgeFollowers;
using testing::Network;

uint64_t Mix(uint64_t& s) {
  s += 0x9e3779b97f4a7c15ull;
  uint64_t z = s;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

TEST(TcpFuzzTest, HostileSegmentsNeverCrashAndEveryFrameIsAccounted) {
  uint64_t mutated = 0;
  int completed = 0;
  int failed = 0;
  for (uint64_t seed = 1; seed <= 12; ++seed) {
    Network net({}, 1500, seed);
    net.delay = absl::Milliseconds(2);
    uint64_t rng = seed * 7919;
    bool armed = false;
    ForgeFollowers(
        net, [&] { return armed && Mix(rng) % 4 == 0; },
        [&] { return Mix(rng); }, mutated);
    auto listener = net.b().tcp->Open(transport::Family::kIpv4);
    ASSERT_TRUE(listener->Bind({net.b().v4(), 80}).ok());
    ASSERT_TRUE(listener->Listen(8).ok());
    std::optional<testing::Connection> conn =
        Connect(net, *listener, {net.b().v4(), 80});
    ASSERT_TRUE(conn.has_value());
    armed = true;
    BulkTransfer t(*conn->client, *conn->server, 1 << 20);
    net.RunUntil([&] {
      t.Pump();
      return t.finished();
    }, absl::Seconds(300));
    // A forged segment may legitimately reset the connection (a RST with
    // the exact sequence number, say); what may never happen is wrong data
    // handed to the application or silence about an error.
    EXPECT_FALSE(t.corrupt()) << "seed " << seed;
    if (t.got() == t.total()) {
      ++completed;
    } else {
      ++failed;
      EXPECT_TRUE(t.error()) << "seed " << seed << ": stalled at " << t.got()
                             << " of " << t.total() << "\n"
                             << conn->client->Info().ToString() << "\n"
                             << conn->server->Info().ToString();
    }
    for (auto* h : {&net.a(), &net.b()}) {
      const auto& c = h->stack->counters();
      EXPECT_EQ(c.rx_frames, c.rx_consumed + c.rx_dropped_frames);
      EXPECT_EQ(c.RxDrops(), c.rx_dropped_frames);
    }
    // And the layer still works afterwards: a fresh connection transfers.
    armed = false;
    conn.reset();
    EXPECT_TRUE(Connect(net, *listener, {net.b().v4(), 80}).has_value())
        << "seed " << seed;
  }
  EXPECT_GT(mutated, 1000u);
  // Without exact-sequence RSTs a forgery must not end a connection.
  EXPECT_EQ(completed, 12);
  std::printf("mutated %llu frames; %d transfers completed, %d ended in an "
              "error\n",
              static_cast<unsigned long long>(mutated), completed, failed);
}

}  // namespace
}  // namespace netstack::tcp
