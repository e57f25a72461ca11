// Which path carries the bytes, and the ways off the splice path: kAuto's
// decisions, EINVAL before any byte (both sides), a pool that cannot give a
// pipe, a peer that hangs up with bytes still queued, a relay destroyed
// mid-transfer, fd accounting over 200 relays, Create's errors.
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "netstack/eventloop/event_loop.h"
#include "netstack/forward/relay.h"
#include "netstack/forward/relay_test_util.h"
#include "netstack/forward/relay_testing.h"

namespace netstack::forward {
namespace {

using test::LegKind;
using test::Peer;

constexpr size_t kMiB = size_t{1} << 20;
constexpr absl::Duration kTimeout = absl::Seconds(120);

// Tests that must see the splice path need the kernel to hand out pipes;
// see test::KernelGrantsPipes.
#define SKIP_UNLESS_KERNEL_GRANTS_PIPES()                                    \
  if (!test::KernelGrantsPipes())                                            \
  GTEST_SKIP() << "pipe-user-pages-soft: other processes of this user hold " \
                  "the pipe budget"

bool SameBytes(const std::vector<uint8_t>& got,
               const std::vector<uint8_t>& want) {
  return got.size() == want.size() &&
         std::equal(got.begin(), got.end(), want.begin());
}

// Sends exactly `len` bytes / receives exactly `len` bytes (blocking).
bool SendAll(int fd, const uint8_t* data, size_t len) {
  while (len > 0) {
    const ssize_t n = send(fd, data, len, MSG_NOSIGNAL);
    if (n <= 0) return false;
    data += n;
    len -= static_cast<size_t>(n);
  }
  return true;
}
bool RecvAll(int fd, uint8_t* data, size_t len) {
  while (len > 0) {
    const ssize_t n = recv(fd, data, len, 0);
    if (n <= 0) return false;
    data += n;
    len -= static_cast<size_t>(n);
  }
  return true;
}

// One relay between two fresh legs, with its loop and pool.
class Harness {
 public:
  explicit Harness(PipePool::Options pool_options = {})
      : loop_(*eventloop::EventLoop::Create()), pool_(pool_options) {}

  void MakeLegs(LegKind a, LegKind b, const test::LegOptions& b_options = {}) {
    auto la = test::MakeLeg(a);
    auto lb = test::MakeLeg(b, b_options);
    ASSERT_TRUE(la.ok() && lb.ok());
    a_ = *la;
    b_ = *lb;
  }

  void Start(const RelayOptions& options) {
    auto relay = Relay::Create(*loop_, pool_, a_.relay, b_.relay, options,
                               [this](Relay& relay, absl::Status status) {
                                 ++done_calls_;
                                 status_ = status;
                                 stats_ = relay.stats();
                                 relay_.reset();
                               });
    ASSERT_TRUE(relay.ok()) << relay.status();
    relay_ = *std::move(relay);
  }

  bool WaitDone() {
    return test::RunUntil(
        *loop_, [this] { return done_calls_ > 0; }, kTimeout);
  }
  // WaitDone, then (on a timeout, after unblocking both peers) joins their
  // threads; returns whether the relay finished.
  bool Finish(Peer& pa, Peer& pb) {
    const bool done = WaitDone();
    if (!done) {
      pa.Abort();
      pb.Abort();
    }
    pa.Join();
    pb.Join();
    return done;
  }
  bool RunUntil(absl::FunctionRef<bool()> done) {
    return test::RunUntil(*loop_, done, kTimeout);
  }

  eventloop::EventLoop& loop() { return *loop_; }
  PipePool& pool() { return pool_; }
  const test::Leg& a() const { return a_; }
  const test::Leg& b() const { return b_; }
  Relay* relay() { return relay_.get(); }
  void DestroyRelay() { relay_.reset(); }
  int done_calls() const { return done_calls_; }
  const absl::Status& status() const { return status_; }
  const RelayStats& stats() const { return stats_; }

 private:
  std::unique_ptr<eventloop::EventLoop> loop_;
  PipePool pool_;
  test::Leg a_;
  test::Leg b_;
  std::unique_ptr<Relay> relay_;
  int done_calls_ = 0;
  absl::Status status_;
  RelayStats stats_;
};

RelayOptions Mode(RelayMode mode) {
  RelayOptions options;
  options.mode = mode;
  return options;
}

// a -> b: `a_data`; b -> a: `b_data`; both FIN at the end. Returns after
// the relay is done and the peers are joined.
void Transfer(Harness& h, const std::vector<uint8_t>& a_data,
              const std::vector<uint8_t>& b_data) {
  Peer pa(h.a().peer);
  Peer pb(h.b().peer);
  pa.StartWriter(a_data, {.seed = 1});
  pb.StartWriter(b_data, {.seed = 2});
  pa.StartReader({.seed = 3});
  pb.StartReader({.seed = 4});
  const bool done = h.Finish(pa, pb);
  ASSERT_TRUE(done);
  EXPECT_TRUE(h.status().ok()) << h.status();
  EXPECT_TRUE(SameBytes(pb.received(), a_data));
  EXPECT_TRUE(SameBytes(pa.received(), b_data));
}

// --- kAuto -------------------------------------------------------------

// Request/response of 100 bytes: every read is small, so nothing splices.
TEST(RelayAutoTest, SmallMessagesStayOnCopy) {
  Harness h;
  h.MakeLegs(LegKind::kTcp4, LegKind::kTcp4);
  h.Start(Mode(RelayMode::kAuto));
  constexpr int kRounds = 300;
  constexpr size_t kMessage = 100;
  const int a = h.a().peer;
  const int b = h.b().peer;
  std::atomic<bool> ok_a{false};
  std::atomic<bool> ok_b{false};
  std::thread client([a, &ok_a] {
    const std::vector<uint8_t> msg = test::SeededBytes(kMessage, 5);
    std::vector<uint8_t> back(kMessage);
    for (int i = 0; i < kRounds; ++i) {
      if (!SendAll(a, msg.data(), kMessage)) return;
      if (!RecvAll(a, back.data(), kMessage) || back != msg) return;
    }
    shutdown(a, SHUT_WR);
    ok_a = recv(a, back.data(), 1, 0) == 0;
  });
  std::thread server([b, &ok_b] {
    std::vector<uint8_t> msg(kMessage);
    for (int i = 0; i < kRounds; ++i) {
      if (!RecvAll(b, msg.data(), kMessage)) return;
      if (!SendAll(b, msg.data(), kMessage)) return;
    }
    ok_b = recv(b, msg.data(), 1, 0) == 0;
    shutdown(b, SHUT_WR);
  });
  const bool done = h.WaitDone();
  if (!done) {
    shutdown(a, SHUT_RDWR);
    shutdown(b, SHUT_RDWR);
  }
  client.join();
  server.join();
  close(a);
  close(b);
  ASSERT_TRUE(done);
  EXPECT_TRUE(h.status().ok()) << h.status();
  EXPECT_TRUE(ok_a && ok_b);
  for (const DirectionStats* s : {&h.stats().a_to_b, &h.stats().b_to_a}) {
    EXPECT_EQ(s->bytes, kRounds * kMessage);
    EXPECT_EQ(s->copy_bytes, kRounds * kMessage);
    EXPECT_EQ(s->splice_syscalls, 0u);
  }
  EXPECT_EQ(h.pool().stats().created, 0u);
}

// 1 MiB writes: reads fill the buffer, the direction moves to splice after
// its first buffer, and the bulk goes through the pipe.
TEST(RelayAutoTest, BulkMovesToSplice) {
  SKIP_UNLESS_KERNEL_GRANTS_PIPES();
  Harness h;
  h.MakeLegs(LegKind::kTcp4, LegKind::kUnix);
  h.Start(Mode(RelayMode::kAuto));
  const std::vector<uint8_t> data = test::SeededBytes(16 * kMiB, 6);
  Peer pa(h.a().peer);
  Peer pb(h.b().peer);
  pa.StartWriter(data, {.min_chunk = kMiB, .max_chunk = kMiB, .seed = 7});
  pb.StartWriter({}, {});
  pa.StartReader({});
  pb.StartReader({});
  ASSERT_TRUE(h.WaitDone());
  pa.Join();
  pb.Join();
  EXPECT_TRUE(h.status().ok()) << h.status();
  EXPECT_TRUE(SameBytes(pb.received(), data));
  const DirectionStats& s = h.stats().a_to_b;
  EXPECT_EQ(s.bytes, data.size());
  EXPECT_EQ(s.splice_bytes + s.copy_bytes, s.bytes);
  EXPECT_GT(s.copy_bytes, 0u);  // the first buffer decides
  EXPECT_GT(s.splice_bytes, data.size() / 2);
  EXPECT_FALSE(s.fell_back_no_pipe);
}

// A TCP writer's 1 KiB segments queue up while the relay is not reading,
// so the relay's first read is 48 KiB, far above the threshold. Returns
// the a -> b stats.
DirectionStats SmallTcpSegments(const RelayOptions& options,
                                PipePool::Options pool_options = {}) {
  Harness h(pool_options);
  h.MakeLegs(LegKind::kTcp4, LegKind::kUnix);
  h.Start(options);
  const int one = 1;
  EXPECT_EQ(setsockopt(h.a().peer, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)),
            0);
  constexpr size_t kChunk = 1024;
  constexpr int kChunks = 48;
  const std::vector<uint8_t> data = test::SeededBytes(kChunk * kChunks, 21);
  for (int i = 0; i < kChunks; ++i) {
    EXPECT_TRUE(SendAll(h.a().peer, data.data() + i * kChunk, kChunk));
  }
  EXPECT_EQ(shutdown(h.a().peer, SHUT_WR), 0);
  Peer pa(h.a().peer);
  Peer pb(h.b().peer);
  pb.StartWriter({}, {});
  pa.StartReader({});
  pb.StartReader({});
  const bool done = h.Finish(pa, pb);
  EXPECT_TRUE(done);
  EXPECT_TRUE(h.status().ok()) << h.status();
  EXPECT_TRUE(SameBytes(pb.received(), data));
  EXPECT_EQ(h.stats().a_to_b.bytes, data.size());
  return h.stats().a_to_b;
}

// ... and its segments are small (tcpi_rcv_mss 1024): kAuto keeps copying.
TEST(RelayAutoTest, LargeReadOfSmallTcpSegmentsStaysOnCopy) {
  const DirectionStats s = SmallTcpSegments(Mode(RelayMode::kAuto));
  EXPECT_EQ(s.splice_syscalls, 0u);
  EXPECT_EQ(s.copy_bytes, s.bytes);
  EXPECT_EQ(s.segment_vetoes, 1u);
}

// With the segment check off, the same large read moves to splice.
TEST(RelayAutoTest, MinSegmentZeroTurnsTheCheckOff) {
  SKIP_UNLESS_KERNEL_GRANTS_PIPES();
  RelayOptions options = Mode(RelayMode::kAuto);
  options.auto_splice_min_segment = 0;
  const DirectionStats s = SmallTcpSegments(options);
  EXPECT_EQ(s.segment_vetoes, 0u);
  EXPECT_GT(s.splice_syscalls, 0u);
  EXPECT_GE(s.pipe_acquires, 1u);
}

// 48 KiB in 1 KiB writes (TCP_NODELAY on a TCP writer) queue up before
// the relay runs, so its first read is 48 KiB; once they have arrived the
// writer sends `bulk_bytes` more in `bulk_chunk` writes. Returns the
// a -> b stats after checking every byte.
DirectionStats SmallWritesThenBulk(LegKind source, size_t bulk_bytes,
                                   size_t bulk_chunk) {
  Harness h;
  h.MakeLegs(source,
             source == LegKind::kUnix ? LegKind::kTcp4 : LegKind::kUnix);
  h.Start(Mode(RelayMode::kAuto));
  if (source != LegKind::kUnix) {
    const int one = 1;
    EXPECT_EQ(
        setsockopt(h.a().peer, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)), 0);
  }
  constexpr size_t kChunk = 1024;
  constexpr int kChunks = 48;
  const std::vector<uint8_t> small = test::SeededBytes(kChunk * kChunks, 26);
  for (int i = 0; i < kChunks; ++i) {
    EXPECT_TRUE(SendAll(h.a().peer, small.data() + i * kChunk, kChunk));
  }
  Peer pa(h.a().peer);
  Peer pb(h.b().peer);
  pb.StartWriter({}, {});
  pb.StartReader({});
  EXPECT_TRUE(h.RunUntil([&] { return pb.received_so_far() == small.size(); }));
  const std::vector<uint8_t> bulk = test::SeededBytes(bulk_bytes, 27);
  pa.StartWriter(bulk,
                 {.min_chunk = bulk_chunk, .max_chunk = bulk_chunk, .seed = 4});
  pa.StartReader({});
  const bool done = h.Finish(pa, pb);
  EXPECT_TRUE(done);
  EXPECT_TRUE(h.status().ok()) << h.status();
  std::vector<uint8_t> want = small;
  want.insert(want.end(), bulk.begin(), bulk.end());
  EXPECT_TRUE(SameBytes(pb.received(), want));
  EXPECT_EQ(h.stats().a_to_b.bytes, want.size());
  return h.stats().a_to_b;
}

// A check that fails on copy is made again 32 large reads later: the same
// writer's 1 MiB writes that follow (large segments now) are spliced.
TEST(RelayAutoTest, SegmentVetoOnCopyIsCheckedAgain) {
  SKIP_UNLESS_KERNEL_GRANTS_PIPES();
  const DirectionStats s = SmallWritesThenBulk(LegKind::kTcp4, 8 * kMiB, kMiB);
  EXPECT_EQ(s.segment_vetoes, 1u);
  EXPECT_GT(s.splice_bytes, 0u);
  // The 32 large reads (>= 16 KiB each) after the veto are copied.
  EXPECT_GE(s.copy_bytes, 48u * 1024 + 32 * 16 * 1024);
}

// The same from a UNIX writer: no segment size to check, so the first
// large read moves the direction to splice, and the bulk goes through the
// pipe.
TEST(RelayAutoTest, LargeReadFromUnixSourceSplices) {
  SKIP_UNLESS_KERNEL_GRANTS_PIPES();
  const DirectionStats s = SmallWritesThenBulk(LegKind::kUnix, kMiB, 64 * 1024);
  EXPECT_EQ(s.segment_vetoes, 0u);
  EXPECT_GT(s.splice_bytes, 0u);
  EXPECT_GE(s.copy_bytes, 48u * 1024);
}

// Bulk first (splice), then small request/response: the direction goes
// back to copying.
TEST(RelayAutoTest, ReturnsToCopyWhenMessagesTurnSmall) {
  SKIP_UNLESS_KERNEL_GRANTS_PIPES();
  Harness h;
  h.MakeLegs(LegKind::kTcp4, LegKind::kTcp4);
  h.Start(Mode(RelayMode::kAuto));
  const int a = h.a().peer;
  const int b = h.b().peer;
  const std::vector<uint8_t> bulk = test::SeededBytes(8 * kMiB, 8);
  constexpr int kRounds = 200;
  constexpr size_t kMessage = 100;
  std::atomic<bool> bulk_received{false};
  std::atomic<bool> go{false};
  std::atomic<bool> ok{false};
  std::thread client([&] {
    if (!SendAll(a, bulk.data(), bulk.size())) return;
    while (!go) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    std::vector<uint8_t> msg(kMessage, 0x5a);
    for (int i = 0; i < kRounds; ++i) {
      if (!SendAll(a, msg.data(), kMessage) ||
          !RecvAll(a, msg.data(), kMessage)) {
        return;
      }
    }
    shutdown(a, SHUT_WR);
    ok = recv(a, msg.data(), 1, 0) == 0;
  });
  std::thread server([&] {
    std::vector<uint8_t> got(bulk.size());
    if (!RecvAll(b, got.data(), got.size()) || got != bulk) return;
    bulk_received = true;
    std::vector<uint8_t> msg(kMessage);
    for (int i = 0; i < kRounds; ++i) {
      if (!RecvAll(b, msg.data(), kMessage) ||
          !SendAll(b, msg.data(), kMessage)) {
        return;
      }
    }
    recv(b, msg.data(), 1, 0);
    shutdown(b, SHUT_WR);
  });
  const bool bulk_done = h.RunUntil([&] { return bulk_received.load(); });
  RelayStats after_bulk;
  if (bulk_done && h.relay() != nullptr) after_bulk = h.relay()->stats();
  go = true;
  const bool done = bulk_done && h.WaitDone();
  if (!done) {
    shutdown(a, SHUT_RDWR);
    shutdown(b, SHUT_RDWR);
  }
  client.join();
  server.join();
  close(a);
  close(b);
  ASSERT_TRUE(done);
  EXPECT_TRUE(ok);
  EXPECT_GT(after_bulk.a_to_b.splice_bytes, 0u);
  const DirectionStats& s = h.stats().a_to_b;
  EXPECT_EQ(s.bytes, bulk.size() + kRounds * kMessage);
  // All but the few small reads that decide stay on copy.
  EXPECT_GE(s.copy_bytes - after_bulk.a_to_b.copy_bytes,
            (kRounds - 10) * kMessage);
}

TEST(RelayAutoTest, ThresholdAboveBufferMeansFullBuffer) {
  SKIP_UNLESS_KERNEL_GRANTS_PIPES();
  // A threshold no read can reach is capped at the buffer size, so bulk
  // still splices.
  Harness h;
  h.MakeLegs(LegKind::kUnix, LegKind::kUnix);
  RelayOptions options = Mode(RelayMode::kAuto);
  options.auto_splice_threshold = size_t{1} << 40;
  options.copy_buffer_size = 16 * 1024;
  h.Start(options);
  const std::vector<uint8_t> data = test::SeededBytes(8 * kMiB, 9);
  Transfer(h, data, {});
  EXPECT_GT(h.stats().a_to_b.splice_bytes, 0u);
}

// --- EINVAL ------------------------------------------------------------

bool IsPipe(int fd) {
  struct stat st;
  return fstat(fd, &st) == 0 && S_ISFIFO(st.st_mode);
}

// A kernel before 6.5 answers EINVAL to splice from a socket type without
// splice_read; this one never does, so the seam stands in for it.
ssize_t SpliceInSaysEinval(int fd_in, int fd_out, size_t len,
                           unsigned int flags) {
  if (IsPipe(fd_out)) {
    errno = EINVAL;
    return -1;
  }
  return splice(fd_in, nullptr, fd_out, nullptr, len, flags);
}

class SpliceSeam {
 public:
  explicit SpliceSeam(testing::SpliceFunction fn)
      : old_(testing::SetSpliceFunctionForTesting(fn)) {}
  ~SpliceSeam() { testing::SetSpliceFunctionForTesting(old_); }

 private:
  testing::SpliceFunction old_;
};

TEST(RelayEinvalTest, SpliceInEinvalBeforeAnyByteFallsBackToCopy) {
  SKIP_UNLESS_KERNEL_GRANTS_PIPES();
  SpliceSeam seam(&SpliceInSaysEinval);
  Harness h;
  h.MakeLegs(LegKind::kUnix, LegKind::kTcp4);
  h.Start(Mode(RelayMode::kSplice));
  const std::vector<uint8_t> a_data = test::SeededBytes(2 * kMiB + 1, 10);
  const std::vector<uint8_t> b_data = test::SeededBytes(kMiB + 7, 11);
  Transfer(h, a_data, b_data);
  for (const DirectionStats* s : {&h.stats().a_to_b, &h.stats().b_to_a}) {
    EXPECT_TRUE(s->fell_back_einval);
    EXPECT_FALSE(s->fell_back_no_pipe);
    EXPECT_EQ(s->splice_bytes, 0u);
    EXPECT_EQ(s->copy_bytes, s->bytes);
    EXPECT_EQ(s->splice_syscalls, 1u);  // the one that said EINVAL
  }
  EXPECT_EQ(h.stats().a_to_b.bytes, a_data.size());
  EXPECT_EQ(h.pool().stats().in_use, 0u);
}

int g_einval_fd = -1;
int g_einval_after = 0;

// splice-in from g_einval_fd works g_einval_after times, then says EINVAL.
ssize_t SpliceInEinvalLater(int fd_in, int fd_out, size_t len,
                            unsigned int flags) {
  if (fd_in == g_einval_fd && IsPipe(fd_out)) {
    if (g_einval_after == 0) {
      errno = EINVAL;
      return -1;
    }
    const ssize_t n = splice(fd_in, nullptr, fd_out, nullptr, len, flags);
    if (n > 0) --g_einval_after;
    return n;
  }
  return splice(fd_in, nullptr, fd_out, nullptr, len, flags);
}

TEST(RelayEinvalTest, SpliceInEinvalAfterBytesMovedFailsNamingTheLeg) {
  SKIP_UNLESS_KERNEL_GRANTS_PIPES();
  SpliceSeam seam(&SpliceInEinvalLater);
  Harness h;
  h.MakeLegs(LegKind::kTcp4, LegKind::kTcp4);
  g_einval_fd = h.a().relay;
  g_einval_after = 2;
  h.Start(Mode(RelayMode::kSplice));
  Peer pa(h.a().peer);
  Peer pb(h.b().peer);
  pa.StartWriter(test::SeededBytes(8 * kMiB, 12), {.seed = 1});
  pa.StartReader({});
  pb.StartReader({});
  const bool done = h.Finish(pa, pb);
  ASSERT_TRUE(done);
  EXPECT_EQ(h.status().code(), absl::StatusCode::kInvalidArgument)
      << h.status();
  EXPECT_NE(std::string(h.status().message()).find("relay leg a"),
            std::string::npos)
      << h.status();
  EXPECT_FALSE(h.stats().a_to_b.fell_back_einval);
  EXPECT_GT(h.stats().a_to_b.splice_bytes, 0u);
  EXPECT_FALSE(test::FdIsOpen(h.a().relay));
  EXPECT_FALSE(test::FdIsOpen(h.b().relay));
  EXPECT_EQ(h.pool().stats().in_use, 0u);
}

// Real EINVAL from the kernel: splice(2) refuses an O_APPEND destination,
// and a socket takes O_APPEND. The first splice-out fails with bytes
// already in the pipe; they are read back and sent, in order.
TEST(RelayEinvalTest, SpliceOutEinvalOnAppendSocketFallsBackInOrder) {
  SKIP_UNLESS_KERNEL_GRANTS_PIPES();
  Harness h;
  h.MakeLegs(LegKind::kTcp4, LegKind::kUnix);
  const int b = h.b().relay;
  ASSERT_EQ(fcntl(b, F_SETFL, fcntl(b, F_GETFL) | O_APPEND), 0);
  h.Start(Mode(RelayMode::kSplice));
  const std::vector<uint8_t> a_data = test::SeededBytes(3 * kMiB + 3, 13);
  const std::vector<uint8_t> b_data = test::SeededBytes(2 * kMiB + 1, 14);
  Transfer(h, a_data, b_data);
  const DirectionStats& to_b = h.stats().a_to_b;
  EXPECT_TRUE(to_b.fell_back_einval);
  EXPECT_EQ(to_b.splice_bytes, 0u);
  EXPECT_EQ(to_b.copy_bytes, a_data.size());
  // b -> a writes into a, which splices fine.
  const DirectionStats& to_a = h.stats().b_to_a;
  EXPECT_FALSE(to_a.fell_back_einval);
  EXPECT_EQ(to_a.splice_bytes, b_data.size());
  EXPECT_EQ(to_a.copy_bytes, 0u);
  EXPECT_EQ(h.pool().stats().closed_with_data, 0u);
}

// --- No pipe -----------------------------------------------------------

TEST(RelayPoolTest, NoPipesAtAllMeansCopy) {
  for (RelayMode mode : {RelayMode::kSplice, RelayMode::kAuto}) {
    SCOPED_TRACE(std::string(RelayModeName(mode)));
    Harness h(PipePool::Options{.max_pipes = 0});
    h.MakeLegs(LegKind::kTcp4, LegKind::kTcp6);
    h.Start(Mode(mode));
    const std::vector<uint8_t> a_data = test::SeededBytes(4 * kMiB, 15);
    const std::vector<uint8_t> b_data = test::SeededBytes(4 * kMiB, 16);
    Transfer(h, a_data, b_data);
    for (const DirectionStats* s : {&h.stats().a_to_b, &h.stats().b_to_a}) {
      EXPECT_TRUE(s->fell_back_no_pipe);
      EXPECT_FALSE(s->fell_back_einval);
      EXPECT_EQ(s->splice_bytes, 0u);
      EXPECT_EQ(s->splice_syscalls, 0u);
      EXPECT_EQ(s->copy_bytes, s->bytes);
    }
    EXPECT_EQ(h.pool().stats().acquire_failed, 2u);
    EXPECT_EQ(h.pool().stats().created, 0u);
  }
}

// One pipe for two directions, used one after the other: a -> b gives its
// pipe back once it has drained and its source is idle (no FIN yet), and
// b -> a then splices through the same pipe.
TEST(RelayPoolTest, IdleDirectionGivesItsPipeBack) {
  SKIP_UNLESS_KERNEL_GRANTS_PIPES();
  Harness h(PipePool::Options{.max_pipes = 1});
  h.MakeLegs(LegKind::kUnix, LegKind::kTcp4);
  h.Start(Mode(RelayMode::kSplice));
  const std::vector<uint8_t> a_data = test::SeededBytes(2 * kMiB, 17);
  const std::vector<uint8_t> b_data = test::SeededBytes(2 * kMiB, 18);
  Peer pa(h.a().peer);
  Peer pb(h.b().peer);
  pa.StartWriter(a_data, {.shutdown_at_end = false, .seed = 1});
  pa.StartReader({});
  pb.StartReader({});
  ASSERT_TRUE(
      h.RunUntil([&] { return pb.received_so_far() == a_data.size(); }));
  // a's writer is done but has not shut down: a -> b is idle, not over.
  ASSERT_TRUE(h.RunUntil([&] { return h.pool().stats().in_use == 0; }));
  EXPECT_EQ(h.pool().stats().pooled, 1u);
  pb.StartWriter(b_data, {.seed = 2});
  ASSERT_TRUE(
      h.RunUntil([&] { return pa.received_so_far() == b_data.size(); }));
  ASSERT_EQ(shutdown(h.a().peer, SHUT_WR), 0);
  const bool done = h.Finish(pa, pb);
  ASSERT_TRUE(done);
  EXPECT_TRUE(h.status().ok()) << h.status();
  EXPECT_TRUE(SameBytes(pb.received(), a_data));
  EXPECT_TRUE(SameBytes(pa.received(), b_data));
  for (const DirectionStats* s : {&h.stats().a_to_b, &h.stats().b_to_a}) {
    EXPECT_FALSE(s->fell_back_no_pipe);
    EXPECT_EQ(s->splice_bytes, s->bytes);
    EXPECT_GE(s->pipe_acquires, 1u);
  }
  EXPECT_EQ(h.pool().stats().created, 1u);
  EXPECT_GE(h.pool().stats().reused, 1u);
  EXPECT_EQ(h.pool().stats().pooled, 1u);
}

// One pipe for two busy directions: a -> b holds it full (b reads nothing
// yet), so b -> a finds the pool empty and copies, and nothing is lost.
TEST(RelayPoolTest, BusyDirectionKeepsItsPipe) {
  SKIP_UNLESS_KERNEL_GRANTS_PIPES();
  Harness h(PipePool::Options{.max_pipes = 1});
  h.MakeLegs(LegKind::kUnix, LegKind::kTcp4);
  h.Start(Mode(RelayMode::kSplice));
  // More than the pipe and both sockets' buffers hold while b is not read.
  const std::vector<uint8_t> a_data = test::SeededBytes(16 * kMiB, 19);
  const std::vector<uint8_t> b_data = test::SeededBytes(2 * kMiB, 20);
  Peer pa(h.a().peer);
  Peer pb(h.b().peer);
  pa.StartWriter(a_data, {.seed = 1});
  pa.StartReader({});
  ASSERT_TRUE(h.RunUntil([&] { return h.pool().stats().in_use == 1; }));
  test::RunFor(h.loop(), absl::Milliseconds(200));
  ASSERT_EQ(h.pool().stats().in_use, 1u);  // a -> b's pipe holds bytes
  pb.StartWriter(b_data, {.seed = 2});
  ASSERT_TRUE(
      h.RunUntil([&] { return pa.received_so_far() == b_data.size(); }));
  pb.StartReader({});
  const bool done = h.Finish(pa, pb);
  ASSERT_TRUE(done);
  EXPECT_TRUE(h.status().ok()) << h.status();
  EXPECT_TRUE(SameBytes(pb.received(), a_data));
  EXPECT_TRUE(SameBytes(pa.received(), b_data));
  EXPECT_FALSE(h.stats().a_to_b.fell_back_no_pipe);
  EXPECT_EQ(h.stats().a_to_b.splice_bytes, a_data.size());
  EXPECT_TRUE(h.stats().b_to_a.fell_back_no_pipe);
  EXPECT_EQ(h.stats().b_to_a.copy_bytes, b_data.size());
  EXPECT_EQ(h.pool().stats().created, 1u);
}

// Two relays share a pool of one pipe. Relay 1 splices a burst and goes
// idle, so its pipe goes back to the pool; relay 2 takes it and keeps it
// full (its reader waits). Relay 1's next burst finds the pool empty: it
// copies a while without giving up on splice (pipe_shortages, not
// fell_back_no_pipe), and splices again once relay 2 has let go.
TEST(RelayPoolTest, ShortageCopiesAWhileThenSplicesAgain) {
  SKIP_UNLESS_KERNEL_GRANTS_PIPES();
  auto loop_or = eventloop::EventLoop::Create();
  ASSERT_TRUE(loop_or.ok());
  eventloop::EventLoop& loop = **loop_or;
  PipePool pool(PipePool::Options{.max_pipes = 1});
  struct Side {
    test::Leg a, b;
    std::unique_ptr<Relay> relay;
    bool done = false;
    absl::Status status;
    RelayStats stats;
  };
  Side r1, r2;
  for (Side* r : {&r1, &r2}) {
    auto a = test::MakeLeg(LegKind::kUnix);
    auto b = test::MakeLeg(LegKind::kTcp4);
    ASSERT_TRUE(a.ok() && b.ok());
    r->a = *a;
    r->b = *b;
    auto relay = Relay::Create(loop, pool, r->a.relay, r->b.relay,
                               Mode(RelayMode::kSplice),
                               [r](Relay& relay, absl::Status status) {
                                 r->done = true;
                                 r->status = status;
                                 r->stats = relay.stats();
                               });
    ASSERT_TRUE(relay.ok()) << relay.status();
    r->relay = *std::move(relay);
  }
  auto run = [&](absl::FunctionRef<bool()> done) {
    return test::RunUntil(loop, done, kTimeout);
  };
  const std::vector<uint8_t> data = test::SeededBytes(13 * kMiB, 24);
  Peer r1_reader(r1.b.peer);
  r1_reader.StartReader({});
  auto send_part = [&](size_t from, size_t to) {
    std::atomic<bool> sent{false};
    std::thread t([&] {
      SendAll(r1.a.peer, data.data() + from, to - from);
      sent = true;
    });
    const bool ok =
        run([&] { return sent.load() && r1_reader.received_so_far() == to; });
    if (!ok) shutdown(r1.a.peer, SHUT_RDWR);
    t.join();
    return ok;
  };
  // 1: relay 1 splices 1 MiB and goes idle.
  ASSERT_TRUE(send_part(0, kMiB));
  ASSERT_TRUE(run([&] { return pool.stats().in_use == 0; }));
  const RelayStats first = r1.relay->stats();
  EXPECT_EQ(first.a_to_b.splice_bytes, kMiB);
  // 2: relay 2 takes the pipe and keeps it full.
  const std::vector<uint8_t> other = test::SeededBytes(16 * kMiB, 25);
  Peer r2_writer(r2.a.peer);
  r2_writer.StartWriter(other, {.seed = 5});
  ASSERT_TRUE(run([&] { return pool.stats().in_use == 1; }));
  test::RunFor(loop, absl::Milliseconds(200));
  ASSERT_EQ(pool.stats().in_use, 1u);
  // 3: relay 1's next 4 MiB find no pipe and are copied.
  ASSERT_TRUE(send_part(kMiB, 5 * kMiB));
  const RelayStats shortage = r1.relay->stats();
  EXPECT_GE(shortage.a_to_b.pipe_shortages, 1u);
  EXPECT_FALSE(shortage.a_to_b.fell_back_no_pipe);
  EXPECT_GT(shortage.a_to_b.copy_bytes, 0u);
  // 4: relay 2's reader drains it, both its directions end.
  Peer r2_reader(r2.b.peer);
  r2_reader.StartReader({});
  r2_reader.StartWriter({}, {});
  ASSERT_TRUE(run([&] { return r2.done; }));
  r2_writer.Join();
  r2_reader.Join();
  EXPECT_TRUE(r2.status.ok()) << r2.status;
  EXPECT_TRUE(SameBytes(r2_reader.received(), other));
  // 5: relay 1's last 8 MiB splice again.
  ASSERT_TRUE(send_part(5 * kMiB, data.size()));
  ASSERT_EQ(shutdown(r1.a.peer, SHUT_WR), 0);
  ASSERT_EQ(shutdown(r1.b.peer, SHUT_WR), 0);
  ASSERT_TRUE(run([&] { return r1.done; }));
  r1_reader.Join();
  EXPECT_TRUE(r1.status.ok()) << r1.status;
  EXPECT_TRUE(SameBytes(r1_reader.received(), data));
  const DirectionStats& s = r1.stats.a_to_b;
  EXPECT_GT(s.splice_bytes, shortage.a_to_b.splice_bytes);
  EXPECT_EQ(s.splice_bytes + s.copy_bytes, data.size());
  EXPECT_FALSE(s.fell_back_no_pipe);
  EXPECT_EQ(pool.stats().created, 1u);
  close(r1.a.peer);
}

// --- Hang-ups, destruction, fds ------------------------------------------

// a's UNIX peer writes 8 MiB and closes its socket while the relay still
// has bytes of it queued (b reads slowly, so the relay cannot keep up).
// A UNIX socket whose peer closed is EPOLLHUP at once, queued bytes or
// not: the relay takes a out of the loop, still delivers every byte, then
// finishes normally.
TEST(RelayHangupTest, UnixPeerClosesWithBytesQueued) {
  for (RelayMode mode :
       {RelayMode::kSplice, RelayMode::kCopy, RelayMode::kAuto}) {
    SCOPED_TRACE(std::string(RelayModeName(mode)));
    Harness h;
    h.MakeLegs(LegKind::kUnix, LegKind::kTcp4, {.peer_rcvbuf = 64 * 1024});
    h.Start(Mode(mode));
    const std::vector<uint8_t> data = test::SeededBytes(8 * kMiB, 19);
    const int a = h.a().peer;
    std::atomic<bool> closed{false};
    std::thread writer([&] {
      SendAll(a, data.data(), data.size());
      close(a);
      closed = true;
    });
    std::atomic<bool> gate{false};
    Peer pb(h.b().peer);
    pb.StartReader({.min_read = 512,
                    .max_read = 8192,
                    .gate = &gate,
                    .pause_every = 8,
                    .pause = absl::Milliseconds(1)});
    pb.StartWriter({}, {});
    test::RunFor(h.loop(), absl::Milliseconds(100));
    gate = true;
    const bool done = h.WaitDone();
    if (!done) {
      pb.Abort();
      if (!closed) shutdown(a, SHUT_RDWR);
    }
    writer.join();
    pb.Join();
    ASSERT_TRUE(done);
    EXPECT_TRUE(h.status().ok()) << h.status();
    EXPECT_TRUE(SameBytes(pb.received(), data));
    EXPECT_TRUE(pb.eof());
    EXPECT_EQ(h.stats().a_to_b.bytes, data.size());
  }
}

TEST(RelayLifetimeTest, DestroyedMidTransferClosesFdsAndDropsFullPipe) {
  SKIP_UNLESS_KERNEL_GRANTS_PIPES();
  Harness h(PipePool::Options{});
  h.MakeLegs(LegKind::kTcp4, LegKind::kTcp4, {.peer_rcvbuf = 64 * 1024});
  h.Start(Mode(RelayMode::kSplice));
  std::atomic<bool> gate{false};
  Peer pa(h.a().peer);
  Peer pb(h.b().peer);
  pa.StartWriter(test::SeededBytes(16 * kMiB, 20), {.seed = 1});
  pa.StartReader({});
  pb.StartReader({.gate = &gate});
  ASSERT_TRUE(h.RunUntil([&] {
    return h.relay() != nullptr && h.relay()->stats().a_to_b.would_block > 0;
  }));
  test::RunFor(h.loop(), absl::Milliseconds(50));
  h.DestroyRelay();
  EXPECT_EQ(h.done_calls(), 0);
  EXPECT_FALSE(test::FdIsOpen(h.a().relay));
  EXPECT_FALSE(test::FdIsOpen(h.b().relay));
  EXPECT_EQ(h.pool().stats().in_use, 0u);
  EXPECT_GE(h.pool().stats().closed_with_data, 1u);
  gate = true;
  pa.Abort();
  pb.Abort();
  pa.Join();
  pb.Join();
}

// 200 relays over every leg kind and mode, one in five ending with a
// reset: afterwards, with the pool gone, the fd count is what it was.
TEST(RelayLifetimeTest, FdCountReturnsToBaselineAfter200Relays) {
  auto loop = eventloop::EventLoop::Create();
  ASSERT_TRUE(loop.ok());
  const int baseline = test::CountOpenFds();
  ASSERT_GT(baseline, 0);
  constexpr int kRelays = 200;
  constexpr int kBatch = 10;
  const LegKind kinds[] = {LegKind::kTcp4, LegKind::kTcp6, LegKind::kUnix};
  const RelayMode modes[] = {RelayMode::kSplice, RelayMode::kCopy,
                             RelayMode::kAuto};
  {
    PipePool pool(PipePool::Options{});
    int finished = 0;
    int failed = 0;
    for (int first = 0; first < kRelays; first += kBatch) {
      std::vector<std::unique_ptr<Relay>> relays(kBatch);
      std::vector<std::unique_ptr<Peer>> peers;
      std::vector<std::thread> resetters;
      int batch_done = 0;
      for (int i = 0; i < kBatch; ++i) {
        const int n = first + i;
        auto a = test::MakeLeg(kinds[n % 3]);
        auto b = test::MakeLeg(kinds[(n / 3) % 3]);
        ASSERT_TRUE(a.ok() && b.ok());
        RelayOptions options;
        options.mode = modes[(n / 9) % 3];
        auto relay = Relay::Create(**loop, pool, a->relay, b->relay, options,
                                   [&, i](Relay&, absl::Status status) {
                                     ++batch_done;
                                     ++finished;
                                     if (!status.ok()) ++failed;
                                     relays[static_cast<size_t>(i)].reset();
                                   });
        ASSERT_TRUE(relay.ok());
        relays[static_cast<size_t>(i)] = *std::move(relay);
        auto pa = std::make_unique<Peer>(a->peer);
        pa->StartWriter(test::SeededBytes(64 * 1024, n), {.seed = 1});
        pa->StartReader({});
        if (n % 5 == 4) {
          const int bp = b->peer;
          resetters.emplace_back([bp] {
            char buf[4096];
            recv(bp, buf, sizeof(buf), 0);
            const linger lin = {1, 0};
            setsockopt(bp, SOL_SOCKET, SO_LINGER, &lin, sizeof(lin));
            close(bp);
          });
        } else {
          auto pb = std::make_unique<Peer>(b->peer);
          pb->StartWriter(test::SeededBytes(32 * 1024, n + 1), {.seed = 2});
          pb->StartReader({});
          peers.push_back(std::move(pb));
        }
        peers.push_back(std::move(pa));
      }
      const bool done = test::RunUntil(
          **loop, [&] { return batch_done == kBatch; }, kTimeout);
      for (auto& p : peers) {
        if (!done) p->Abort();
        p->Join();
      }
      for (auto& t : resetters) t.join();
      ASSERT_TRUE(done) << "batch at " << first;
    }
    EXPECT_EQ(finished, kRelays);
    EXPECT_GE(failed, kRelays / 5 / 2);  // most resets surface as errors
    EXPECT_EQ(pool.stats().in_use, 0u);
    // While the pool lives, its pipes are the only extra fds.
    EXPECT_EQ(test::CountOpenFds(),
              baseline + 2 * static_cast<int>(pool.stats().pooled));
  }
  EXPECT_EQ(test::CountOpenFds(), baseline);
}

// --- Create --------------------------------------------------------------

TEST(RelayCreateTest, RejectsInvalidFdsAndClosesThem) {
  auto loop = eventloop::EventLoop::Create();
  ASSERT_TRUE(loop.ok());
  PipePool pool(PipePool::Options{});
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  auto same = Relay::Create(**loop, pool, sv[0], sv[0], {}, nullptr);
  EXPECT_EQ(same.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(test::FdIsOpen(sv[0]));
  auto negative = Relay::Create(**loop, pool, -1, sv[1], {}, nullptr);
  EXPECT_EQ(negative.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(test::FdIsOpen(sv[1]));
}

class NullHandler : public eventloop::Handler {};

TEST(RelayCreateTest, LoopRefusalClosesBothFds) {
  auto loop = eventloop::EventLoop::Create();
  ASSERT_TRUE(loop.ok());
  PipePool pool(PipePool::Options{});
  auto a = test::MakeLeg(LegKind::kUnix);
  auto b = test::MakeLeg(LegKind::kUnix);
  ASSERT_TRUE(a.ok() && b.ok());
  NullHandler other;
  ASSERT_TRUE((*loop)->Add(b->relay, 0, &other).ok());  // b is taken
  auto relay = Relay::Create(**loop, pool, a->relay, b->relay, {}, nullptr);
  EXPECT_EQ(relay.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_FALSE(test::FdIsOpen(a->relay));
  EXPECT_FALSE(test::FdIsOpen(b->relay));
  EXPECT_FALSE((*loop)->IsRegistered(a->relay));
  EXPECT_TRUE((*loop)->Remove(b->relay).ok());
  close(a->peer);
  close(b->peer);
}

TEST(RelayCreateTest, TcpNoDelayOnTcpLegsOnly) {
  for (bool nodelay : {true, false}) {
    Harness h;
    h.MakeLegs(LegKind::kTcp6, LegKind::kUnix);
    RelayOptions options;
    options.tcp_nodelay = nodelay;
    h.Start(options);
    int value = -1;
    socklen_t len = sizeof(value);
    ASSERT_EQ(getsockopt(h.a().relay, IPPROTO_TCP, TCP_NODELAY, &value, &len),
              0);
    EXPECT_EQ(value != 0, nodelay);
    EXPECT_TRUE(fcntl(h.a().relay, F_GETFL) & O_NONBLOCK);
    EXPECT_TRUE(fcntl(h.b().relay, F_GETFL) & O_NONBLOCK);
    close(h.a().peer);
    close(h.b().peer);
  }
}

TEST(RelayModeTest, NamesRoundTrip) {
  for (RelayMode mode :
       {RelayMode::kSplice, RelayMode::kCopy, RelayMode::kAuto}) {
    EXPECT_EQ(ParseRelayMode(RelayModeName(mode)), mode);
  }
  EXPECT_EQ(ParseRelayMode("zerocopy"), std::nullopt);
  EXPECT_EQ(ParseRelayMode(""), std::nullopt);
  EXPECT_EQ(RelayOptions{}.auto_splice_threshold, kDefaultAutoSpliceThreshold);
}

}  // namespace
}  // namespace netstack::forward
