// One-shot relay throughput: a writer child sends --bytes in --chunk
// writes through the relay to a reader child (Go's benchmark layout: only
// the relay runs in this process), and the parent reports wall time, MB/s,
// its own CPU seconds per GB and the relay's counters.
//
//   bazel run --config=opt //netstack/forward:relay_throughput --
//       --mode=splice --leg_case=tcp_to_tcp --bytes=1073741824
//       --chunk=1048576
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "netstack/eventloop/event_loop.h"
#include "netstack/forward/relay.h"
#include "netstack/forward/relay_test_util.h"

ABSL_FLAG(std::string, mode, "splice", "splice, copy or auto");
ABSL_FLAG(std::string, leg_case, "tcp_to_tcp",
          "tcp_to_tcp, unix_to_tcp or tcp_to_unix");
ABSL_FLAG(uint64_t, bytes, uint64_t{1} << 30, "bytes to move");
ABSL_FLAG(uint64_t, chunk, uint64_t{1} << 20, "writer's write size");
ABSL_FLAG(uint64_t, threshold, netstack::forward::kDefaultAutoSpliceThreshold,
          "auto_splice_threshold");
ABSL_FLAG(uint64_t, pipe_size, uint64_t{1} << 20, "PipePool pipe_size");
ABSL_FLAG(bool, direct, false,
          "baseline: the writer's socket connects straight to the reader, "
          "no relay (the source leg's kind only)");

namespace netstack::forward {
namespace {

double CpuSeconds() {
  rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  return absl::ToDoubleSeconds(absl::DurationFromTimeval(usage.ru_utime) +
                               absl::DurationFromTimeval(usage.ru_stime));
}

// Writer: `bytes` in `chunk` writes, FIN, then waits for the reader's FIN.
[[noreturn]] void Writer(int fd, uint64_t bytes, uint64_t chunk) {
  std::vector<char> buf(chunk, 'x');
  uint64_t left = bytes;
  while (left > 0) {
    const ssize_t n = send(fd, buf.data(), std::min<uint64_t>(left, chunk), 0);
    if (n <= 0) _exit(1);
    left -= static_cast<uint64_t>(n);
  }
  shutdown(fd, SHUT_WR);
  char c;
  _exit(recv(fd, &c, 1, 0) == 0 ? 0 : 2);
}

// Reader: FIN first (it sends nothing), then everything until EOF.
[[noreturn]] void Reader(int fd, uint64_t bytes) {
  shutdown(fd, SHUT_WR);
  std::vector<char> buf(1 << 20);
  uint64_t got = 0;
  for (;;) {
    const ssize_t n = recv(fd, buf.data(), buf.size(), 0);
    if (n < 0) _exit(1);
    if (n == 0) break;
    got += static_cast<uint64_t>(n);
  }
  _exit(got == bytes ? 0 : 3);
}

int Main() {
  const std::optional<RelayMode> mode =
      ParseRelayMode(absl::GetFlag(FLAGS_mode));
  if (!mode.has_value()) {
    std::fprintf(stderr, "bad --mode\n");
    return 2;
  }
  const std::string leg_case = absl::GetFlag(FLAGS_leg_case);
  test::LegKind src = test::LegKind::kTcp4;
  test::LegKind dst = test::LegKind::kTcp4;
  if (leg_case == "unix_to_tcp") {
    src = test::LegKind::kUnix;
  } else if (leg_case == "tcp_to_unix") {
    dst = test::LegKind::kUnix;
  } else if (leg_case != "tcp_to_tcp") {
    std::fprintf(stderr, "bad --leg_case\n");
    return 2;
  }
  const uint64_t bytes = absl::GetFlag(FLAGS_bytes);
  const uint64_t chunk = std::max<uint64_t>(1, absl::GetFlag(FLAGS_chunk));
  auto a = test::MakeLeg(src);
  auto b = test::MakeLeg(dst);
  if (!a.ok() || !b.ok()) {
    std::fprintf(stderr, "legs: %s %s\n", a.status().ToString().c_str(),
                 b.status().ToString().c_str());
    return 1;
  }
  auto loop = eventloop::EventLoop::Create();
  if (!loop.ok()) return 1;
  PipePool pool(PipePool::Options{.pipe_size = absl::GetFlag(FLAGS_pipe_size)});
  RelayOptions options;
  options.mode = *mode;
  options.auto_splice_threshold = absl::GetFlag(FLAGS_threshold);

  const pid_t writer = fork();
  if (writer == 0) {
    close(a->relay);
    close(b->relay);
    close(b->peer);
    Writer(a->peer, bytes, chunk);
  }
  const bool direct = absl::GetFlag(FLAGS_direct);
  const pid_t reader = fork();
  if (reader == 0) {
    close(a->peer);
    close(direct ? b->relay : a->relay);
    if (direct) {
      close(b->peer);
      Reader(a->relay, bytes);
    }
    close(b->relay);
    Reader(b->peer, bytes);
  }
  close(a->peer);
  close(b->peer);
  if (direct) {
    const absl::Time start = absl::Now();
    close(a->relay);
    close(b->relay);
    int ws = 0;
    int rs = 0;
    waitpid(writer, &ws, 0);
    waitpid(reader, &rs, 0);
    const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
    std::printf("case=%s direct bytes=%llu chunk=%llu: %.3f s, %.1f MB/s\n",
                leg_case.c_str(), static_cast<unsigned long long>(bytes),
                static_cast<unsigned long long>(chunk), seconds,
                bytes / seconds / 1e6);
    return WEXITSTATUS(ws) == 0 && WEXITSTATUS(rs) == 0 ? 0 : 1;
  }

  bool done = false;
  absl::Status status;
  RelayStats stats;
  const absl::Time start = absl::Now();
  const double cpu_start = CpuSeconds();
  auto relay = Relay::Create(**loop, pool, a->relay, b->relay, options,
                             [&](Relay& r, absl::Status s) {
                               done = true;
                               status = s;
                               stats = r.stats();
                             });
  if (!relay.ok()) return 1;
  while (!done) {
    if (!(*loop)->RunOnce(absl::Seconds(1)).ok()) return 1;
  }
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  const double cpu = CpuSeconds() - cpu_start;
  int ws = 0;
  int rs = 0;
  waitpid(writer, &ws, 0);
  waitpid(reader, &rs, 0);
  const DirectionStats& s = stats.a_to_b;
  std::printf(
      "case=%s mode=%s bytes=%llu chunk=%llu: %.3f s, %.1f MB/s, relay cpu "
      "%.3f s/GB, status=%s, writer=%d reader=%d\n"
      "  splice_bytes=%llu copy_bytes=%llu splice_syscalls=%llu "
      "copy_syscalls=%llu would_block=%llu loop_turns=%llu\n",
      leg_case.c_str(), std::string(RelayModeName(*mode)).c_str(),
      static_cast<unsigned long long>(bytes),
      static_cast<unsigned long long>(chunk), seconds, bytes / seconds / 1e6,
      cpu / (bytes / 1e9), status.ToString().c_str(), WEXITSTATUS(ws),
      WEXITSTATUS(rs), static_cast<unsigned long long>(s.splice_bytes),
      static_cast<unsigned long long>(s.copy_bytes),
      static_cast<unsigned long long>(s.splice_syscalls),
      static_cast<unsigned long long>(s.copy_syscalls),
      static_cast<unsigned long long>(s.would_block),
      static_cast<unsigned long long>((*loop)->stats().turns));
  return status.ok() && WEXITSTATUS(ws) == 0 && WEXITSTATUS(rs) == 0 ? 0 : 1;
}

}  // namespace
}  // namespace netstack::forward

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return netstack::forward::Main();
}
