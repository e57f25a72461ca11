// RrClient against RrServer over kernel loopback: transactions happen and
// every count agrees (client bytes, server bytes, connections). Against a
// server that never answers, one that closes at once, and no server at
// all, the client ends with an error within its timeout instead of
// hanging. UDP_RR: RunUdpRrClient against UdpRrServer, against a server
// that answers some requests with the wrong byte (those are lost, never a
// transaction), and against no server.
#include "tools/tcp_benchmark/request_response.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "netstack/eventloop/event_loop.h"
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

TEST(PercentileTest, NearestRank) {
  std::vector<uint32_t> ns;
  for (uint32_t i = 100; i >= 1; --i) ns.push_back(i * 1000);  // unsorted
  EXPECT_EQ(PercentileUs(ns, 0.50), 51);
  EXPECT_EQ(PercentileUs(ns, 0.99), 100);
  EXPECT_EQ(PercentileUs(ns, 0.0), 1);
  std::vector<uint32_t> three = {7000, 3000, 5000};
  EXPECT_EQ(PercentileUs(three, 0.5), 5);
  // One slow transaction in a hundred is the p99.
  std::vector<uint32_t> slow(99, 10'000);
  slow.push_back(900'000);
  EXPECT_EQ(PercentileUs(slow, 0.99), 900);
  EXPECT_EQ(PercentileUs(slow, 0.98), 10);
  std::vector<uint32_t> none;
  EXPECT_EQ(PercentileUs(none, 0.5), 0);
}

// A UDP port of our own per test, as RrTest's.
uint16_t UdpTestPort() {
  static int index = 0;
  return static_cast<uint16_t>(28000 + (getpid() % 400) * 8 + index++ % 8);
}

TEST(UdpRrTest, EveryRequestIsAnsweredOnLoopback) {
  absl::StatusOr<std::unique_ptr<eventloop::EventLoop>> loop =
      eventloop::EventLoop::Create();
  ASSERT_TRUE(loop.ok()) << loop.status();
  transport::SocketAddress address =
      *transport::SocketAddress::Parse("127.0.0.1:0");
  address.port = UdpTestPort();
  UdpRrServer server(**loop, address);
  ASSERT_TRUE(server.Start().ok());
  // The server answers from the loop's thread; the client blocks on its
  // own.
  std::atomic<bool> stop{false};
  std::thread serve([&] {
    while (!stop) (void)(*loop)->RunOnce(absl::Milliseconds(10));
  });
  UdpRrOptions o;
  o.server = address;
  o.duration = 0.3;
  absl::StatusOr<RrResult> r = RunUdpRrClient(o);
  stop = true;
  serve.join();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->mode, RrMode::kUdpRr);
  EXPECT_GT(r->transactions, 100u);
  EXPECT_EQ(r->lost, 0u);
  EXPECT_EQ(r->bytes_sent, r->transactions);
  EXPECT_EQ(r->bytes_received, r->transactions);
  EXPECT_EQ(server.datagrams(), r->transactions);
  EXPECT_GE(r->seconds, 0.3);
  EXPECT_LT(r->seconds, 0.5);
  EXPECT_GT(r->p50_us, 0);
  EXPECT_GE(r->p99_us, r->p50_us);
  EXPECT_GE(r->max_us, r->p99_us);
  EXPECT_NE(FormatRrJson(*r, "s", "kernel").find("\"mode\":\"udp-rr\""),
            std::string::npos);
  EXPECT_NE(FormatRrJson(*r, "s", "kernel").find("\"lost\":0"),
            std::string::npos);
}

TEST(UdpRrTest, AWrongAnswerIsALostRequestNotATransaction) {
  // Every third request is answered with another byte (as a late answer
  // to an earlier request would be): the client must wait for its own
  // byte, give up after the timeout and count the request lost.
  const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in sin{};
  sin.sin_family = AF_INET;
  sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  sin.sin_port = htons(UdpTestPort());
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&sin), sizeof(sin)), 0);
  timeval tv{0, 20000};
  ASSERT_EQ(setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)), 0);
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> right{0}, wrong{0};
  std::thread serve([&] {
    uint64_t n = 0;
    while (!stop) {
      uint8_t byte;
      sockaddr_storage peer{};
      socklen_t len = sizeof(peer);
      if (recvfrom(fd, &byte, 1, 0, reinterpret_cast<sockaddr*>(&peer),
                   &len) != 1) {
        continue;
      }
      if (++n % 3 == 0) {
        ++byte;
        ++wrong;
      } else {
        ++right;
      }
      (void)sendto(fd, &byte, 1, 0, reinterpret_cast<sockaddr*>(&peer), len);
    }
  });
  UdpRrOptions o;
  o.server = *transport::SocketAddress::Parse(
      absl::StrCat("127.0.0.1:", ntohs(sin.sin_port)));
  o.duration = 0.3;
  o.response_timeout = absl::Milliseconds(5);
  absl::StatusOr<RrResult> r = RunUdpRrClient(o);
  stop = true;
  serve.join();
  close(fd);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_GT(r->lost, 5u);
  EXPECT_EQ(r->transactions, right.load());
  EXPECT_EQ(r->lost, wrong.load());
  EXPECT_EQ(r->bytes_sent, r->transactions + r->lost);
  // A lost request's wait is no transaction's latency.
  EXPECT_LT(r->max_us, 5000);
}

TEST(UdpRrTest, NoServerIsAnError) {
  UdpRrOptions o;
  o.server = *transport::SocketAddress::Parse("127.0.0.1:0");
  o.server.port = UdpTestPort();  // nobody listens: ICMP port unreachable
  o.duration = 1;
  absl::StatusOr<RrResult> r = RunUdpRrClient(o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable) << r.status();
  EXPECT_NE(r.status().message().find("127.0.0.1"), std::string::npos)
      << r.status();
}

}  // namespace
}  // namespace netstack::tools::bench
