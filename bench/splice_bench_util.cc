#include "bench/splice_bench_util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"

namespace netstack::bench {
namespace {

double TimevalSeconds(const timeval& tv) {
  return static_cast<double>(tv.tv_sec) +
         1e-6 * static_cast<double>(tv.tv_usec);
}

double ClockSeconds(clockid_t clock) {
  timespec ts;
  clock_gettime(clock, &ts);
  return static_cast<double>(ts.tv_sec) +
         1e-9 * static_cast<double>(ts.tv_nsec);
}

// Closes every fd >= 3 except those in `keep` (sorted, all >= 3).
bool CloseAllBut(std::array<int, 2> keep) {
  std::sort(keep.begin(), keep.end());
  unsigned int first = 3;
  for (int fd : keep) {
    if (fd < 3) continue;
    const auto k = static_cast<unsigned int>(fd);
    if (k > first && close_range(first, k - 1, 0) != 0) return false;
    first = std::max(first, k + 1);
  }
  return close_range(first, ~0U, 0) == 0;
}

ssize_t ReadRetry(int fd, void* buf, size_t len) {
  ssize_t r;
  do {
    r = read(fd, buf, len);
  } while (r < 0 && errno == EINTR);
  return r;
}

// The child's whole life. Only async-signal-safe calls: the parent may have
// had threads (it has none today, but the benchmark library could).
[[noreturn]] void RunChild(const ChildOptions& options, pid_t parent, int sock,
                           int start) {
  // Die with the parent, whatever happens to it.
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent) {
    _exit(kChildSetupError);
  }
  if (!CloseAllBut({sock, start})) _exit(kChildSetupError);
  if (options.cpu >= 0) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(options.cpu, &set);
    if (sched_setaffinity(0, sizeof(set), &set) != 0) _exit(kChildSetupError);
  }
  const size_t chunk = std::max<size_t>(options.chunk_size, 1);
  void* mem = mmap(nullptr, chunk, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) _exit(kChildSetupError);
  auto* buf = static_cast<unsigned char*>(mem);

  if (options.role == ChildRole::kWriter) {
    for (size_t i = 0; i < chunk; ++i) {
      buf[i] = static_cast<unsigned char>(i * 131 + 7);
    }
    char go;
    if (ReadRetry(start, &go, 1) != 1) _exit(kChildNoStart);
    close(start);
    uint64_t left = options.total_bytes;
    while (left > 0) {
      size_t n = static_cast<size_t>(std::min<uint64_t>(chunk, left));
      const unsigned char* p = buf;
      while (n > 0) {  // one chunk: one write, unless it comes back short
        const ssize_t w = write(sock, p, n);
        if (w < 0) {
          if (errno == EINTR) continue;
          _exit(kChildWriteError);
        }
        p += w;
        n -= static_cast<size_t>(w);
        left -= static_cast<uint64_t>(w);
      }
    }
    if (shutdown(sock, SHUT_WR) != 0) _exit(kChildWriteError);
    for (;;) {  // until the relay forwards the reader's EOF
      const ssize_t r = ReadRetry(sock, buf, chunk);
      if (r == 0) break;
      if (r < 0) _exit(kChildReadError);
      _exit(kChildUnexpectedData);
    }
    _exit(kChildOk);
  }

  uint64_t got = 0;
  for (;;) {
    const ssize_t r = ReadRetry(sock, buf, chunk);
    if (r == 0) break;
    if (r < 0) _exit(kChildReadError);
    got += static_cast<uint64_t>(r);
  }
  close(sock);  // the relay forwards this EOF to the writer
  _exit(got == options.total_bytes ? kChildOk : kChildWrongCount);
}

absl::Status SetNoDelay(int fd) {
  int one = 1;
  if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0) {
    return absl::ErrnoToStatus(errno, "setsockopt(TCP_NODELAY)");
  }
  return absl::OkStatus();
}

absl::Status SetCongestion(int fd, const std::string& name) {
  if (name.empty()) return absl::OkStatus();
  if (setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name.data(),
                 static_cast<socklen_t>(name.size())) != 0) {
    return absl::ErrnoToStatus(
        errno, absl::StrCat("setsockopt(TCP_CONGESTION, ", name, ")"));
  }
  return absl::OkStatus();
}

// The accepted socket inherits the listener's congestion control.
absl::StatusOr<SocketPair> MakeTcpPair(const std::string& congestion) {
  Fd listener(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!listener.valid()) return absl::ErrnoToStatus(errno, "socket");
  if (absl::Status s = SetCongestion(listener.get(), congestion); !s.ok()) {
    return s;
  }
  sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (bind(listener.get(), reinterpret_cast<sockaddr*>(&addr), len) != 0) {
    return absl::ErrnoToStatus(errno, "bind(127.0.0.1:0)");
  }
  if (listen(listener.get(), 1) != 0) {
    return absl::ErrnoToStatus(errno, "listen");
  }
  if (getsockname(listener.get(), reinterpret_cast<sockaddr*>(&addr), &len) !=
      0) {
    return absl::ErrnoToStatus(errno, "getsockname");
  }
  SocketPair pair;
  pair.child_end = Fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!pair.child_end.valid()) return absl::ErrnoToStatus(errno, "socket");
  if (absl::Status s = SetCongestion(pair.child_end.get(), congestion);
      !s.ok()) {
    return s;
  }
  if (connect(pair.child_end.get(), reinterpret_cast<sockaddr*>(&addr),
              sizeof(addr)) != 0) {
    return absl::ErrnoToStatus(errno, "connect(127.0.0.1)");
  }
  pair.relay_end = Fd(accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
  if (!pair.relay_end.valid()) return absl::ErrnoToStatus(errno, "accept4");
  if (absl::Status s = SetNoDelay(pair.child_end.get()); !s.ok()) return s;
  return pair;
}

absl::StatusOr<SocketPair> MakeUnixPair() {
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
    return absl::ErrnoToStatus(errno, "socketpair(AF_UNIX)");
  }
  SocketPair pair;
  pair.relay_end = Fd(fds[0]);
  pair.child_end = Fd(fds[1]);
  return pair;
}

}  // namespace

void Fd::Reset(int fd) {
  if (fd_ >= 0) close(fd_);
  fd_ = fd;
}

std::string_view SocketKindName(SocketKind kind) {
  return kind == SocketKind::kTcp ? "tcp" : "unix";
}

absl::StatusOr<SocketPair> MakeSocketPair(SocketKind kind,
                                          const std::string& tcp_congestion) {
  return kind == SocketKind::kTcp ? MakeTcpPair(tcp_congestion)
                                  : MakeUnixPair();
}

absl::StatusOr<ChildProcess> ChildProcess::Spawn(const ChildOptions& options,
                                                 Fd socket, Fd start_pipe) {
  if (!socket.valid()) return absl::InvalidArgumentError("no socket");
  if (options.role == ChildRole::kWriter && !start_pipe.valid()) {
    return absl::InvalidArgumentError("a writer needs a start pipe");
  }
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) return absl::ErrnoToStatus(errno, "fork");
  if (pid == 0) RunChild(options, parent, socket.get(), start_pipe.get());
  return ChildProcess(pid);
}

ChildProcess& ChildProcess::operator=(ChildProcess&& other) noexcept {
  if (this != &other) {
    Kill();
    pid_ = std::exchange(other.pid_, -1);
  }
  return *this;
}

absl::StatusOr<ChildResult> ChildProcess::Wait(absl::Duration timeout) {
  if (pid_ <= 0) return absl::FailedPreconditionError("no child");
  // A pidfd turns readable when the child exits: poll() then waits with a
  // timeout and no sleep granularity (the direct baseline is timed by it).
  Fd pidfd(static_cast<int>(syscall(SYS_pidfd_open, pid_, 0)));
  if (!pidfd.valid()) return absl::ErrnoToStatus(errno, "pidfd_open");
  const double deadline = MonotonicSeconds() + absl::ToDoubleSeconds(timeout);
  bool timed_out = false;
  for (;;) {
    const double left = deadline - MonotonicSeconds();
    if (left <= 0) {
      timed_out = true;
      break;
    }
    pollfd pfd = {pidfd.get(), POLLIN, 0};
    const int r = poll(&pfd, 1, static_cast<int>(std::ceil(left * 1000)));
    if (r > 0) break;
    if (r < 0 && errno != EINTR) return absl::ErrnoToStatus(errno, "poll");
  }
  if (timed_out) kill(pid_, SIGKILL);
  int status = 0;
  rusage ru = {};
  pid_t r;
  do {
    r = wait4(pid_, &status, 0, &ru);
  } while (r < 0 && errno == EINTR);
  const int err = errno;
  pid_ = -1;  // reaped, or not our child any more (ECHILD)
  if (r < 0) return absl::ErrnoToStatus(err, "wait4");
  if (timed_out) {
    return absl::DeadlineExceededError(
        absl::StrCat("child did not exit within ",
                     absl::FormatDuration(timeout), "; killed"));
  }
  ChildResult result;
  if (WIFEXITED(status)) {
    result.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    result.term_signal = WTERMSIG(status);
  }
  result.cpu_seconds =
      TimevalSeconds(ru.ru_utime) + TimevalSeconds(ru.ru_stime);
  return result;
}

void ChildProcess::Kill() {
  if (pid_ <= 0) return;
  kill(pid_, SIGKILL);
  int status;
  while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  pid_ = -1;
}

std::string DescribeChildResult(const ChildResult& result) {
  if (result.exit_code < 0) {
    return absl::StrCat("killed by signal ", result.term_signal);
  }
  const char* what = "";
  switch (result.exit_code) {
    case kChildOk:
      what = "ok";
      break;
    case kChildNoStart:
      what = "start pipe closed";
      break;
    case kChildWriteError:
      what = "write failed";
      break;
    case kChildReadError:
      what = "read failed";
      break;
    case kChildWrongCount:
      what = "wrong byte count";
      break;
    case kChildUnexpectedData:
      what = "writer got data back";
      break;
    case kChildSetupError:
      what = "setup failed";
      break;
    default:
      what = "unknown";
  }
  return absl::StrCat("exit ", result.exit_code, " (", what, ")");
}

double ProcessCpuSeconds() { return ClockSeconds(CLOCK_PROCESS_CPUTIME_ID); }

double MonotonicSeconds() { return ClockSeconds(CLOCK_MONOTONIC); }

absl::Status PinToCpu(int cpu) {
  if (cpu < 0) return absl::OkStatus();
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (sched_setaffinity(0, sizeof(set), &set) != 0) {
    return absl::ErrnoToStatus(errno,
                               absl::StrCat("sched_setaffinity(", cpu, ")"));
  }
  return absl::OkStatus();
}

}  // namespace netstack::bench
