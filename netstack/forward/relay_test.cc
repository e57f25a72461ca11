// The relay over real sockets, for every mode and every pair of leg kinds:
// both directions at once, half-closes both ways, a peer reset, a slow
// reader that fills the pipe, and an idle connection.
#include "netstack/forward/relay.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "netstack/eventloop/event_loop.h"
#include "netstack/forward/relay_test_util.h"

namespace netstack::forward {
namespace {

using test::LegKind;
using test::Peer;

constexpr size_t kMiB = size_t{1} << 20;
constexpr absl::Duration kTimeout = absl::Seconds(120);

struct Case {
  RelayMode mode;
  LegKind a;
  LegKind b;
};

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  return std::string(RelayModeName(info.param.mode)) + "_" +
         test::LegKindName(info.param.a) + "_" +
         test::LegKindName(info.param.b);
}

// Every byte, in order; on a mismatch, where.
::testing::AssertionResult SameBytes(const std::vector<uint8_t>& got,
                                     const std::vector<uint8_t>& want) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure()
           << "got " << got.size() << " bytes, want " << want.size();
  }
  auto [g, w] = std::mismatch(got.begin(), got.end(), want.begin());
  if (g != got.end()) {
    return ::testing::AssertionFailure()
           << "first difference at byte " << (g - got.begin());
  }
  return ::testing::AssertionSuccess();
}

// The stats of one direction that carried `bytes` in `mode` on sockets
// that splice. A kSplice or kAuto direction may have found no pipe only if
// the kernel refused the pool one (other processes of this user can hold
// the pipe-user-pages-soft budget: see test::KernelGrantsPipes); then it
// must have copied everything.
void ExpectPathStats(const DirectionStats& s, RelayMode mode, size_t bytes,
                     const PipePool& pool, const char* which) {
  SCOPED_TRACE(which);
  EXPECT_EQ(s.bytes, bytes);
  EXPECT_EQ(s.splice_bytes + s.copy_bytes, s.bytes);
  EXPECT_FALSE(s.fell_back_einval);
  if (s.fell_back_no_pipe) {
    EXPECT_NE(mode, RelayMode::kCopy);
    EXPECT_GT(pool.stats().acquire_failed, 0u);
    if (mode == RelayMode::kSplice) {
      EXPECT_EQ(s.splice_bytes, 0u);
    }
    std::fprintf(stderr, "note: %s: no pipe from the kernel, copied\n", which);
    return;
  }
  switch (mode) {
    case RelayMode::kCopy:
      EXPECT_EQ(s.splice_bytes, 0u);
      EXPECT_EQ(s.splice_syscalls, 0u);
      if (bytes > 0) {
        EXPECT_GT(s.copy_syscalls, 0u);
      }
      break;
    case RelayMode::kSplice:
      EXPECT_EQ(s.copy_bytes, 0u);
      EXPECT_EQ(s.copy_syscalls, 0u);
      EXPECT_GT(s.splice_syscalls, 0u);
      break;
    case RelayMode::kAuto:
      break;
  }
}

class RelayTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    auto loop = eventloop::EventLoop::Create();
    ASSERT_TRUE(loop.ok()) << loop.status();
    loop_ = *std::move(loop);
    pool_ = std::make_unique<PipePool>(PipePool::Options{});
  }

  void MakeLegs(const test::LegOptions& b_options = {}) {
    auto a = test::MakeLeg(GetParam().a);
    ASSERT_TRUE(a.ok()) << a.status();
    auto b = test::MakeLeg(GetParam().b, b_options);
    ASSERT_TRUE(b.ok()) << b.status();
    a_ = *a;
    b_ = *b;
  }

  // The relay of a_ and b_; `done` records and then destroys it, from
  // inside the callback, as an owner would.
  void StartRelay() {
    RelayOptions options;
    options.mode = GetParam().mode;
    auto relay = Relay::Create(*loop_, *pool_, a_.relay, b_.relay, options,
                               [this](Relay& relay, absl::Status status) {
                                 EXPECT_EQ(&relay, relay_.get());
                                 ++done_calls_;
                                 status_ = status;
                                 stats_ = relay.stats();
                                 EXPECT_TRUE(relay.finished());
                                 relay_.reset();
                               });
    ASSERT_TRUE(relay.ok()) << relay.status();
    relay_ = *std::move(relay);
  }

  bool WaitDone() {
    return test::RunUntil(
        *loop_, [this] { return done_calls_ > 0; }, kTimeout);
  }

  void ExpectRelayFdsClosed() {
    EXPECT_FALSE(test::FdIsOpen(a_.relay));
    EXPECT_FALSE(test::FdIsOpen(b_.relay));
  }

  void ExpectPoolSettled() { EXPECT_EQ(pool_->stats().in_use, 0u); }

  // `first` shuts its write side after sending; `second` reads to EOF, only
  // then sends (a server answering after the request's FIN), and every byte
  // and both EOFs arrive.
  void HalfCloseScenario(Peer& first, Peer& second, bool first_is_a) {
    const std::vector<uint8_t> request = test::SeededBytes(kMiB + 3, 21);
    const std::vector<uint8_t> response = test::SeededBytes(2 * kMiB + 9, 22);
    first.StartWriter(request, {.seed = 7});
    first.StartReader({.seed = 8});
    second.StartReader({.seed = 9});
    const bool got_request = test::RunUntil(
        *loop_, [&] { return second.reader_done(); }, kTimeout);
    if (!got_request) {
      first.Abort();
      second.Abort();
    }
    ASSERT_TRUE(got_request);
    // The request's FIN crossed while the other direction is still open.
    ASSERT_NE(relay_, nullptr);
    const RelayStats mid = relay_->stats();
    const DirectionStats& fin_dir = first_is_a ? mid.a_to_b : mid.b_to_a;
    const DirectionStats& open_dir = first_is_a ? mid.b_to_a : mid.a_to_b;
    EXPECT_TRUE(fin_dir.eof_forwarded);
    EXPECT_FALSE(open_dir.eof_forwarded);
    EXPECT_FALSE(relay_->finished());

    second.StartWriter(response, {.seed = 10});
    const bool done = WaitDone();
    if (!done) {
      first.Abort();
      second.Abort();
    }
    first.Join();
    second.Join();
    ASSERT_TRUE(done);
    EXPECT_TRUE(status_.ok()) << status_;
    EXPECT_TRUE(second.eof());
    EXPECT_TRUE(first.eof());
    EXPECT_TRUE(SameBytes(second.received(), request));
    EXPECT_TRUE(SameBytes(first.received(), response));
    const DirectionStats& req = first_is_a ? stats_.a_to_b : stats_.b_to_a;
    const DirectionStats& resp = first_is_a ? stats_.b_to_a : stats_.a_to_b;
    ExpectPathStats(req, GetParam().mode, request.size(), *pool_, "request");
    ExpectPathStats(resp, GetParam().mode, response.size(), *pool_, "response");
    ExpectRelayFdsClosed();
    ExpectPoolSettled();
  }

  std::unique_ptr<eventloop::EventLoop> loop_;
  std::unique_ptr<PipePool> pool_;
  test::Leg a_;
  test::Leg b_;
  std::unique_ptr<Relay> relay_;
  int done_calls_ = 0;
  absl::Status status_;
  RelayStats stats_;
};

TEST_P(RelayTest, BothWaysAtOnceRandomWriteSizes) {
  MakeLegs();
  Peer pa(a_.peer);
  Peer pb(b_.peer);
  StartRelay();
  const std::vector<uint8_t> a_data = test::SeededBytes(4 * kMiB + 17, 11);
  const std::vector<uint8_t> b_data = test::SeededBytes(3 * kMiB + 5, 12);
  pa.StartWriter(a_data, {.min_chunk = 1, .max_chunk = 256 * 1024, .seed = 3});
  pb.StartWriter(b_data, {.min_chunk = 1, .max_chunk = 256 * 1024, .seed = 4});
  pa.StartReader({.seed = 5});
  pb.StartReader({.seed = 6});
  const bool done = WaitDone();
  if (!done) {
    pa.Abort();
    pb.Abort();
  }
  pa.Join();
  pb.Join();
  ASSERT_TRUE(done) << "relay did not finish";
  EXPECT_TRUE(status_.ok()) << status_;
  EXPECT_EQ(done_calls_, 1);
  EXPECT_TRUE(SameBytes(pb.received(), a_data));
  EXPECT_TRUE(SameBytes(pa.received(), b_data));
  EXPECT_TRUE(pa.eof());
  EXPECT_TRUE(pb.eof());
  ExpectPathStats(stats_.a_to_b, GetParam().mode, a_data.size(), *pool_,
                  "a_to_b");
  ExpectPathStats(stats_.b_to_a, GetParam().mode, b_data.size(), *pool_,
                  "b_to_a");
  EXPECT_TRUE(stats_.a_to_b.eof_forwarded);
  EXPECT_TRUE(stats_.b_to_a.eof_forwarded);
  ExpectRelayFdsClosed();
  ExpectPoolSettled();
}

TEST_P(RelayTest, HalfCloseFromA) {
  MakeLegs();
  Peer pa(a_.peer);
  Peer pb(b_.peer);
  StartRelay();
  HalfCloseScenario(pa, pb, /*first_is_a=*/true);
}

TEST_P(RelayTest, HalfCloseFromB) {
  MakeLegs();
  Peer pa(a_.peer);
  Peer pb(b_.peer);
  StartRelay();
  HalfCloseScenario(pb, pa, /*first_is_a=*/false);
}

TEST_P(RelayTest, PeerResetMidTransferFailsNamingTheLeg) {
  MakeLegs();
  Peer pa(a_.peer);
  StartRelay();
  pa.StartWriter(test::SeededBytes(64 * kMiB, 31), {.seed = 11});
  pa.StartReader({.seed = 12});
  // b's peer reads a little, then resets (TCP: SO_LINGER 0 sends RST;
  // UNIX: closing with unread bytes is its reset).
  const int b_peer = b_.peer;
  std::atomic<size_t> b_read{0};
  std::thread resetter([b_peer, &b_read] {
    std::vector<char> buf(64 * 1024);
    while (b_read.load() < 256 * 1024) {
      const ssize_t n = recv(b_peer, buf.data(), buf.size(), 0);
      if (n <= 0) break;
      b_read += static_cast<size_t>(n);
    }
    const linger lin = {1, 0};
    setsockopt(b_peer, SOL_SOCKET, SO_LINGER, &lin, sizeof(lin));
    close(b_peer);
  });
  const bool done = WaitDone();
  if (!done) pa.Abort();
  resetter.join();
  pa.Join();
  ASSERT_TRUE(done);
  EXPECT_EQ(done_calls_, 1);
  EXPECT_FALSE(status_.ok());
  EXPECT_NE(std::string(status_.message()).find("relay leg b"),
            std::string::npos)
      << status_;
  EXPECT_GE(b_read.load(), 256 * 1024u);
  EXPECT_GE(stats_.a_to_b.bytes, b_read.load());
  EXPECT_EQ(stats_.a_to_b.splice_bytes + stats_.a_to_b.copy_bytes,
            stats_.a_to_b.bytes);
  ExpectRelayFdsClosed();
  // a's peer saw its leg go away rather than hang.
  EXPECT_TRUE(pa.eof() || pa.read_errno() != 0);
  EXPECT_EQ(pool_->stats().in_use, 0u);
}

TEST_P(RelayTest, SlowReaderFillsThePipeAndNothingIsLost) {
  MakeLegs({.peer_rcvbuf = 64 * 1024});
  Peer pa(a_.peer);
  Peer pb(b_.peer);
  StartRelay();
  const std::vector<uint8_t> data = test::SeededBytes(8 * kMiB + 1, 41);
  std::atomic<bool> gate{false};
  pa.StartWriter(data,
                 {.min_chunk = 16 * 1024, .max_chunk = 256 * 1024, .seed = 13});
  pa.StartReader({.seed = 14});
  pb.StartWriter({}, {.seed = 15});  // b sends nothing, just its FIN
  pb.StartReader({.min_read = 256,
                  .max_read = 4096,
                  .gate = &gate,
                  .pause_every = 64,
                  .pause = absl::Milliseconds(1),
                  .seed = 16});
  // Let everything back up: b's socket, the pipe, a's socket.
  test::RunFor(*loop_, absl::Milliseconds(300));
  ASSERT_NE(relay_, nullptr);
  EXPECT_GT(relay_->stats().a_to_b.would_block, 0u);
  // Stalled on the destination, the relay must not spin: with EPOLLIN
  // still asked for on a readable source whose pipe is full, this would
  // be one event per turn.
  const uint64_t events_before = loop_->stats().events;
  test::RunFor(*loop_, absl::Milliseconds(200));
  EXPECT_LE(loop_->stats().events - events_before, 10u);
  gate = true;
  const bool done = WaitDone();
  if (!done) {
    pa.Abort();
    pb.Abort();
  }
  pa.Join();
  pb.Join();
  ASSERT_TRUE(done);
  EXPECT_TRUE(status_.ok()) << status_;
  EXPECT_TRUE(SameBytes(pb.received(), data));
  EXPECT_TRUE(pb.eof());
  EXPECT_TRUE(pa.eof());
  EXPECT_GT(stats_.a_to_b.would_block, 0u);
  ExpectPathStats(stats_.a_to_b, GetParam().mode, data.size(), *pool_,
                  "a_to_b");
  ExpectRelayFdsClosed();
  ExpectPoolSettled();
}

TEST_P(RelayTest, IdleConnectionLeavesTheLoopIdle) {
  MakeLegs();
  Peer pa(a_.peer);
  Peer pb(b_.peer);
  StartRelay();
  // Some traffic, no FIN: then both peers go quiet.
  const std::vector<uint8_t> a_data = test::SeededBytes(100 * 1000, 51);
  const std::vector<uint8_t> b_data = test::SeededBytes(30 * 1000, 52);
  pa.StartWriter(a_data, {.shutdown_at_end = false, .seed = 17});
  pb.StartWriter(b_data, {.shutdown_at_end = false, .seed = 18});
  pa.StartReader({.seed = 19});
  pb.StartReader({.seed = 20});
  ASSERT_TRUE(test::RunUntil(
      *loop_,
      [&] {
        return pb.received_so_far() == a_data.size() &&
               pa.received_so_far() == b_data.size();
      },
      kTimeout));
  const uint64_t events_before = loop_->stats().events;
  test::RunFor(*loop_, absl::Milliseconds(200));
  EXPECT_EQ(loop_->stats().events - events_before, 0u);
  // Now finish: both writers have sent everything; the FINs go by hand.
  ASSERT_EQ(shutdown(a_.peer, SHUT_WR), 0);
  ASSERT_EQ(shutdown(b_.peer, SHUT_WR), 0);
  const bool done = WaitDone();
  if (!done) {
    pa.Abort();
    pb.Abort();
  }
  pa.Join();
  pb.Join();
  ASSERT_TRUE(done);
  EXPECT_TRUE(status_.ok()) << status_;
  EXPECT_TRUE(SameBytes(pb.received(), a_data));
  EXPECT_TRUE(SameBytes(pa.received(), b_data));
  ExpectRelayFdsClosed();
}

INSTANTIATE_TEST_SUITE_P(
    AllModesAndLegs, RelayTest,
    ::testing::Values(Case{RelayMode::kSplice, LegKind::kTcp4, LegKind::kTcp4},
                      Case{RelayMode::kSplice, LegKind::kTcp6, LegKind::kTcp6},
                      Case{RelayMode::kSplice, LegKind::kUnix, LegKind::kTcp4},
                      Case{RelayMode::kSplice, LegKind::kTcp6, LegKind::kUnix},
                      Case{RelayMode::kCopy, LegKind::kTcp4, LegKind::kTcp4},
                      Case{RelayMode::kCopy, LegKind::kTcp6, LegKind::kTcp6},
                      Case{RelayMode::kCopy, LegKind::kUnix, LegKind::kTcp4},
                      Case{RelayMode::kCopy, LegKind::kTcp6, LegKind::kUnix},
                      Case{RelayMode::kAuto, LegKind::kTcp4, LegKind::kTcp4},
                      Case{RelayMode::kAuto, LegKind::kTcp6, LegKind::kTcp6},
                      Case{RelayMode::kAuto, LegKind::kUnix, LegKind::kTcp4},
                      Case{RelayMode::kAuto, LegKind::kTcp6, LegKind::kUnix}),
    CaseName);

}  // namespace
}  // namespace netstack::forward
