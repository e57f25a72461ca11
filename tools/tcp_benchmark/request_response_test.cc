// RrClient against RrServer over kernel loopback: transactions happen and
// every count agrees (client bytes, server bytes, connections). Against a
// server that never answers, one that closes at once, and no server at
// all, the client ends with an error within its timeout instead of
// hanging.
#include "tools/tcp_benchmark/request_response.h"

#include <unistd.h>

#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "netstack/eventloop/timer_wheel.h"
#include "netstack/transport/address.h"
#include "tools/tcp_benchmark/kernel_net.h"

namespace netstack::tools::bench {
namespace {

class RrTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<Net>> net = CreateKernelNet({});
    ASSERT_TRUE(net.ok()) << net.status();
    net_ = *std::move(net);
    address_ = *transport::SocketAddress::Parse("127.0.0.1:0");
    // A port of our own per test, from the pid and the test's index, and
    // below the ephemeral range (32768 up): the CRR test's thousands of
    // client ports must not take the next test's.
    static int index = 0;
    address_.port =
        static_cast<uint16_t>(12000 + (getpid() % 2000) * 8 + index++ % 8);
  }

  // Runs `client` to its end; fails the test (and stops) after 10 s.
  absl::StatusOr<RrResult> Run(RrClientOptions o, Instant* ended = nullptr) {
    eventloop::EventLoop& loop = net_->loop();
    o.server = address_;
    RrClient client(*net_, o, [&] { loop.Stop(); });
    bool hung = false;
    eventloop::Timer guard([&](Instant) {
      hung = true;
      loop.Stop();
    });
    loop.timers().Schedule(guard, loop.Now() + absl::Seconds(10));
    absl::Status s = client.Start();
    if (!s.ok()) return s;
    s = loop.Run();
    loop.timers().Cancel(guard);
    if (!s.ok()) return s;
    if (hung || !client.done()) return absl::InternalError("the client hung");
    if (ended != nullptr) *ended = loop.Now();
    return client.result();
  }

  std::unique_ptr<Net> net_;
  transport::SocketAddress address_;
};

TEST_F(RrTest, RrCountsAgreeWithTheServer) {
  RrServer server(*net_, address_, {}, stderr);
  ASSERT_TRUE(server.Start().ok());
  RrClientOptions o;
  o.mode = RrMode::kRr;
  o.duration = 0.3;
  absl::StatusOr<RrResult> r = Run(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_GT(r->transactions, 100u);  // loopback does tens of thousands/s
  EXPECT_EQ(r->connections, 1u);
  EXPECT_EQ(r->bytes_sent, r->bytes_received);
  // One response may have come after the end: received, not counted.
  EXPECT_GE(r->bytes_received, r->transactions);
  EXPECT_LE(r->bytes_received, r->transactions + 1);
  EXPECT_EQ(server.bytes_answered(), r->bytes_received);
  EXPECT_EQ(server.connections(), 1u);
  EXPECT_NEAR(r->seconds, 0.3, 1e-6);
  EXPECT_GT(r->p50_us, 0);
  EXPECT_GE(r->p99_us, r->p50_us);
  EXPECT_GE(r->max_us, r->p99_us);
  EXPECT_NEAR(r->transactions_per_second(), r->transactions / 0.3, 1e-6);
  EXPECT_NEAR(r->mean_us() * r->transactions, 0.3e6, 1);
}

TEST_F(RrTest, CrrOpensAConnectionPerTransaction) {
  RrServer server(*net_, address_, {}, stderr);
  ASSERT_TRUE(server.Start().ok());
  RrClientOptions o;
  o.mode = RrMode::kCrr;
  o.duration = 0.3;
  absl::StatusOr<RrResult> r = Run(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_GT(r->transactions, 20u);
  // Each transaction had its own connection; one more may have been
  // started when the duration ended.
  EXPECT_GE(r->connections, r->transactions);
  EXPECT_LE(r->connections, r->transactions + 1);
  EXPECT_EQ(r->bytes_sent, r->bytes_received);
  EXPECT_LE(r->bytes_received, r->transactions + 1);
  EXPECT_EQ(server.bytes_answered(), r->bytes_received);
  EXPECT_GE(server.connections(), r->transactions);
}

TEST_F(RrTest, ServerThatNeverAnswersIsAnErrorNotAHang) {
  absl::StatusOr<std::unique_ptr<Listener>> listener =
      net_->Listen(address_, {});
  ASSERT_TRUE(listener.ok()) << listener.status();
  std::vector<std::unique_ptr<Stream>> held;  // accepted, never read
  (*listener)->SetHandler([&] {
    auto s = (*listener)->Accept();
    if (s.ok()) held.push_back(*std::move(s));
  });
  for (RrMode mode : {RrMode::kRr, RrMode::kCrr}) {
    RrClientOptions o;
    o.mode = mode;
    o.duration = 0.2;
    o.response_timeout = absl::Milliseconds(300);
    const Instant start = net_->loop().Now();
    Instant ended;
    absl::StatusOr<RrResult> r = Run(o, &ended);
    ASSERT_FALSE(r.ok()) << RrModeName(mode);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded)
        << r.status();
    EXPECT_NE(r.status().message().find("no response to request 1"),
              std::string::npos)
        << r.status();
    EXPECT_LT(ended - start, absl::Seconds(2));
  }
}

TEST_F(RrTest, ServerThatClosesIsAnError) {
  absl::StatusOr<std::unique_ptr<Listener>> listener =
      net_->Listen(address_, {});
  ASSERT_TRUE(listener.ok()) << listener.status();
  std::vector<std::unique_ptr<Stream>> closed;
  (*listener)->SetHandler([&] {
    auto s = (*listener)->Accept();
    if (!s.ok()) return;
    (*s)->Close();
    closed.push_back(*std::move(s));
  });
  RrClientOptions o;
  o.duration = 1;
  absl::StatusOr<RrResult> r = Run(o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable) << r.status();
}

TEST_F(RrTest, NoServerIsAnError) {
  for (RrMode mode : {RrMode::kRr, RrMode::kCrr}) {
    RrClientOptions o;
    o.mode = mode;
    o.duration = 1;
    absl::StatusOr<RrResult> r = Run(o);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("connect 1 to 127.0.0.1"),
              std::string::npos)
        << r.status();
  }
}

}  // namespace
}  // namespace netstack::tools::bench
