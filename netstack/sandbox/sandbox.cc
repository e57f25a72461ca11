#include "netstack/sandbox/sandbox.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "link/netns.h"
#include "netstack/sandbox/sandbox_init.h"

namespace netstack::sandbox {
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

absl::Status HideFromGuest() {
  if (::prctl(PR_SET_DUMPABLE, 0) != 0 || ::prctl(PR_GET_DUMPABLE) != 0) {
    return ErrnoStatus(errno, "prctl(PR_SET_DUMPABLE, 0)");
  }
  return absl::OkStatus();
}

namespace {

// A child made in a new user and network namespace, to hold them while we
// map its ids and open them; it only waits for the end of the pipe, which
// goes to *hold. (unshare would need a single-threaded process and would
// move this one.)
absl::StatusOr<pid_t> CloneNamespaceHolder(UniqueFd* hold) {
  int sync[2];
  if (::pipe2(sync, O_CLOEXEC) != 0) return ErrnoStatus(errno, "pipe2");
  const pid_t child =
      init::CloneProcess(CLONE_NEWUSER | CLONE_NEWNET);
  if (child == 0) {
    // Dumpable, so that its /proc files are its owner's (ours) even when
    // this process is not; it runs nothing of the guest's.
    ::prctl(PR_SET_DUMPABLE, 1);
    ::close(sync[1]);
    char byte;
    (void)!::read(sync[0], &byte, 1);
    _exit(0);
  }
  const int clone_err = errno;
  ::close(sync[0]);
  *hold = UniqueFd(sync[1]);
  if (child < 0) {
    if (clone_err == EPERM || clone_err == ENOSPC || clone_err == EUSERS) {
      return absl::FailedPreconditionError(absl::StrCat(
          "CMD runs in a user namespace of its own, and this kernel does "
          "not let netstackd make one (clone: ",
          std::strerror(clone_err), "; user.max_user_namespaces = ",
          ReadSysctl("/proc/sys/user/max_user_namespaces"),
          "): allow user namespaces"));
    }
    return ErrnoStatus(clone_err,
                       "clone(CLONE_NEWUSER | CLONE_NEWNET) for CMD");
  }
  return child;
}

// Maps the holder's ids and opens its namespaces.
absl::StatusOr<GuestNamespaces> MapAndOpen(pid_t child, bool root,
                                           const RunAs& runas) {
  // Root in C is root here when we are not root: the caller. As root, it
  // is --runas (nobody by default), so that no uid check of the kernel
  // (/proc/sys, device nodes, root's files) takes CMD for root; --runas 0
  // maps every uid and gid to itself instead. Either way CMD holds
  // capabilities over C's namespaces only.
  std::string uid_map = "0 0 1\n";
  std::string gid_map = "0 0 1\n";
  if (root && runas.uid == 0) {
    uid_map = gid_map = "0 0 4294967295\n";
  } else if (root) {
    uid_map = absl::StrCat("0 ", runas.uid, " 1\n");
    gid_map = absl::StrCat("0 ", runas.gid, " 1\n");
  }
  const std::string proc = absl::StrCat("/proc/", child);
  absl::Status s = WriteFile(absl::StrCat(proc, "/uid_map").c_str(), uid_map);
  if (s.ok()) s = WriteFile(absl::StrCat(proc, "/gid_map").c_str(), gid_map);
  if (!s.ok()) return s;
  GuestNamespaces ns;
  ns.userns = UniqueFd(::open(absl::StrCat(proc, "/ns/user").c_str(),
                              O_RDONLY | O_CLOEXEC));
  ns.netns = UniqueFd(::open(absl::StrCat(proc, "/ns/net").c_str(),
                             O_RDONLY | O_CLOEXEC));
  if (!ns.userns.valid() || !ns.netns.valid()) {
    return ErrnoStatus(errno, absl::StrCat("open ", proc, "/ns"));
  }
  return ns;
}

}  // namespace

absl::StatusOr<GuestNamespaces> MakeGuestNamespaces(bool* made_userns,
                                                    const RunAs& runas) {
  *made_userns = false;
  const bool root = geteuid() == 0;
  if (!root) {
    if (absl::Status s = MakeUserns(); !s.ok()) return s;
    *made_userns = true;
  }
  UniqueFd hold;
  absl::StatusOr<pid_t> child = CloneNamespaceHolder(&hold);
  if (!child.ok()) return child.status();
  absl::StatusOr<GuestNamespaces> ns = MapAndOpen(*child, root, runas);
  hold = UniqueFd();  // the child exits
  int status;
  while (::waitpid(*child, &status, 0) < 0 && errno == EINTR) {
  }
  return ns;
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

using init::ChildReport;
using init::StepName;

// Whether `path` names nothing a bind mount could land on: missing, or a
// symlink that leads nowhere (systemd-resolved's stub, when it is
// stopped).
bool Unresolvable(const char* path) {
  struct stat st;
  return ::stat(path, &st) != 0 && (errno == ENOENT || errno == ENOTDIR ||
                                    errno == ELOOP);
}

// Any of our stdio fds a terminal: CMD gets a pty of its own instead
// (sandbox.h), so that it never holds the user's terminal.
bool AnyTerminal() { return ::isatty(0) || ::isatty(1) || ::isatty(2); }

// netstackd in the foreground of the terminal on stdin: the user's keys go
// to CMD's pty. A background netstackd (`netstackd -- CMD &`) leaves the
// terminal's input to the shell: CMD reads nothing from it.
bool ForegroundTerminal() {
  return ::isatty(0) && ::tcgetpgrp(0) == ::getpgrp();
}

// The resolv.conf CMD sees: a file of ours, bind-mounted by the init and
// unlinked once it is mounted (or the start failed). When /etc/resolv.conf
// leads nowhere there is nothing to bind it over: the init writes it into
// an overlay of /etc instead, whose tmpfs goes on a directory of ours,
// removed the same way. Both names go when this does.
class ResolvFiles {
 public:
  ResolvFiles() = default;
  ResolvFiles(const ResolvFiles&) = delete;
  ResolvFiles& operator=(const ResolvFiles&) = delete;
  ~ResolvFiles() {
    if (!resolv_path_.empty()) ::unlink(resolv_path_.c_str());
    if (!overlay_dir_.empty()) ::rmdir(overlay_dir_.c_str());
  }

  // Makes the file (or the directory) for `text` under $TMPDIR or /tmp;
  // nothing when `text` is empty.
  absl::Status Make(const std::string& text) {
    const char* tmp = std::getenv("TMPDIR");
    const std::string tmpdir = tmp != nullptr && *tmp != '\0' ? tmp : "/tmp";
    if (!text.empty() && Unresolvable("/etc/resolv.conf")) {
      std::string dir = absl::StrCat(tmpdir, "/netstackd-etc.XXXXXX");
      if (::mkdtemp(dir.data()) == nullptr) {
        return ErrnoStatus(errno, absl::StrCat("create ", dir));
      }
      overlay_dir_ = std::move(dir);
    } else if (!text.empty()) {
      std::string path = absl::StrCat(tmpdir, "/netstackd-resolv.XXXXXX");
      UniqueFd f(::mkostemp(path.data(), O_CLOEXEC));
      if (!f.valid()) {
        return ErrnoStatus(errno, absl::StrCat("create ", path));
      }
      const bool ok =
          ::fchmod(f.get(), 0644) == 0 &&
          ::write(f.get(), text.data(), text.size()) ==
              static_cast<ssize_t>(text.size());
      if (!ok) {
        const int err = errno;
        ::unlink(path.c_str());
        return ErrnoStatus(err, absl::StrCat("write ", path));
      }
      resolv_path_ = std::move(path);
    }
    return absl::OkStatus();
  }

  // For the init's plan: nullptr when there is none.
  const char* resolv_path() const {
    return resolv_path_.empty() ? nullptr : resolv_path_.c_str();
  }
  const char* overlay_dir() const {
    return overlay_dir_.empty() ? nullptr : overlay_dir_.c_str();
  }

 private:
  std::string resolv_path_;
  std::string overlay_dir_;
};

// A NULL-terminated array of `strings`' C strings, for the init (which
// makes system calls only).
std::vector<const char*> CStrings(const std::vector<std::string>& strings) {
  std::vector<const char*> out;
  for (const std::string& s : strings) out.push_back(s.c_str());
  out.push_back(nullptr);
  return out;
}

}  // namespace

absl::StatusOr<SandboxCommand> SandboxCommand::Start(const Options& options) {
  if (options.argv.empty()) {
    return absl::InvalidArgumentError("no command to run");
  }
  // Removed when Start returns: mounted in the init's namespace by then,
  // or never.
  ResolvFiles files;
  if (absl::Status s = files.Make(options.resolv_conf); !s.ok()) return s;
  std::vector<const char*> argv = CStrings(options.argv);
  int pipefd[2];
  if (::pipe2(pipefd, O_CLOEXEC) != 0) return ErrnoStatus(errno, "pipe2");
  const bool pty = options.allow_pty && AnyTerminal();
  std::vector<const char*> cover = CStrings(options.cover);
  const init::InitPlan plan{
      .pipe_fd = pipefd[1],
      .netns_fd = options.netns_fd,
      .userns_fd = options.userns_fd,
      .resolv_path = files.resolv_path(),
      .overlay_dir = files.overlay_dir(),
      .resolv_text = options.resolv_conf.data(),
      .resolv_len = options.resolv_conf.size(),
      .cover = cover.data(),
      .pty = pty,
      .relay_input = pty && ForegroundTerminal(),
      .tty_out = !pty ? -1 : ::isatty(1) ? 1 : ::isatty(2) ? 2 : -1,
      .argv = const_cast<char**>(argv.data()),
  };
  const pid_t pid = init::CloneProcess(CLONE_NEWPID);
  if (pid < 0) {
    const int err = errno;
    ::close(pipefd[0]);
    ::close(pipefd[1]);
    return ErrnoStatus(err, "clone(CLONE_NEWPID): a PID namespace for CMD");
  }
  if (pid == 0) {
    ::close(pipefd[0]);
    init::RunInit(plan);
  }
  ::close(pipefd[1]);
  return Started(options, pid, UniqueFd(pipefd[0]));
}

absl::StatusOr<SandboxCommand> SandboxCommand::Started(const Options& options,
                                                       pid_t pid,
                                                       UniqueFd start_pipe) {
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
    if (r.step == init::kOverlayEtc) {
      notes.push_back(absl::StrCat(
          "/etc/resolv.conf does not exist here (or is a symlink that leads "
          "nowhere), and CMD's could not be made (",
          StepName(r.step), ": ", std::strerror(r.err),
          "): CMD has no resolver configuration"));
    } else {
      failure = r;
    }
  }
  if (failure.step >= 0) {
    int status;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (failure.step == init::kExec) {
      return absl::Status(
          failure.err == ENOENT ? absl::StatusCode::kNotFound
                                : absl::StatusCode::kFailedPrecondition,
          absl::StrCat("cannot run '", options.argv[0],
                       "': ", std::strerror(failure.err)));
    }
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot start '", options.argv[0], "': ", StepName(failure.step),
        ": ", std::strerror(failure.err),
        failure.step == init::kBind
            ? " (--no-dns-config leaves /etc/resolv.conf alone)"
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
  // The init's own way out first, which puts the user's terminal back;
  // SIGKILL if it has not gone within a second. (wait4 and nanosleep: the
  // calls the seccomp filter allows, docs/SECURITY.md.)
  ::kill(pid_, init::kEndSignal);
  int status;
  for (int i = 0; i < 100; ++i) {
    const pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r == pid_ || (r < 0 && errno != EINTR)) return;
    const struct timespec tick = {.tv_sec = 0, .tv_nsec = 10'000'000};
    ::nanosleep(&tick, nullptr);
  }
  ::kill(pid_, SIGKILL);
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

}  // namespace netstack::sandbox
