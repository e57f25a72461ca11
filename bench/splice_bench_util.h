// Helpers for //bench:splice_benchmark, modelled on Go's splice benchmarks
// (go-review 113997): the writer and the reader of a relayed connection are
// child processes that inherit their socket, so that the parent, which runs
// only the relay, measures nothing but the relay.
//
// Nothing here depends on the relay: connected socket pairs, the writer and
// reader children (fork, no exec: the child closes every other inherited fd,
// so EOF propagates), and the clocks the parent reads.
#ifndef BENCH_SPLICE_BENCH_UTIL_H_
#define BENCH_SPLICE_BENCH_UTIL_H_

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace netstack::bench {

// An owned file descriptor.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  Fd(Fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  Fd& operator=(Fd&& other) noexcept {
    if (this != &other) Reset(std::exchange(other.fd_, -1));
    return *this;
  }
  ~Fd() { Reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int Release() { return std::exchange(fd_, -1); }
  void Reset(int fd = -1);

 private:
  int fd_ = -1;
};

enum class SocketKind : uint8_t { kTcp, kUnix };
std::string_view SocketKindName(SocketKind kind);

// Both ends of one connected stream socket. TCP: over 127.0.0.1, `relay_end`
// is the accepted socket and `child_end` the connecting one, with
// TCP_NODELAY as Go sets on every TCP connection (the relay sets its own).
// UNIX: socketpair(AF_UNIX, SOCK_STREAM). Both blocking, close-on-exec.
// `tcp_congestion`, if not empty, is set (TCP_CONGESTION) on both TCP ends
// before the connection exists; otherwise the system's default applies.
struct SocketPair {
  Fd relay_end;
  Fd child_end;
};
absl::StatusOr<SocketPair> MakeSocketPair(SocketKind kind,
                                          const std::string& tcp_congestion);

// What a child does with its socket.
//   kWriter: waits for one byte on its start pipe (so that the parent's
//     clock starts before the first byte), writes `total_bytes` in writes of
//     `chunk_size`, shuts down its write side, then reads until EOF (the
//     relay forwards the reader's EOF back) and expects no data.
//   kReader: reads with a `chunk_size` buffer until EOF, then closes (which
//     the relay forwards to the writer as EOF) and checks it got exactly
//     `total_bytes`.
enum class ChildRole : uint8_t { kWriter, kReader };

struct ChildOptions {
  ChildRole role = ChildRole::kWriter;
  size_t chunk_size = 0;
  uint64_t total_bytes = 0;
  int cpu = -1;  // >= 0: sched_setaffinity to this CPU
};

// Exit codes of a child, also used in error messages.
enum ChildExit : int {
  kChildOk = 0,
  kChildNoStart = 10,         // the start pipe closed before the start byte
  kChildWriteError = 11,      // write() failed (errno lost; see the relay)
  kChildReadError = 12,       // read() failed
  kChildWrongCount = 13,      // the reader got more or fewer bytes than sent
  kChildUnexpectedData = 14,  // the writer got data back
  kChildSetupError = 15,      // affinity or fd setup failed
};

struct ChildResult {
  int exit_code = -1;  // -1: killed by a signal (see term_signal)
  int term_signal = 0;
  double cpu_seconds = 0;  // user + system, from wait4's rusage
};

// A forked child. The destructor SIGKILLs and reaps a child that was not
// waited for, so no benchmark leaves a zombie behind, whatever fails.
class ChildProcess {
 public:
  // Forks a child that keeps only `socket` (and `start_pipe`, the read end
  // of the start pipe, for a writer) and runs `options.role`. The parent's
  // copies of both fds are closed on return, success or not.
  static absl::StatusOr<ChildProcess> Spawn(const ChildOptions& options,
                                            Fd socket, Fd start_pipe);

  ChildProcess(ChildProcess&& other) noexcept
      : pid_(std::exchange(other.pid_, -1)) {}
  ChildProcess& operator=(ChildProcess&& other) noexcept;
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  ~ChildProcess() { Kill(); }

  pid_t pid() const { return pid_; }

  // Waits for the child to exit, at most `timeout`; then SIGKILLs it and
  // reaps it anyway (DeadlineExceeded). Either way the child is gone.
  absl::StatusOr<ChildResult> Wait(absl::Duration timeout);
  // SIGKILL and reap, if still there.
  void Kill();

 private:
  explicit ChildProcess(pid_t pid) : pid_(pid) {}
  pid_t pid_ = -1;
};

// A human-readable account of a child's result ("exit 13 (wrong byte
// count)", "signal 9").
std::string DescribeChildResult(const ChildResult& result);

// The calling process's CPU time in seconds (CLOCK_PROCESS_CPUTIME_ID):
// the relay's, since only the relay runs in the parent; the children's
// time goes to RUSAGE_CHILDREN, never here.
double ProcessCpuSeconds();
// CLOCK_MONOTONIC in seconds.
double MonotonicSeconds();

// Pins the calling process to `cpu` (no-op for cpu < 0).
absl::Status PinToCpu(int cpu);

}  // namespace netstack::bench

#endif  // BENCH_SPLICE_BENCH_UTIL_H_
