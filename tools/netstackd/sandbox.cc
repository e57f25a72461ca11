#include "tools/netstackd/sandbox.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "link/netns.h"

namespace netstack::tools {
namespace {

using link::ErrnoStatus;
using link::UniqueFd;

absl::Status WriteFile(const char* path, const std::string& text) {
  UniqueFd fd(::open(path, O_WRONLY | O_CLOEXEC));
  if (!fd.valid()) return ErrnoStatus(errno, absl::StrCat("open ", path));
  if (::write(fd.get(), text.data(), text.size()) !=
      static_cast<ssize_t>(text.size())) {
    return ErrnoStatus(errno, absl::StrCat("write ", path));
  }
  return absl::OkStatus();
}

std::string ReadSysctl(const char* path) {
  FILE* f = std::fopen(path, "re");
  if (f == nullptr) return "?";
  char buf[32] = {};
  const bool got = std::fgets(buf, sizeof(buf), f) != nullptr;
  std::fclose(f);
  if (!got) return "?";
  std::string s(buf);
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

// The caller, mapped to root in a new user namespace.
absl::Status MakeUserns() {
  const uid_t uid = geteuid();
  const gid_t gid = getegid();
  if (::unshare(CLONE_NEWUSER) != 0) {
    const int err = errno;
    if (err == EPERM || err == ENOSPC || err == EUSERS) {
      return absl::FailedPreconditionError(absl::StrCat(
          "not root, and this kernel does not let this user make a user "
          "namespace (unshare: ",
          std::strerror(err), "; user.max_user_namespaces = ",
          ReadSysctl("/proc/sys/user/max_user_namespaces"),
          ", kernel.unprivileged_userns_clone = ",
          ReadSysctl("/proc/sys/kernel/unprivileged_userns_clone"),
          "): run netstackd as root, or allow user namespaces"));
    }
    return ErrnoStatus(err, "unshare(CLONE_NEWUSER)");
  }
  if (absl::Status s = WriteFile("/proc/self/setgroups", "deny"); !s.ok()) {
    return s;
  }
  if (absl::Status s =
          WriteFile("/proc/self/uid_map", absl::StrCat("0 ", uid, " 1\n"));
      !s.ok()) {
    return s;
  }
  return WriteFile("/proc/self/gid_map", absl::StrCat("0 ", gid, " 1\n"));
}

}  // namespace

absl::StatusOr<UniqueFd> OpenPidfd(pid_t pid) {
  const int fd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (fd < 0) {
    const int err = errno;
    if (err == ESRCH || err == EINVAL) {
      return absl::NotFoundError(absl::StrCat("no process ", pid));
    }
    return ErrnoStatus(err, absl::StrCat("pidfd_open ", pid));
  }
  // pidfd_open sets O_CLOEXEC itself.
  return UniqueFd(fd);
}

absl::StatusOr<UniqueFd> MakeGuestNetns(bool* made_userns) {
  *made_userns = false;
  if (geteuid() != 0) {
    if (absl::Status s = MakeUserns(); !s.ok()) return s;
    *made_userns = true;
  }
  // A thread makes the namespace and hands it over: this thread stays in
  // the host's namespace.
  absl::StatusOr<UniqueFd> result = absl::InternalError("not run");
  std::thread maker([&] {
    if (::unshare(CLONE_NEWNET) != 0) {
      result = ErrnoStatus(errno, "unshare(CLONE_NEWNET)");
      return;
    }
    UniqueFd fd(::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC));
    if (!fd.valid()) {
      result = ErrnoStatus(errno, "open /proc/thread-self/ns/net");
      return;
    }
    result = std::move(fd);
  });
  maker.join();
  return result;
}

absl::Status JoinUserns(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return ErrnoStatus(errno, absl::StrCat("open ", path));
  if (::setns(fd.get(), CLONE_NEWUSER) != 0) {
    const int err = errno;
    return ErrnoStatus(err, absl::StrCat("enter user namespace ", path,
                                         err == EINVAL
                                             ? " (not a user namespace, or "
                                               "it is our own)"
                                             : ""));
  }
  return absl::OkStatus();
}

absl::StatusOr<UniqueFd> OpenNetnsOfPid(pid_t pid, bool join_userns,
                                        UniqueFd* pidfd) {
  absl::StatusOr<UniqueFd> p = OpenPidfd(pid);
  if (!p.ok()) return p.status();
  const std::string ns = absl::StrCat("/proc/", pid, "/ns/net");
  UniqueFd fd(::open(ns.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return ErrnoStatus(errno, absl::StrCat("open ", ns));
  if (join_userns) {
    if (absl::Status s = JoinUserns(absl::StrCat("/proc/", pid, "/ns/user"));
        !s.ok()) {
      return s;
    }
  }
  *pidfd = std::move(*p);
  return fd;
}

absl::StatusOr<UniqueFd> OpenNetnsPath(const std::string& name_or_path,
                                       std::string* path) {
  *path = name_or_path.find('/') == std::string::npos
              ? absl::StrCat(link::kNetnsDir, "/", name_or_path)
              : name_or_path;
  UniqueFd fd(::open(path->c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) {
    const int err = errno;
    if (err == ENOENT) {
      return absl::NotFoundError(
          absl::StrCat("network namespace ", *path, " does not exist"));
    }
    return ErrnoStatus(err, absl::StrCat("open ", *path));
  }
  return fd;
}

namespace {

// What the init and CMD report through the start pipe, one record per
// write (a pipe write this small is atomic). A failed step ends the start;
// a note (kMountProc, and the mount namespace's steps when there is no
// resolv.conf to mount) does not.
struct ChildReport {
  int step;
  int err;
};
enum Step : int {
  kSetns,
  kUnshareMount,
  kPrivate,
  kBind,
  kMountProc,
  kForkCommand,
  kExec,
};

const char* StepName(int step) {
  switch (step) {
    case kSetns: return "enter the guest's network namespace";
    case kUnshareMount: return "make a mount namespace";
    case kPrivate: return "make / private in it";
    case kBind: return "bind-mount resolv.conf over /etc/resolv.conf";
    case kMountProc: return "mount a /proc of the PID namespace";
    case kForkCommand: return "fork CMD in the PID namespace";
    default: return "exec";
  }
}

void ChildReportStep(int pipe_fd, int step) {
  const ChildReport r{step, errno};
  (void)!::write(pipe_fd, &r, sizeof(r));
}

[[noreturn]] void ChildFail(int pipe_fd, int step) {
  ChildReportStep(pipe_fd, step);
  _exit(127);
}

// fork(2) with clone flags, as a system call: glibc's fork() would run
// its atfork handlers and take locks (malloc's) that another thread of
// netstackd may hold; the child makes system calls only. A null stack
// means the child runs on a copy of ours, as after fork. (flags, stack,
// parent_tid, child_tid, tls) is x86-64's and arm64's order up to the last
// two, which are null either way.
pid_t CloneProcess(unsigned long flags) {
  return static_cast<pid_t>(
      ::syscall(SYS_clone, flags | SIGCHLD, nullptr, nullptr, nullptr,
                nullptr));
}

// Whether nobody reads the start pipe any more: netstackd died before the
// child asked to die with it.
bool StartPipeOrphaned(int pipe_fd) {
  struct pollfd p = {.fd = pipe_fd, .events = POLLOUT, .revents = 0};
  return ::poll(&p, 1, 0) == 1 && (p.revents & POLLERR) != 0;
}

// What the init needs, built before the clone: after it, the init and
// CMD make system calls only.
struct InitPlan {
  int pipe_fd;
  int netns_fd;
  const char* resolv_path;  // nullptr: leave /etc/resolv.conf alone
  char** argv;
};

// CMD's mount namespace: resolv.conf bound over /etc/resolv.conf, and a
// /proc of the PID namespace over the host's, so that ps and /proc/self
// tell the truth in it. The mount namespace and the /proc are a nicety
// without resolv.conf: a failure there is a note, not an error (a user
// namespace may not mount proc where /proc has masks over parts of it).
void SetUpMounts(const InitPlan& plan) {
  const bool need = plan.resolv_path != nullptr;
  auto failed = [&](int step) {
    if (need) ChildFail(plan.pipe_fd, step);
    ChildReportStep(plan.pipe_fd, step);
  };
  if (::unshare(CLONE_NEWNS) != 0) return failed(kUnshareMount);
  // Private first: nothing mounted here may propagate to the host's.
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
    return failed(kPrivate);
  }
  if (need && ::mount(plan.resolv_path, "/etc/resolv.conf", nullptr,
                      MS_BIND, nullptr) != 0) {
    ChildFail(plan.pipe_fd, kBind);
  }
  if (::mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC,
              nullptr) != 0) {
    ChildReportStep(plan.pipe_fd, kMountProc);
  }
}

// The signals the init passes on to CMD: those netstackd passes on.
void ForwardedSignals(sigset_t* set) {
  sigemptyset(set);
  sigaddset(set, SIGINT);
  sigaddset(set, SIGTERM);
  sigaddset(set, SIGHUP);
}

// Pid 1's loop. The kernel delivers to a PID namespace's init only the
// signals it handles, so the init takes them with sigwaitinfo (blocked
// signals are queued, never dropped), passes them on to CMD, and reaps
// every child: CMD, and the orphans the kernel hands to it. When CMD
// ends, the init ends with its status (128 + N for signal N: the number
// netstackd reports either way), and the kernel kills everything left in
// the namespace.
[[noreturn]] void InitLoop(pid_t command, const sigset_t& waited) {
  for (;;) {
    const int signo = ::sigwaitinfo(&waited, nullptr);
    if (signo < 0) continue;  // EINTR
    if (signo != SIGCHLD) {
      ::kill(command, signo);
      continue;
    }
    int status;
    pid_t r;
    while ((r = ::waitpid(-1, &status, WNOHANG)) > 0) {
      if (r != command) continue;
      _exit(WIFEXITED(status)     ? WEXITSTATUS(status)
            : WIFSIGNALED(status) ? 128 + WTERMSIG(status)
                                  : 1);
    }
  }
}

// The child netstackd clones into a new PID namespace: its pid 1.
[[noreturn]] void RunInit(const InitPlan& plan) {
  // CMD dies with netstackd: without us it has no network. The init's
  // death is CMD's, and its whole namespace's.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (StartPipeOrphaned(plan.pipe_fd)) _exit(127);
  if (::setns(plan.netns_fd, CLONE_NEWNET) != 0) {
    ChildFail(plan.pipe_fd, kSetns);
  }
  SetUpMounts(plan);
  // Blocked before CMD exists, so that none is lost before the loop.
  sigset_t waited;
  ForwardedSignals(&waited);
  sigaddset(&waited, SIGCHLD);
  ::sigprocmask(SIG_SETMASK, &waited, nullptr);
  const pid_t command = CloneProcess(0);
  if (command < 0) ChildFail(plan.pipe_fd, kForkCommand);
  if (command == 0) {
    // The event loop blocks the signals it handles; CMD starts clean.
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::execvp(plan.argv[0], plan.argv);
    ChildFail(plan.pipe_fd, kExec);
  }
  // The init keeps no fd: not netstackd's (the TAP, its sockets), not
  // the start pipe (netstackd reads to its end), not CMD's stdio.
  ::close_range(0, ~0U, 0);
  InitLoop(command, waited);
}

}  // namespace

absl::StatusOr<SandboxCommand> SandboxCommand::Start(const Options& options) {
  if (options.argv.empty()) {
    return absl::InvalidArgumentError("no command to run");
  }
  // The resolv.conf CMD sees: a file of ours, bind-mounted by the init and
  // unlinked here once it is mounted (or the start failed).
  std::string resolv_path;
  if (!options.resolv_conf.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    resolv_path = absl::StrCat(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp",
                               "/netstackd-resolv.XXXXXX");
    UniqueFd f(::mkostemp(resolv_path.data(), O_CLOEXEC));
    if (!f.valid()) {
      return ErrnoStatus(errno, absl::StrCat("create ", resolv_path));
    }
    const bool ok =
        ::fchmod(f.get(), 0644) == 0 &&
        ::write(f.get(), options.resolv_conf.data(),
                options.resolv_conf.size()) ==
            static_cast<ssize_t>(options.resolv_conf.size());
    if (!ok) {
      const int err = errno;
      ::unlink(resolv_path.c_str());
      return ErrnoStatus(err, absl::StrCat("write ", resolv_path));
    }
  }
  std::vector<char*> argv;
  for (const std::string& a : options.argv) {
    argv.push_back(const_cast<char*>(a.c_str()));
  }
  argv.push_back(nullptr);
  int pipefd[2];
  if (::pipe2(pipefd, O_CLOEXEC) != 0) {
    const int err = errno;
    if (!resolv_path.empty()) ::unlink(resolv_path.c_str());
    return ErrnoStatus(err, "pipe2");
  }
  const InitPlan plan{
      .pipe_fd = pipefd[1],
      .netns_fd = options.netns_fd,
      .resolv_path = resolv_path.empty() ? nullptr : resolv_path.c_str(),
      .argv = argv.data(),
  };
  const pid_t pid = CloneProcess(CLONE_NEWPID);
  if (pid < 0) {
    const int err = errno;
    ::close(pipefd[0]);
    ::close(pipefd[1]);
    if (!resolv_path.empty()) ::unlink(resolv_path.c_str());
    return ErrnoStatus(err, "clone(CLONE_NEWPID): a PID namespace for CMD");
  }
  if (pid == 0) {
    ::close(pipefd[0]);
    RunInit(plan);
  }
  ::close(pipefd[1]);
  return Started(options, pid, UniqueFd(pipefd[0]), resolv_path);
}

absl::StatusOr<SandboxCommand> SandboxCommand::Started(
    const Options& options, pid_t pid, UniqueFd start_pipe,
    const std::string& resolv_path) {
  // Notes, then at most one failure, then the end of the pipe: CMD has
  // exec'd (or the init is gone).
  std::vector<std::string> notes;
  ChildReport failure{-1, 0};
  ChildReport r{};
  ssize_t n;
  for (;;) {
    n = ::read(start_pipe.get(), &r, sizeof(r));
    if (n < 0 && errno == EINTR) continue;
    if (n != static_cast<ssize_t>(sizeof(r))) break;
    if (r.step == kMountProc ||
        (options.resolv_conf.empty() &&
         (r.step == kUnshareMount || r.step == kPrivate))) {
      notes.push_back(absl::StrCat("could not ", StepName(r.step),
                                   " for CMD (", std::strerror(r.err),
                                   "): CMD sees netstackd's /proc"));
    } else {
      failure = r;
    }
  }
  if (!resolv_path.empty()) ::unlink(resolv_path.c_str());
  if (failure.step >= 0) {
    int status;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (failure.step == kExec) {
      return absl::Status(
          failure.err == ENOENT ? absl::StatusCode::kNotFound
                                : absl::StatusCode::kFailedPrecondition,
          absl::StrCat("cannot run '", options.argv[0],
                       "': ", std::strerror(failure.err)));
    }
    return absl::FailedPreconditionError(
        absl::StrCat("cannot start '", options.argv[0], "': ",
                     StepName(failure.step), ": ",
                     std::strerror(failure.err),
                     failure.step == kBind ? " (--no-dns-config leaves "
                                             "/etc/resolv.conf alone)"
                                           : ""));
  }
  absl::StatusOr<UniqueFd> pidfd = OpenPidfd(pid);
  if (!pidfd.ok()) {
    ::kill(pid, SIGKILL);
    int status;
    ::waitpid(pid, &status, 0);
    return pidfd.status();
  }
  return SandboxCommand(pid, std::move(*pidfd), std::move(notes));
}

SandboxCommand::~SandboxCommand() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  int status;
  while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
}

void SandboxCommand::Signal(int signo) const {
  if (pid_ > 0) ::kill(pid_, signo);
}

bool SandboxCommand::Reap(int* status) {
  if (pid_ <= 0) return false;
  int raw = 0;
  pid_t r;
  do {
    r = ::waitpid(pid_, &raw, WNOHANG);
  } while (r < 0 && errno == EINTR);
  if (r != pid_) return false;
  pid_ = -1;
  *status = WIFEXITED(raw)     ? WEXITSTATUS(raw)
            : WIFSIGNALED(raw) ? 128 + WTERMSIG(raw)
                               : 1;
  return true;
}

}  // namespace netstack::tools
