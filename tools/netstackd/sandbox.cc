#include "tools/netstackd/sandbox.h"

#include <fcntl.h>
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

// What the child reports through its exec pipe when a step fails.
struct ChildError {
  int step;
  int err;
};
enum Step : int { kSetns, kUnshareMount, kPrivate, kBind, kExec };

const char* StepName(int step) {
  switch (step) {
    case kSetns: return "enter the guest's network namespace";
    case kUnshareMount: return "make a mount namespace";
    case kPrivate: return "make / private in it";
    case kBind: return "bind-mount resolv.conf over /etc/resolv.conf";
    default: return "exec";
  }
}

[[noreturn]] void ChildFail(int pipe_fd, int step) {
  const ChildError e{step, errno};
  (void)!::write(pipe_fd, &e, sizeof(e));
  _exit(127);
}

}  // namespace

absl::StatusOr<SandboxCommand> SandboxCommand::Start(const Options& options) {
  if (options.argv.empty()) {
    return absl::InvalidArgumentError("no command to run");
  }
  // The resolv.conf CMD sees: a file of ours, bind-mounted by the child and
  // unlinked here once it is mounted (or the child failed).
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
  // Everything the child needs, built before fork: after it, the child
  // makes system calls only.
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
  const pid_t parent = getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int err = errno;
    ::close(pipefd[0]);
    ::close(pipefd[1]);
    if (!resolv_path.empty()) ::unlink(resolv_path.c_str());
    return ErrnoStatus(err, "fork");
  }
  if (pid == 0) {
    ::close(pipefd[0]);
    // CMD dies with netstackd: without us it has no network.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    // The event loop blocks the signals it handles; CMD starts clean.
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    if (::setns(options.netns_fd, CLONE_NEWNET) != 0) {
      ChildFail(pipefd[1], kSetns);
    }
    if (!resolv_path.empty()) {
      if (::unshare(CLONE_NEWNS) != 0) ChildFail(pipefd[1], kUnshareMount);
      if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
        ChildFail(pipefd[1], kPrivate);
      }
      if (::mount(resolv_path.c_str(), "/etc/resolv.conf", nullptr, MS_BIND,
                  nullptr) != 0) {
        ChildFail(pipefd[1], kBind);
      }
    }
    ::execvp(argv[0], argv.data());
    ChildFail(pipefd[1], kExec);
  }
  ::close(pipefd[1]);
  ChildError e{};
  ssize_t n;
  do {
    n = ::read(pipefd[0], &e, sizeof(e));
  } while (n < 0 && errno == EINTR);
  ::close(pipefd[0]);
  if (!resolv_path.empty()) ::unlink(resolv_path.c_str());
  if (n == static_cast<ssize_t>(sizeof(e))) {
    int status;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (e.step == kExec) {
      return absl::Status(
          e.err == ENOENT ? absl::StatusCode::kNotFound
                          : absl::StatusCode::kFailedPrecondition,
          absl::StrCat("cannot run '", options.argv[0],
                       "': ", std::strerror(e.err)));
    }
    return absl::FailedPreconditionError(
        absl::StrCat("cannot start '", options.argv[0], "': ",
                     StepName(e.step), ": ", std::strerror(e.err),
                     e.step == kBind ? " (--no-dns-config leaves "
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
  return SandboxCommand(pid, std::move(*pidfd));
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
