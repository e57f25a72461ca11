#include "tools/tcp_benchmark/child_process.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "tools/tcp_benchmark/interrupt.h"

namespace netstack::tools::bench {
namespace {

constexpr size_t kStderrTailLines = 20;

// In the forked child: only async-signal-safe calls until exec.
[[noreturn]] void ExecChild(char* const* argv, int netns_fd, int out_fd,
                            int err_fd) {
  ResetSignalsInChild();
  setpgid(0, 0);
  if (netns_fd >= 0 && setns(netns_fd, CLONE_NEWNET) != 0) {
    static constexpr char kMsg[] = "tcp_benchmark: setns failed\n";
    if (write(err_fd, kMsg, sizeof(kMsg) - 1) < 0) _exit(127);
    _exit(127);
  }
  dup2(out_fd, STDOUT_FILENO);
  dup2(err_fd, STDERR_FILENO);
  execvp(argv[0], argv);
  static constexpr char kMsg[] = "tcp_benchmark: exec failed\n";
  if (write(STDERR_FILENO, kMsg, sizeof(kMsg) - 1) < 0) _exit(127);
  _exit(127);
}

absl::Status ErrnoError(std::string_view what) {
  return absl::InternalError(
      absl::StrCat(std::string(what), ": ", strerror(errno)));
}

absl::StatusOr<int> OpenNetns(const std::string& netns) {
  if (netns.empty()) return -1;
  const std::string path = absl::StrCat("/var/run/netns/", netns);
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoError(absl::StrCat("open ", path));
  return fd;
}

void CloseIfOpen(int& fd) {
  if (fd >= 0) close(fd);
  fd = -1;
}

}  // namespace

bool ChildExit::Succeeded() const {
  return WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 0;
}

std::string ChildExit::Describe() const {
  if (WIFEXITED(wait_status)) {
    return absl::StrCat("exited with ", WEXITSTATUS(wait_status));
  }
  if (WIFSIGNALED(wait_status)) {
    const int signo = WTERMSIG(wait_status);
    return absl::StrCat("killed by signal ", signo, " (", strsignal(signo),
                        ")");
  }
  return absl::StrCat("ended with wait status ", wait_status);
}

absl::StatusOr<ChildProcess> ChildProcess::Start(const ChildOptions& options) {
  if (options.argv.empty()) return absl::InvalidArgumentError("empty argv");
  absl::StatusOr<int> netns_fd = OpenNetns(options.netns);
  if (!netns_fd.ok()) return netns_fd.status();
  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) != 0) return ErrnoError("pipe2");
  if (pipe2(err, O_CLOEXEC) != 0) return ErrnoError("pipe2");
  std::vector<char*> argv;
  for (const std::string& arg : options.argv) {
    argv.push_back(const_cast<char*>(arg.c_str()));
  }
  argv.push_back(nullptr);

  ChildProcess child;
  child.argv_ = options.argv;
  child.echo_stderr_ = options.echo_stderr;
  child.keep_stderr_ = options.keep_stderr;
  {
    BlockInterrupts block;
    const pid_t pid = fork();
    if (pid == 0) ExecChild(argv.data(), *netns_fd, out[1], err[1]);
    if (pid > 0) {
      setpgid(pid, pid);  // also in the child: whichever runs first
      RegisterChild(pid);
    }
    child.pid_ = pid;
  }
  const int fork_errno = errno;
  close(out[1]);
  close(err[1]);
  if (*netns_fd >= 0) close(*netns_fd);
  child.stdout_fd_ = out[0];
  child.stderr_fd_ = err[0];
  if (child.pid_ < 0) {
    errno = fork_errno;
    return ErrnoError("fork");
  }
  return child;
}

ChildProcess::ChildProcess(ChildProcess&& other) noexcept
    : pid_(std::exchange(other.pid_, -1)),
      stdout_fd_(std::exchange(other.stdout_fd_, -1)),
      stderr_fd_(std::exchange(other.stderr_fd_, -1)),
      echo_stderr_(other.echo_stderr_),
      keep_stderr_(other.keep_stderr_),
      reaped_(other.reaped_),
      exit_(other.exit_),
      argv_(std::move(other.argv_)),
      stdout_(std::move(other.stdout_)),
      stderr_partial_(std::move(other.stderr_partial_)),
      stderr_lines_(std::move(other.stderr_lines_)),
      stderr_all_(std::move(other.stderr_all_)) {}

ChildProcess::~ChildProcess() {
  if (pid_ > 0 && !reaped_) {
    Signal(SIGKILL);
    int status;
    waitpid(pid_, &status, 0);
    UnregisterChild(pid_);
  }
  CloseFds();
}

void ChildProcess::CloseFds() {
  CloseIfOpen(stdout_fd_);
  CloseIfOpen(stderr_fd_);
}

void ChildProcess::Signal(int signo) const {
  if (pid_ > 0 && !reaped_) kill(-pid_, signo);
}

bool ChildProcess::TryReap() {
  if (reaped_ || pid_ <= 0) return reaped_;
  int status = 0;
  struct rusage usage = {};
  const pid_t r = wait4(pid_, &status, WNOHANG, &usage);
  if (r != pid_) return false;
  reaped_ = true;
  UnregisterChild(pid_);
  exit_.wait_status = status;
  exit_.cpu_seconds = usage.ru_utime.tv_sec + usage.ru_stime.tv_sec +
                      (usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
  return true;
}

void ChildProcess::Consume(int fd, const char* data, size_t len) {
  if (fd == stdout_fd_) {
    stdout_.append(data, len);
    return;
  }
  if (echo_stderr_) fwrite(data, 1, len, stderr);
  if (keep_stderr_) stderr_all_.append(data, len);
  stderr_partial_.append(data, len);
  size_t newline;
  while ((newline = stderr_partial_.find('\n')) != std::string::npos) {
    stderr_lines_.push_back(stderr_partial_.substr(0, newline));
    stderr_partial_.erase(0, newline + 1);
    if (stderr_lines_.size() > kStderrTailLines) stderr_lines_.pop_front();
  }
}

bool ChildProcess::stderr_contains(std::string_view needle) const {
  for (const std::string& line : stderr_lines_) {
    if (line.find(needle) != std::string::npos) return true;
  }
  return stderr_partial_.find(needle) != std::string::npos;
}

std::string ChildProcess::StderrTail() const {
  std::string tail = absl::StrJoin(stderr_lines_, "\n");
  if (!stderr_partial_.empty()) absl::StrAppend(&tail, "\n", stderr_partial_);
  return tail.empty() ? "(no stderr output)" : tail;
}

std::string ChildProcess::CommandLine() const {
  return absl::StrJoin(argv_, " ");
}

void PumpOutput(std::vector<ChildProcess*> children, absl::Duration timeout) {
  std::vector<pollfd> fds;
  std::vector<ChildProcess*> owners;
  for (ChildProcess* child : children) {
    for (int fd : {child->stdout_fd_, child->stderr_fd_}) {
      if (fd < 0) continue;
      fds.push_back({.fd = fd, .events = POLLIN, .revents = 0});
      owners.push_back(child);
    }
  }
  const int timeout_ms = static_cast<int>(absl::ToInt64Milliseconds(timeout));
  if (fds.empty()) {
    poll(nullptr, 0, timeout_ms);  // keeps the caller's pace; EINTR is fine
    return;
  }
  if (poll(fds.data(), fds.size(), timeout_ms) <= 0) return;
  char buf[16384];
  for (size_t i = 0; i < fds.size(); ++i) {
    if (fds[i].revents == 0) continue;
    const ssize_t n = read(fds[i].fd, buf, sizeof(buf));
    if (n > 0) {
      owners[i]->Consume(fds[i].fd, buf, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    // End of file (or a read error): stop polling this pipe.
    if (owners[i]->stdout_fd_ == fds[i].fd) CloseIfOpen(owners[i]->stdout_fd_);
    if (owners[i]->stderr_fd_ == fds[i].fd) CloseIfOpen(owners[i]->stderr_fd_);
  }
}

ChildExit WaitChild(ChildProcess& child, std::vector<ChildProcess*> others,
                    absl::Duration timeout) {
  others.push_back(&child);
  const absl::Time deadline = absl::Now() + timeout;
  absl::Time kill_at = absl::InfiniteFuture();
  while (!child.TryReap()) {
    PumpOutput(others, absl::Milliseconds(50));
    const absl::Time now = absl::Now();
    if (now >= kill_at) {
      child.Signal(SIGKILL);
    } else if (now >= deadline && kill_at == absl::InfiniteFuture()) {
      child.Signal(SIGTERM);
      kill_at = now + absl::Seconds(2);
    }
  }
  // What it wrote last may still be in the pipes; drain them to EOF (a
  // bounded wait: a grandchild could hold the write ends open).
  for (int i = 0; i < 100 && child.output_open(); ++i) {
    PumpOutput(others, absl::Milliseconds(10));
  }
  return child.exit();
}

absl::Status RunCommand(std::vector<std::string> argv,
                        const std::string& netns) {
  absl::StatusOr<ChildProcess> child = ChildProcess::Start(
      {.argv = std::move(argv), .netns = netns, .echo_stderr = false});
  if (!child.ok()) return child.status();
  const ChildExit exit = WaitChild(*child, {}, absl::Seconds(30));
  if (exit.Succeeded()) return absl::OkStatus();
  std::string where =
      netns.empty() ? "" : absl::StrCat(" (in netns ", netns, ")");
  return absl::InternalError(absl::StrCat("`", child->CommandLine(), "`", where,
                                          " ", exit.Describe(), ": ",
                                          child->StderrTail()));
}

}  // namespace netstack::tools::bench
