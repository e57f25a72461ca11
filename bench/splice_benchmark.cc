// //bench:splice_benchmark: the cost of netstack::forward::Relay, modelled
// on Go's splice benchmarks (go-review 113997, ../shared/seeds): the writer
// and the reader are child processes, each with its socket as an inherited
// fd, and the parent runs only the Relay on its event loop. So the wall
// time, the MB/s and the CPU time measured in the parent are the relay's
// alone; the children's CPU goes to RUSAGE_CHILDREN and is reported apart.
//
//   BM_Relay/<case>/<mode>/<chunk>
//     case:  tcp_to_tcp, unix_to_tcp, tcp_to_unix (source leg -> destination
//            leg; TCP over 127.0.0.1)
//     mode:  splice, copy, auto (RelayOptions::mode)
//     chunk: 1 KiB .. 1 MiB; the writer writes chunks of this size, and an
//            op (an iteration) is one chunk relayed, as in Go.
//
// One benchmark run of N iterations is one connection: the writer writes
// N chunks, the relay moves them to the reader, and the clocks run from the
// writer's start signal until the relay reports both directions finished
// (the reader has read every byte and closed). Google Benchmark picks N as
// usual, growing it until the relay thread's CPU time reaches
// --benchmark_min_time (0.2 s by default here, about 1-2 s of wall time);
// no option that would change the benchmark names (Iterations, MinTime,
// UseManualTime, UseRealTime) is set. "Time" is wall time per op, "CPU"
// the relay thread's CPU time per op.
//
// Counters (per run):
//   MBps                 bytes relayed / wall time, 1 MB = 1e6 bytes
//   cpu_s_per_gb         relay (parent) CPU seconds per GB (1e9 bytes)
//   writer_cpu_s_per_gb, reader_cpu_s_per_gb   the children's, from wait4
//   splice_frac          share of the bytes that went through the pipe
//   syscalls_per_op      relay data syscalls (splice, recv, send) per chunk
//
// Own flags (after Google Benchmark's):
//   --auto_threshold=BYTES    RelayOptions::auto_splice_threshold
//   --auto_min_segment=BYTES  RelayOptions::auto_splice_min_segment (0: a
//                             TCP source's segment size is not checked)
//   --cpu_relay=N             pin the parent (the relay) to CPU N
//   --cpu_children=N          pin the writer and the reader to CPU N
//   --cpu_writer=N, --cpu_reader=N   pin one child (after --cpu_children)
//   --transfer_timeout=SECS   give up on one run after this long (120)
//   --tcp_congestion=NAME     TCP_CONGESTION on every TCP socket: cubic by
//                             default (Linux's default, and what Go measured
//                             with); "system" keeps net.ipv4.
//                             tcp_congestion_control. On a machine whose
//                             default is bbr, loopback has no fq qdisc and
//                             TCP paces each packet with its own hrtimer:
//                             that cost, not the relay's, dominates
//                             (docs/BENCHMARKS.md).
//   --direct                  also run BM_Direct/<tcp|unix>/<chunk>/real_time:
//                             the writer straight to the reader, no relay
//                             (the kernel-to-kernel baseline of the same run)
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "bench/splice_bench_util.h"
#include "benchmark/benchmark.h"
#include "netstack/eventloop/event_loop.h"
#include "netstack/forward/relay.h"

namespace netstack::bench {
namespace {

using forward::PipePool;
using forward::Relay;
using forward::RelayMode;
using forward::RelayOptions;
using forward::RelayStats;

struct Flags {
  size_t auto_threshold = 0;  // 0: RelayOptions' default
  std::optional<size_t> auto_min_segment;  // unset: RelayOptions' default
  int cpu_relay = -1;
  int cpu_writer = -1;
  int cpu_reader = -1;
  double transfer_timeout_s = 120;
  std::string tcp_congestion = "cubic";  // empty: the system's
  bool direct = false;
};

struct CaseSpec {
  const char* name;
  SocketKind source;
  SocketKind destination;
};
constexpr CaseSpec kCases[] = {
    {"tcp_to_tcp", SocketKind::kTcp, SocketKind::kTcp},
    {"unix_to_tcp", SocketKind::kUnix, SocketKind::kTcp},
    {"tcp_to_unix", SocketKind::kTcp, SocketKind::kUnix},
};

struct ModeSpec {
  const char* name;
  RelayMode mode;
};
constexpr ModeSpec kModes[] = {
    {"splice", RelayMode::kSplice},
    {"copy", RelayMode::kCopy},
    {"auto", RelayMode::kAuto},
};

constexpr size_t kMinChunk = size_t{1} << 10;
constexpr size_t kMaxChunk = size_t{1} << 20;

// The loop and the pipe pool live for the whole process, as in a proxy:
// pipes are reused from one connection (benchmark run) to the next.
struct Env {
  Flags flags;
  std::unique_ptr<eventloop::EventLoop> loop;
  std::unique_ptr<PipePool> pipes;
};
Env* g_env = nullptr;

void BM_Relay(benchmark::State& state, CaseSpec c, RelayMode mode,
              size_t chunk) {
  Env& env = *g_env;
  const uint64_t ops = static_cast<uint64_t>(state.max_iterations);
  const uint64_t total = ops * chunk;
  auto fail = [&state](const absl::Status& s) {
    state.SkipWithError(s.ToString().c_str());
  };

  absl::StatusOr<SocketPair> up =
      MakeSocketPair(c.source, env.flags.tcp_congestion);
  if (!up.ok()) return fail(up.status());
  absl::StatusOr<SocketPair> down =
      MakeSocketPair(c.destination, env.flags.tcp_congestion);
  if (!down.ok()) return fail(down.status());
  int start_fds[2];
  if (pipe2(start_fds, O_CLOEXEC) != 0) {
    return fail(absl::ErrnoToStatus(errno, "pipe2"));
  }
  Fd start_read(start_fds[0]);
  Fd start_write(start_fds[1]);

  RelayOptions options;
  options.mode = mode;
  if (env.flags.auto_min_segment.has_value()) {
    options.auto_splice_min_segment = *env.flags.auto_min_segment;
  }
  if (env.flags.auto_threshold > 0) {
    options.auto_splice_threshold = env.flags.auto_threshold;
  }
  bool done = false;
  absl::Status relay_status;
  absl::StatusOr<std::unique_ptr<Relay>> relay = Relay::Create(
      *env.loop, *env.pipes, up->relay_end.Release(), down->relay_end.Release(),
      options, [&done, &relay_status](Relay&, absl::Status s) {
        done = true;
        relay_status = std::move(s);
      });
  if (!relay.ok()) return fail(relay.status());

  // Declared after the relay: on any early return the children are killed
  // and reaped first (~ChildProcess), then the relay closes its sockets.
  ChildOptions writer_options;
  writer_options.role = ChildRole::kWriter;
  writer_options.chunk_size = chunk;
  writer_options.total_bytes = total;
  writer_options.cpu = env.flags.cpu_writer;
  absl::StatusOr<ChildProcess> writer = ChildProcess::Spawn(
      writer_options, std::move(up->child_end), std::move(start_read));
  if (!writer.ok()) return fail(writer.status());
  ChildOptions reader_options = writer_options;
  reader_options.role = ChildRole::kReader;
  reader_options.cpu = env.flags.cpu_reader;
  absl::StatusOr<ChildProcess> reader =
      ChildProcess::Spawn(reader_options, std::move(down->child_end), Fd());
  if (!reader.ok()) return fail(reader.status());

  double wall0 = 0, wall1 = 0, cpu0 = 0, cpu1 = 0;
  bool timed_out = false;
  absl::Status loop_status;
  while (state.KeepRunningBatch(static_cast<benchmark::IterationCount>(ops))) {
    cpu0 = ProcessCpuSeconds();
    wall0 = MonotonicSeconds();
    const double deadline = wall0 + env.flags.transfer_timeout_s;
    if (write(start_write.get(), "g", 1) != 1) {
      loop_status = absl::ErrnoToStatus(errno, "write(start pipe)");
    }
    while (!done && loop_status.ok()) {
      const double left = deadline - MonotonicSeconds();
      if (left <= 0) {
        timed_out = true;
        break;
      }
      loop_status = env.loop->RunOnce(absl::Seconds(std::min(left, 0.1)));
    }
    wall1 = MonotonicSeconds();
    cpu1 = ProcessCpuSeconds();
  }
  const RelayStats stats = (*relay)->stats();
  // Closing the relay's sockets unblocks children that are still waiting.
  relay->reset();
  absl::StatusOr<ChildResult> writer_result = writer->Wait(absl::Seconds(10));
  absl::StatusOr<ChildResult> reader_result = reader->Wait(absl::Seconds(10));

  if (timed_out) {
    return fail(absl::DeadlineExceededError(absl::StrCat(
        "relay did not finish within ", env.flags.transfer_timeout_s, " s")));
  }
  if (!loop_status.ok()) return fail(loop_status);
  if (!relay_status.ok()) return fail(relay_status);
  if (!writer_result.ok()) return fail(writer_result.status());
  if (!reader_result.ok()) return fail(reader_result.status());
  if (writer_result->exit_code != kChildOk) {
    return fail(absl::InternalError(
        absl::StrCat("writer: ", DescribeChildResult(*writer_result))));
  }
  if (reader_result->exit_code != kChildOk) {
    return fail(absl::InternalError(
        absl::StrCat("reader: ", DescribeChildResult(*reader_result))));
  }
  if (stats.a_to_b.bytes != total) {
    return fail(absl::InternalError(absl::StrCat(
        "relay moved ", stats.a_to_b.bytes, " bytes, expected ", total)));
  }

  const double seconds = wall1 - wall0;
  const double gb = static_cast<double>(total) / 1e9;
  state.counters["MBps"] = static_cast<double>(total) / 1e6 / seconds;
  state.counters["cpu_s_per_gb"] = (cpu1 - cpu0) / gb;
  state.counters["writer_cpu_s_per_gb"] = writer_result->cpu_seconds / gb;
  state.counters["reader_cpu_s_per_gb"] = reader_result->cpu_seconds / gb;
  state.counters["splice_frac"] =
      static_cast<double>(stats.a_to_b.splice_bytes) /
      static_cast<double>(stats.a_to_b.bytes);
  state.counters["syscalls_per_op"] =
      static_cast<double>(stats.a_to_b.splice_syscalls +
                          stats.a_to_b.copy_syscalls) /
      static_cast<double>(ops);
}

// The baseline: the same writer and reader connected directly, so the
// kernel alone moves the bytes. Timed from the start byte until the reader
// has read everything and exited; no relay, so the parent only waits, and
// the ramp runs on wall time (UseRealTime, hence the name's suffix).
void BM_Direct(benchmark::State& state, SocketKind kind, size_t chunk) {
  Env& env = *g_env;
  const uint64_t ops = static_cast<uint64_t>(state.max_iterations);
  const uint64_t total = ops * chunk;
  auto fail = [&state](const absl::Status& s) {
    state.SkipWithError(s.ToString().c_str());
  };
  absl::StatusOr<SocketPair> pair =
      MakeSocketPair(kind, env.flags.tcp_congestion);
  if (!pair.ok()) return fail(pair.status());
  int start_fds[2];
  if (pipe2(start_fds, O_CLOEXEC) != 0) {
    return fail(absl::ErrnoToStatus(errno, "pipe2"));
  }
  Fd start_read(start_fds[0]);
  Fd start_write(start_fds[1]);
  ChildOptions writer_options;
  writer_options.role = ChildRole::kWriter;
  writer_options.chunk_size = chunk;
  writer_options.total_bytes = total;
  writer_options.cpu = env.flags.cpu_writer;
  absl::StatusOr<ChildProcess> writer = ChildProcess::Spawn(
      writer_options, std::move(pair->relay_end), std::move(start_read));
  if (!writer.ok()) return fail(writer.status());
  ChildOptions reader_options = writer_options;
  reader_options.role = ChildRole::kReader;
  reader_options.cpu = env.flags.cpu_reader;
  absl::StatusOr<ChildProcess> reader =
      ChildProcess::Spawn(reader_options, std::move(pair->child_end), Fd());
  if (!reader.ok()) return fail(reader.status());

  double wall0 = 0, wall1 = 0;
  absl::StatusOr<ChildResult> reader_result =
      absl::InternalError("not started");
  while (state.KeepRunningBatch(static_cast<benchmark::IterationCount>(ops))) {
    wall0 = MonotonicSeconds();
    if (write(start_write.get(), "g", 1) != 1) {
      reader_result = absl::ErrnoToStatus(errno, "write(start pipe)");
      break;
    }
    reader_result = reader->Wait(absl::Seconds(env.flags.transfer_timeout_s));
    wall1 = MonotonicSeconds();
  }
  absl::StatusOr<ChildResult> writer_result = writer->Wait(absl::Seconds(10));
  if (!reader_result.ok()) return fail(reader_result.status());
  if (!writer_result.ok()) return fail(writer_result.status());
  for (const ChildResult* r : {&*writer_result, &*reader_result}) {
    if (r->exit_code != kChildOk) {
      return fail(absl::InternalError(
          absl::StrCat(r == &*writer_result ? "writer: " : "reader: ",
                       DescribeChildResult(*r))));
    }
  }
  const double gb = static_cast<double>(total) / 1e9;
  state.counters["MBps"] = static_cast<double>(total) / 1e6 / (wall1 - wall0);
  state.counters["writer_cpu_s_per_gb"] = writer_result->cpu_seconds / gb;
  state.counters["reader_cpu_s_per_gb"] = reader_result->cpu_seconds / gb;
}

void RegisterAll() {
  // The three modes of one chunk size run back to back, so that the ratios
  // between them (the goals) compare neighbours in time on this
  // noisy machine.
  for (const CaseSpec& c : kCases) {
    for (size_t chunk = kMinChunk; chunk <= kMaxChunk; chunk *= 2) {
      for (const ModeSpec& m : kModes) {
        const std::string name =
            absl::StrCat("BM_Relay/", c.name, "/", m.name, "/", chunk);
        benchmark::RegisterBenchmark(
            name.c_str(),
            [c, mode = m.mode, chunk](benchmark::State& state) {
              BM_Relay(state, c, mode, chunk);
            })
            ->Unit(benchmark::kMicrosecond);
      }
    }
  }
  if (!g_env->flags.direct) return;
  for (SocketKind kind : {SocketKind::kTcp, SocketKind::kUnix}) {
    for (size_t chunk = kMinChunk; chunk <= kMaxChunk; chunk *= 2) {
      const std::string name = absl::StrCat(
          "BM_Direct/", std::string(SocketKindName(kind)), "/", chunk);
      benchmark::RegisterBenchmark(name.c_str(),
                                   [kind, chunk](benchmark::State& state) {
                                     BM_Direct(state, kind, chunk);
                                   })
          ->UseRealTime()
          ->Unit(benchmark::kMicrosecond);
    }
  }
}

bool ParseFlag(std::string_view arg, std::string_view name,
               std::string_view* value) {
  if (arg.substr(0, 2) != "--") return false;
  arg.remove_prefix(2);
  if (arg.substr(0, name.size()) != name) return false;
  arg.remove_prefix(name.size());
  if (arg.empty() || arg[0] != '=') return false;
  *value = arg.substr(1);
  return true;
}

// Parses the flags Google Benchmark left over; false on anything unknown.
bool ParseOwnFlags(int argc, char** argv, Flags* flags) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    std::string_view v;
    bool ok = false;
    if (ParseFlag(arg, "auto_min_segment", &v)) {
      size_t bytes = 0;
      ok = absl::SimpleAtoi(std::string(v), &bytes);
      flags->auto_min_segment = bytes;
    } else if (ParseFlag(arg, "auto_threshold", &v)) {
      ok = absl::SimpleAtoi(std::string(v), &flags->auto_threshold) &&
           flags->auto_threshold > 0;
    } else if (ParseFlag(arg, "cpu_relay", &v)) {
      ok = absl::SimpleAtoi(std::string(v), &flags->cpu_relay);
    } else if (ParseFlag(arg, "cpu_children", &v)) {
      ok = absl::SimpleAtoi(std::string(v), &flags->cpu_writer);
      flags->cpu_reader = flags->cpu_writer;
    } else if (ParseFlag(arg, "cpu_writer", &v)) {
      ok = absl::SimpleAtoi(std::string(v), &flags->cpu_writer);
    } else if (ParseFlag(arg, "cpu_reader", &v)) {
      ok = absl::SimpleAtoi(std::string(v), &flags->cpu_reader);
    } else if (ParseFlag(arg, "tcp_congestion", &v)) {
      flags->tcp_congestion = v == "system" ? "" : std::string(v);
      ok = !v.empty();
    } else if (arg == "--direct") {
      flags->direct = ok = true;
    } else if (ParseFlag(arg, "transfer_timeout", &v)) {
      ok = absl::SimpleAtod(std::string(v), &flags->transfer_timeout_s) &&
           flags->transfer_timeout_s > 0;
    }
    if (!ok) {
      std::fprintf(stderr,
                   "splice_benchmark: bad or unknown flag: %s\n"
                   "own flags: --auto_threshold=BYTES "
                   "--auto_min_segment=BYTES --cpu_relay=N "
                   "--cpu_children=N --cpu_writer=N --cpu_reader=N "
                   "--transfer_timeout=SECS --tcp_congestion=NAME "
                   "--direct\n",
                   argv[i]);
      return false;
    }
  }
  return true;
}

int Main(int argc, char** argv) {
  // A peer that went away must be an EPIPE, never a dead benchmark.
  signal(SIGPIPE, SIG_IGN);
  // Google Benchmark stops growing N once the relay thread's CPU time
  // reaches min_time; the relay uses a fraction of a core, so its default
  // (0.5 s) means several seconds of wall time per run. This default keeps
  // the whole matrix to a few minutes; a --benchmark_min_time given on the
  // command line comes later and wins.
  std::vector<char*> args(argv, argv + argc);
  char default_min_time[] = "--benchmark_min_time=0.2";
  args.insert(args.begin() + 1, default_min_time);
  argc = static_cast<int>(args.size());
  args.push_back(nullptr);
  argv = args.data();
  benchmark::Initialize(&argc, argv);
  Env env;
  if (!ParseOwnFlags(argc, argv, &env.flags)) return 2;
  if (absl::Status s = PinToCpu(env.flags.cpu_relay); !s.ok()) {
    std::fprintf(stderr, "splice_benchmark: %s\n", s.ToString().c_str());
    return 1;
  }
  absl::StatusOr<std::unique_ptr<eventloop::EventLoop>> loop =
      eventloop::EventLoop::Create();
  if (!loop.ok()) {
    std::fprintf(stderr, "splice_benchmark: %s\n",
                 loop.status().ToString().c_str());
    return 1;
  }
  env.loop = std::move(*loop);
  env.pipes = std::make_unique<PipePool>(PipePool::Options{});
  g_env = &env;
  // Provenance in the JSON's "context" (and the console header).
  utsname uts = {};
  if (uname(&uts) == 0) benchmark::AddCustomContext("kernel", uts.release);
  benchmark::AddCustomContext("tcp_congestion", env.flags.tcp_congestion.empty()
                                                    ? std::string("system")
                                                    : env.flags.tcp_congestion);
  benchmark::AddCustomContext(
      "auto_splice_threshold",
      absl::StrCat(env.flags.auto_threshold > 0
                       ? env.flags.auto_threshold
                       : RelayOptions().auto_splice_threshold));
  benchmark::AddCustomContext(
      "auto_splice_min_segment",
      absl::StrCat(env.flags.auto_min_segment.value_or(
          RelayOptions().auto_splice_min_segment)));
  benchmark::AddCustomContext(
      "cpu_relay_writer_reader",
      absl::StrCat(env.flags.cpu_relay, ",", env.flags.cpu_writer, ",",
                   env.flags.cpu_reader));
  RegisterAll();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  g_env = nullptr;
  return 0;
}

}  // namespace
}  // namespace netstack::bench

int main(int argc, char** argv) { return netstack::bench::Main(argc, argv); }
