#include "netstack/sandbox/pid_namespace_fence.h"

#include <fcntl.h>
#include <linux/nsfs.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace netstack::sandbox {
namespace {

using link::ErrnoStatus;
using link::UniqueFd;

// Newer than some libc headers: SO_PEERPIDFD (Linux 6.5),
// PIDFD_GET_PID_NAMESPACE and NS_GET_TGID_IN_PIDNS (6.11), PIDFD_GET_INFO
// (6.13).
#ifdef SO_PEERPIDFD
constexpr int kSoPeerPidfd = SO_PEERPIDFD;
#else
constexpr int kSoPeerPidfd = 77;
#endif
constexpr unsigned long kPidfdGetPidNamespace = _IO(0xFF, 5);
constexpr unsigned long kNsGetTgidInPidns = _IOR(0xb7, 0x9, int);
struct PidfdInfo {  // struct pidfd_info, its first version (64 bytes)
  uint64_t mask;
  uint64_t cgroupid;
  uint32_t pid;
  uint32_t tgid;
  uint32_t rest[10];
};
static_assert(sizeof(PidfdInfo) == 64);
constexpr uint64_t kPidfdInfoPid = 1;
constexpr unsigned long kPidfdGetInfo = _IOWR(0xFF, 11, PidfdInfo);

// Past the kernel's nesting limit (MAX_PID_NS_LEVEL, 32): a walk that
// gets here has gone wrong.
constexpr int kMaxDepth = 40;

absl::StatusOr<UniqueFd> NamespaceOfPid(int proc, pid_t pid) {
  const std::string name = absl::StrCat(pid, "/ns/pid");
  UniqueFd ns(openat(proc, name.c_str(), O_RDONLY | O_CLOEXEC));
  if (!ns.valid()) {
    return ErrnoStatus(errno, absl::StrCat("open /proc/", name));
  }
  return ns;
}

// /proc, if it is a proc of our PID namespace (its numbers are ours).
absl::StatusOr<UniqueFd> OpenOwnProc() {
  UniqueFd proc(open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!proc.valid()) return ErrnoStatus(errno, "open /proc");
  char self[32];
  const ssize_t n = readlinkat(proc.get(), "self", self, sizeof(self));
  if (n <= 0 ||
      std::string(self, static_cast<size_t>(n)) != absl::StrCat(getpid())) {
    return absl::FailedPreconditionError(
        "/proc is not a proc of netstackd's PID namespace");
  }
  return proc;
}

std::vector<pid_t> ChildrenOf(int proc, pid_t pid) {
  std::vector<pid_t> children;
  const std::string name = absl::StrCat(pid, "/task/", pid, "/children");
  UniqueFd f(openat(proc, name.c_str(), O_RDONLY | O_CLOEXEC));
  if (!f.valid()) return children;
  std::string text;
  char buf[4096];
  ssize_t n;
  while ((n = read(f.get(), buf, sizeof(buf))) > 0) text.append(buf, n);
  for (absl::string_view word :
       absl::StrSplit(text, ' ', absl::SkipWhitespace())) {
    int child = 0;
    if (absl::SimpleAtoi(word, &child) && child > 0) children.push_back(child);
  }
  return children;
}

// The PID namespace whose pid 1 is `init`, through a process inside it.
// The init may be one netstackd cannot inspect: a non-dumpable clone of
// netstackd belongs, for ptrace's checks, to the user namespace netstackd
// was started in, where an unprivileged netstackd has no capability.
// CMD, and whatever it started, belong to CMD's user namespace, which
// netstackd owns until it drops its capabilities.
absl::StatusOr<UniqueFd> NamespaceThroughAChild(int proc, pid_t init) {
  absl::Status last =
      absl::NotFoundError(absl::StrCat("process ", init, " has no child"));
  for (pid_t child : ChildrenOf(proc, init)) {
    absl::StatusOr<UniqueFd> ns = NamespaceOfPid(proc, child);
    if (!ns.ok()) {
      last = ns.status();
      continue;
    }
    // The init is pid 1 there: the child's namespace is the init's, even
    // if `child` is a number reused meanwhile. (No such check before
    // Linux 6.11.)
    const int there = ioctl(ns->get(), kNsGetTgidInPidns, init);
    if (there == 1 || (there < 0 && errno == ENOTTY)) return ns;
  }
  return last;
}

absl::Status Refused(const std::string& why) {
  return absl::PermissionDeniedError(why);
}

}  // namespace

absl::StatusOr<std::unique_ptr<PidNamespaceFence>> PidNamespaceFence::Below(
    pid_t pid, Options options) {
  // The namespace: by a pidfd (6.11), or by /proc; either needs ptrace
  // read access to the process, else one of its children's.
  UniqueFd ns;
  UniqueFd proc;
  {
    UniqueFd pidfd(static_cast<int>(syscall(SYS_pidfd_open, pid, 0)));
    if (!pidfd.valid() && errno == ESRCH) {
      return absl::NotFoundError(absl::StrCat("no process ", pid));
    }
    if (pidfd.valid()) {
      ns = UniqueFd(ioctl(pidfd.get(), kPidfdGetPidNamespace, 0));
    }
  }
  if (!ns.valid()) {
    absl::StatusOr<UniqueFd> p = OpenOwnProc();
    if (!p.ok()) return p.status();
    proc = *std::move(p);
    absl::StatusOr<UniqueFd> n = NamespaceOfPid(proc.get(), pid);
    if (!n.ok() && absl::IsNotFound(n.status())) {
      return absl::NotFoundError(absl::StrCat("no process ", pid));
    }
    if (!n.ok() && absl::IsPermissionDenied(n.status())) {
      n = NamespaceThroughAChild(proc.get(), pid);
    }
    if (!n.ok()) return n.status();
    ns = *std::move(n);
  }
  struct stat st;
  if (fstat(ns.get(), &st) != 0) return ErrnoStatus(errno, "fstat");
  // Below ours: it has a parent we may see. EPERM: it is ours, or outside.
  UniqueFd parent(ioctl(ns.get(), NS_GET_PARENT));
  if (!parent.valid()) {
    if (errno == EPERM) {
      return absl::FailedPreconditionError(
          absl::StrCat("process ", pid,
                       " is in netstackd's own PID namespace, or not "
                       "below it"));
    }
    return ErrnoStatus(errno, "NS_GET_PARENT");
  }
  // The process itself must have a number there (the init's is 1).
  Method method = Method::kProc;
  if (!options.force_proc && ioctl(ns.get(), kNsGetTgidInPidns, pid) > 0) {
    method = Method::kTranslate;
    proc.reset();
  } else if (!proc.valid()) {
    absl::StatusOr<UniqueFd> p = OpenOwnProc();
    if (!p.ok()) return p.status();
    proc = *std::move(p);
  }
  return std::unique_ptr<PidNamespaceFence>(
      new PidNamespaceFence(method, std::move(options.owner), std::move(proc),
                            std::move(ns), st.st_dev, st.st_ino));
}

PidNamespaceFence::PidNamespaceFence(Method method, std::string owner,
                                     UniqueFd proc, UniqueFd ns, dev_t dev,
                                     ino_t ino)
    : method_(method),
      owner_(std::move(owner)),
      proc_(std::move(proc)),
      ns_(std::move(ns)),
      dev_(dev),
      ino_(ino) {}

absl::Status PidNamespaceFence::CheckPeer(int fd) const {
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
    return Refused(absl::StrCat(
        "its PID cannot be had (SO_PEERCRED: ", std::strerror(errno), ")"));
  }
  // No number here: it runs in no namespace below ours.
  if (cred.pid == 0) return absl::OkStatus();
  return method_ == Method::kTranslate ? CheckByTranslation(fd, cred.pid)
                                       : CheckByWalk(cred.pid);
}

absl::Status PidNamespaceFence::Inside() const {
  return Refused(absl::StrCat("it runs inside ", owner_, " PID namespace"));
}

absl::Status PidNamespaceFence::CheckByTranslation(int fd, pid_t pid) const {
  if (ioctl(ns_.get(), kNsGetTgidInPidns, pid) > 0) return Inside();
  if (errno != ESRCH) {
    return Refused(
        absl::StrCat("its PID namespace cannot be told "
                     "(NS_GET_TGID_IN_PIDNS: ",
                     std::strerror(errno), ")"));
  }
  // Not there, if `pid` is still the peer's: the peer's pidfd says so
  // while the process it pins has not been reaped.
  int pidfd = -1;
  socklen_t len = sizeof(pidfd);
  if (getsockopt(fd, SOL_SOCKET, kSoPeerPidfd, &pidfd, &len) != 0) {
    // Before 6.5: no pidfd to ask.
    return errno == ENOPROTOOPT
               ? absl::OkStatus()
               : Refused(absl::StrCat("SO_PEERPIDFD: ", std::strerror(errno)));
  }
  const UniqueFd owned(pidfd);
  PidfdInfo info{};
  info.mask = kPidfdInfoPid;
  if (ioctl(pidfd, kPidfdGetInfo, &info) != 0) {
    if (errno == ENOTTY || errno == EINVAL) return absl::OkStatus();  // < 6.13
    return Refused(absl::StrCat(
        "it has gone (PIDFD_GET_INFO: ", std::strerror(errno), ")"));
  }
  if (info.tgid != static_cast<uint32_t>(pid)) {
    return Refused("its PID is no longer its own");
  }
  return absl::OkStatus();
}

absl::Status PidNamespaceFence::CheckByWalk(pid_t pid) const {
  absl::StatusOr<UniqueFd> ns = NamespaceOfPid(proc_.get(), pid);
  if (!ns.ok()) {
    return Refused(absl::StrCat("its PID namespace cannot be told (",
                                ns.status().message(), ")"));
  }
  UniqueFd at = *std::move(ns);
  for (int depth = 0; depth < kMaxDepth; ++depth) {
    struct stat st;
    if (fstat(at.get(), &st) != 0) {
      return Refused(
          absl::StrCat("fstat of its PID namespace: ", std::strerror(errno)));
    }
    if (st.st_dev == dev_ && st.st_ino == ino_) return Inside();
    UniqueFd parent(ioctl(at.get(), NS_GET_PARENT));
    if (!parent.valid()) {
      // Past netstackd's own namespace without meeting the fenced one.
      if (errno == EPERM) return absl::OkStatus();
      return Refused(absl::StrCat("NS_GET_PARENT: ", std::strerror(errno)));
    }
    at = std::move(parent);
  }
  return Refused("its PID namespaces nest too deep");
}

}  // namespace netstack::sandbox
