#include "netstack/sandbox/least_privilege.h"

#include <linux/capability.h>
#include <linux/nsfs.h>
#include <seccomp.h>
#include <signal.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <fcntl.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace netstack::sandbox {
namespace {

// linux/nsfs.h of Linux 6.11 and linux/pidfd.h of 6.13, newer than some
// libc headers (pid_namespace_fence.cc has the same).
constexpr unsigned long kNsGetTgidInPidns = _IOR(0xb7, 0x9, int);
constexpr unsigned long kPidfdGetInfo = 0xc040ff0b;  // _IOWR(0xFF, 11, 64 B)

// The type's bits of socket(2)'s second argument (the kernel's
// SOCK_TYPE_MASK); SOCK_NONBLOCK and SOCK_CLOEXEC are above them.
constexpr scmp_datum_t kSockTypeMask = 0xf;

// Sanitizer runtimes make calls of their own: reports read /proc/self/maps
// and symbolize, the leak check at exit stops the world with ptrace from a
// cloned task.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif

const std::vector<AllowedCall>& SanitizerCalls() {
  static const auto* calls = new std::vector<AllowedCall>{
      {"openat", "sanitizer: reads /proc/self/maps for a report"},
      {"open", "sanitizer: /proc/self/maps, the leak check's task list"},
      {"getdents", "sanitizer: the leak check lists the threads"},
      {"readlink", "sanitizer: its own path, for symbols"},
      {"readlinkat", "sanitizer: its own path, for symbols"},
      {"getdents64", "sanitizer: the leak check lists the threads"},
      {"ptrace", "sanitizer: the leak check stops the threads"},
      {"prctl", "sanitizer: the leak check allows its tracer"},
      {"clone", "sanitizer: the leak check's tracer task"},
      {"clone3", "sanitizer: the leak check's tracer task"},
      {"wait4", "sanitizer: reaps its tracer"},
      {"sched_getaffinity", "sanitizer: CPU count"},
      {"sched_yield", "sanitizer: spins while the world stops"},
      {"uname", "sanitizer: kernel version checks"},
      {"prlimit64", "sanitizer: stack limits"},
      {"getrlimit", "sanitizer: stack limits"},
      {"sigaltstack", "sanitizer: its signal stack"},
      {"getppid", "sanitizer: the tracer checks its parent"},
  };
  return *calls;
}

// The SIGSYS handler: async-signal-safe only (write, _exit).
void OnSigsys(int, siginfo_t* info, void*) {
  char buf[160];
  const char* prefix = "netstackd: system call ";
  size_t n = 0;
  for (const char* p = prefix; *p != '\0'; ++p) buf[n++] = *p;
  int nr = info->si_syscall;
  char digits[12];
  int d = 0;
  if (nr < 0) nr = -nr;
  do {
    digits[d++] = static_cast<char>('0' + nr % 10);
    nr /= 10;
  } while (nr > 0 && d < 11);
  while (d > 0) buf[n++] = digits[--d];
  // The name, from libseccomp's table: a static string, no allocation.
  const char* name = seccomp_syscall_resolve_num_arch(SCMP_ARCH_NATIVE,
                                                      info->si_syscall);
  if (name != nullptr) {
    buf[n++] = ' ';
    buf[n++] = '(';
    for (const char* p = name; *p != '\0' && n < 100; ++p) buf[n++] = *p;
    buf[n++] = ')';
  }
  const char* tail =
      " is not allowed after setup (see docs/SECURITY.md); stopping\n";
  for (const char* p = tail; *p != '\0' && n < sizeof(buf); ++p) {
    buf[n++] = *p;
  }
  (void)!write(STDERR_FILENO, buf, n);
  _exit(128 + SIGSYS);
}

absl::Status DropCapabilities(const LeastPrivilegeOptions& options) {
  __u32 keep[2] = {0, 0};
  if (options.keep_net_bind_service) {
    keep[CAP_TO_INDEX(CAP_NET_BIND_SERVICE)] |=
        CAP_TO_MASK(CAP_NET_BIND_SERVICE);
  }
  auto kept = [&](int cap) {
    return (keep[CAP_TO_INDEX(cap)] & CAP_TO_MASK(cap)) != 0;
  };
  // The bounding set first: dropping from it needs CAP_SETPCAP, which
  // goes with the rest below. EINVAL: a capability this kernel lacks.
  for (int cap = 0; cap <= CAP_LAST_CAP; ++cap) {
    if (kept(cap)) continue;
    if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno != EINVAL &&
        errno != EPERM) {
      return absl::InternalError(absl::StrCat(
          "prctl(PR_CAPBSET_DROP, ", cap, "): ", std::strerror(errno)));
    }
  }
  (void)prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2]{};
  if (syscall(SYS_capget, &header, data) != 0) {
    return absl::InternalError(
        absl::StrCat("capget: ", std::strerror(errno)));
  }
  for (int i = 0; i < 2; ++i) {
    data[i].effective &= keep[i];
    data[i].permitted &= keep[i];
    data[i].inheritable = 0;
  }
  if (syscall(SYS_capset, &header, data) != 0) {
    return absl::InternalError(
        absl::StrCat("capset: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::Status SeccompError(const std::string& what, int rc) {
  return absl::InternalError(
      absl::StrCat("seccomp: ", what, ": ", std::strerror(-rc)));
}

// The filter's context, released however InstallFilter returns.
struct ReleaseFilter {
  void operator()(void* ctx) const { seccomp_release(ctx); }
};
using FilterCtx = std::unique_ptr<void, ReleaseFilter>;

// A forbidden call's SIGSYS says which call it was and stops netstackd.
absl::Status InstallSigsysHandler() {
  struct sigaction sa {};
  sa.sa_sigaction = OnSigsys;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  if (sigaction(SIGSYS, &sa, nullptr) != 0) {
    return absl::InternalError(
        absl::StrCat("sigaction(SIGSYS): ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

// ioctl with the requests of AllowedIoctls() only. Whole 64-bit equality:
// a request with high bits set that the kernel would truncate to an
// allowed one does not match.
int AllowIoctlRequests(scmp_filter_ctx ctx, int nr) {
  for (const AllowedIoctl& io : AllowedIoctls()) {
    const int rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, nr, 1,
                                    SCMP_A1(SCMP_CMP_EQ, io.request));
    if (rc != 0) return rc;
  }
  return 0;
}

// socket: AF_INET and AF_INET6, stream and datagram. SOCK_NONBLOCK and
// SOCK_CLOEXEC sit above the type's bits.
int AllowInetSockets(scmp_filter_ctx ctx, int nr) {
  for (int family : {AF_INET, AF_INET6}) {
    for (int type : {SOCK_STREAM, SOCK_DGRAM}) {
      const int rc = seccomp_rule_add(
          ctx, SCMP_ACT_ALLOW, nr, 2,
          SCMP_A0(SCMP_CMP_EQ, static_cast<scmp_datum_t>(family)),
          SCMP_A1(SCMP_CMP_MASKED_EQ, kSockTypeMask,
                  static_cast<scmp_datum_t>(type)));
      if (rc != 0) return rc;
    }
  }
  return 0;
}

// The rule (or rules) for call `nr` with the arguments `args` allows; a
// libseccomp error code, 0 when added.
int AddRule(scmp_filter_ctx ctx, int nr, AllowedCall::Args args,
            const LeastPrivilegeOptions& options) {
  switch (args) {
    case AllowedCall::Args::kAny:
      return seccomp_rule_add(ctx, SCMP_ACT_ALLOW, nr, 0);
    case AllowedCall::Args::kCmdPid:
      if (options.cmd_pid <= 0) return 0;  // never
      return seccomp_rule_add(
          ctx, SCMP_ACT_ALLOW, nr, 1,
          SCMP_A0(SCMP_CMP_EQ, static_cast<scmp_datum_t>(options.cmd_pid)));
    case AllowedCall::Args::kOwnPid:
      return seccomp_rule_add(
          ctx, SCMP_ACT_ALLOW, nr, 1,
          SCMP_A0(SCMP_CMP_EQ, static_cast<scmp_datum_t>(getpid())));
    case AllowedCall::Args::kIoctlRequests:
      return AllowIoctlRequests(ctx, nr);
    case AllowedCall::Args::kInetSocket:
      return AllowInetSockets(ctx, nr);
    case AllowedCall::Args::kNoFlags:
      return seccomp_rule_add(ctx, SCMP_ACT_ALLOW, nr, 1,
                              SCMP_A2(SCMP_CMP_EQ, 0));
  }
  return 0;
}

// Each call of `calls` this architecture has.
absl::Status AllowCalls(scmp_filter_ctx ctx,
                        const std::vector<AllowedCall>& calls,
                        const LeastPrivilegeOptions& options) {
  for (const AllowedCall& c : calls) {
    const int nr = seccomp_syscall_resolve_name(c.name);
    if (nr == __NR_SCMP_ERROR) continue;  // not a call of this architecture
    if (int rc = AddRule(ctx, nr, c.args, options); rc != 0) {
      return absl::InternalError(absl::StrCat("seccomp: allow ", c.name,
                                              ": ", std::strerror(-rc)));
    }
  }
  return absl::OkStatus();
}

// The only files opened after setup: the HTTP service's (read-only, never
// creating), and /proc's under options.proc_dir_fd.
absl::Status AllowFileReads(scmp_filter_ctx ctx,
                            const LeastPrivilegeOptions& options) {
  if (options.serve_files) {
    int rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(openat2), 0);
    // openat: read-only, never creating.
    if (rc == 0) {
      rc = seccomp_rule_add(
          ctx, SCMP_ACT_ALLOW, SCMP_SYS(openat), 1,
          SCMP_A2(SCMP_CMP_MASKED_EQ, O_ACCMODE | O_CREAT | O_TRUNC,
                  O_RDONLY));
    }
    if (rc == 0) rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(pread64), 0);
    if (rc != 0) return SeccompError("the HTTP service's calls", rc);
  }
  if (options.proc_dir_fd >= 0) {
    // Read-only, and only under that fd. The path is beyond a filter: it
    // may name any /proc file netstackd's user may read, <pid>/root/...
    // of its own user's processes included; kernels with
    // PIDFD_GET_PID_NAMESPACE (6.11) never need this.
    if (int rc = seccomp_rule_add(
            ctx, SCMP_ACT_ALLOW, SCMP_SYS(openat), 2,
            SCMP_A0(SCMP_CMP_EQ,
                    static_cast<scmp_datum_t>(options.proc_dir_fd)),
            SCMP_A2(SCMP_CMP_MASKED_EQ, O_ACCMODE | O_CREAT | O_TRUNC | O_PATH,
                    O_RDONLY));
        rc != 0) {
      return SeccompError("openat under /proc", rc);
    }
  }
  return absl::OkStatus();
}

// The flow log's rotation and --policy's reread, each only relative to
// its directory's fd (the same limit as /proc's above: an absolute path
// ignores the dirfd, but after step 0 every absolute path leads into the
// empty root).
absl::Status AllowPolicyFiles(scmp_filter_ctx ctx,
                              const LeastPrivilegeOptions& options) {
  if (options.flow_log_dir_fd >= 0) {
    const auto dir = static_cast<scmp_datum_t>(options.flow_log_dir_fd);
    int rc = seccomp_rule_add(
        ctx, SCMP_ACT_ALLOW, SCMP_SYS(openat), 2, SCMP_A0(SCMP_CMP_EQ, dir),
        SCMP_A2(SCMP_CMP_MASKED_EQ,
                O_ACCMODE | O_CREAT | O_TRUNC | O_APPEND | O_PATH,
                O_WRONLY | O_CREAT | O_APPEND));
    if (rc == 0) {
      rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(renameat), 2,
                            SCMP_A0(SCMP_CMP_EQ, dir),
                            SCMP_A2(SCMP_CMP_EQ, dir));
    }
    if (rc == 0) {
      rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(renameat2), 3,
                            SCMP_A0(SCMP_CMP_EQ, dir),
                            SCMP_A2(SCMP_CMP_EQ, dir),
                            SCMP_A4(SCMP_CMP_EQ, 0));
    }
    if (rc != 0) return SeccompError("the flow log's rotation", rc);
  }
  if (options.policy_dir_fd >= 0) {
    if (int rc = seccomp_rule_add(
            ctx, SCMP_ACT_ALLOW, SCMP_SYS(openat), 2,
            SCMP_A0(SCMP_CMP_EQ,
                    static_cast<scmp_datum_t>(options.policy_dir_fd)),
            SCMP_A2(SCMP_CMP_MASKED_EQ, O_ACCMODE | O_CREAT | O_TRUNC | O_PATH,
                    O_RDONLY));
        rc != 0) {
      return SeccompError("openat under --policy's directory", rc);
    }
  }
  return absl::OkStatus();
}

absl::Status InstallFilter(const LeastPrivilegeOptions& options) {
  if (absl::Status s = InstallSigsysHandler(); !s.ok()) return s;
  FilterCtx ctx(seccomp_init(options.log_only ? SCMP_ACT_LOG : SCMP_ACT_TRAP));
  if (ctx == nullptr) return absl::InternalError("seccomp_init failed");
  // Every thread: the guest-socket thread must not escape the filter.
  if (int rc = seccomp_attr_set(ctx.get(), SCMP_FLTATR_CTL_TSYNC, 1);
      rc != 0) {
    return SeccompError("TSYNC", rc);
  }
  if (absl::Status s = AllowCalls(ctx.get(), AllowedCalls(), options);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = AllowFileReads(ctx.get(), options); !s.ok()) return s;
  if (absl::Status s = AllowPolicyFiles(ctx.get(), options); !s.ok()) {
    return s;
  }
  if (kSanitized) {
    if (absl::Status s = AllowCalls(ctx.get(), SanitizerCalls(), options);
        !s.ok()) {
      return s;
    }
  }
  if (int rc = seccomp_load(ctx.get()); rc != 0) {
    return SeccompError("load", rc);
  }
  return absl::OkStatus();
}

}  // namespace

const std::vector<AllowedCall>& AllowedCalls() {
  static const auto* calls = new std::vector<AllowedCall>{
      // The event loop.
      {"epoll_wait", "the event loop waits"},
      {"epoll_pwait", "the event loop waits (glibc's epoll_wait)"},
      {"epoll_pwait2", "the event loop waits (with a timespec timeout)"},
      {"epoll_ctl", "fds join and leave the loop"},
      {"timerfd_settime", "the loop's timer"},
      {"read", "timerfd, signalfd, TAP frames, --exit-fd, the API"},
      {"write", "TAP frames, stderr, the pcap file, --ready-fd"},
      {"readv", "TAP frames"},
      {"writev", "TAP frames with their virtio-net header"},
      {"close", "every fd that ends"},
      // Host sockets: the backend's flows, the forwards, DNS, ping, the
      // API, the UNIX stream link.
      // socket: AF_INET and AF_INET6 only. No AF_UNIX: the only UNIX
      // sockets made after setup would be unix: forwards added through
      // the API, which PortForwards refuses once the filesystem is
      // detached; the API's and --unix's listeners are made before.
      {"socket",
       "a host socket per guest flow (TCP, UDP, ICMP echo), IPv4 and IPv6 "
       "only",
       AllowedCall::Args::kInetSocket},
      {"connect", "a flow's host connection"},
      {"bind", "--outbound-bind; forwards added through the API"},
      {"listen", "forwards added through the API"},
      {"accept4", "forward and API clients"},
      {"getsockname", "ports the kernel chose"},
      {"getpeername", "a connection's peer"},
      {"getsockopt", "SO_ERROR after connect, TCP_INFO"},
      {"setsockopt", "TCP_NODELAY, SO_LINGER, IP_RECVERR, buffer sizes"},
      {"shutdown", "half-closes passed on"},
      {"sendto", "datagrams, send()"},
      {"recvfrom", "datagrams, recv()"},
      {"sendmsg", "gathered sends, ICMP echoes"},
      {"recvmsg", "the error queue (ICMP errors), SCM_RIGHTS-free reads"},
      {"sendmmsg", "a software-GSO split in one call; UDP forwards"},
      {"recvmmsg", "batched frames and datagrams"},
      // The splice relay.
      {"pipe2", "the relay's pipes"},
      {"splice", "payload socket -> pipe -> socket, never in user memory"},
      {"fcntl", "O_NONBLOCK, F_SETPIPE_SZ"},
      {"ioctl", "the requests of AllowedIoctls() only",
       AllowedCall::Args::kIoctlRequests},
      // Memory (the allocator).
      {"brk", "the allocator"},
      {"mmap", "the allocator; the packet and chunk pools"},
      {"munmap", "the allocator"},
      {"mremap", "the allocator"},
      {"mprotect", "the allocator (new arenas)"},
      {"madvise", "the allocator returns memory"},
      // Time, threads, signals, the process.
      {"clock_gettime", "the clock (when the vDSO falls back)"},
      {"clock_nanosleep", "short waits"},
      {"nanosleep", "short waits"},
      {"gettimeofday", "the clock (pcap timestamps)"},
      {"futex", "the guest-socket thread's mutex"},
      {"getrandom", "initial sequence numbers, hash seeds"},
      {"getpid", "logs"},
      {"gettid", "logs"},
      {"rt_sigreturn", "returning from a signal handler"},
      {"rt_sigprocmask", "signalfd's mask"},
      {"rt_sigaction", "abort()'s default action"},
      {"kill", "SIGINT, SIGTERM, SIGHUP passed on to CMD (its pid only)",
       AllowedCall::Args::kCmdPid},
      {"tgkill", "abort() (netstackd's own pid only)",
       AllowedCall::Args::kOwnPid},
      {"waitid", "CMD's exit"},
      {"wait4", "CMD's exit (waitpid)"},
      {"restart_syscall", "an interrupted wait resumes"},
      {"exit", "a thread ends"},
      {"exit_group", "netstackd ends"},
      // Files: none are opened after setup. These remove what netstackd
      // made and check that a namespace is still there.
      // unlinkat: flags 0 only, so no directory can be removed. The path
      // is beyond a filter: through the directory fds DirEntryRef holds,
      // a compromised netstackd could still remove any file its user may
      // remove that those directories lead to (../ too).
      {"unlinkat",
       "a socket file at removal (--unix, unix: forwards, the API), by its "
       "directory (link::DirEntryRef); never a directory",
       AllowedCall::Args::kNoFlags},
      {"umask", "the API socket is created 0600"},
      {"newfstatat", "--netns PATH still there; stdio's first use"},
      {"fstat", "stdio's first use"},
      {"statx", "--netns PATH still there (newer glibc)"},
      {"lseek", "stdio"},
  };
  return *calls;
}

const std::vector<AllowedIoctl>& AllowedIoctls() {
  // No TUN request: the TAP is set up (TUNSETIFF, TUNSETOFFLOAD, ...)
  // before the filter, and a compromised netstackd must not change it. No
  // TIOCSTI, which would type into a terminal on stderr.
  static const auto* requests = new std::vector<AllowedIoctl>{
      {FIONREAD, "FIONREAD",
       "the relay's pipe pool checks that a pipe given back is empty"},
      {TCGETS, "TCGETS",
       "stdio and the sanitizers ask whether stderr is a terminal"},
      // The forward API's check of a client's PID namespace
      // (pid_namespace_fence.h).
      {kNsGetTgidInPidns, "NS_GET_TGID_IN_PIDNS",
       "whether a forward API client has a pid in CMD's PID namespace"},
      {kPidfdGetInfo, "PIDFD_GET_INFO",
       "that the client's pid is still its own, by its pidfd"},
      {NS_GET_PARENT, "NS_GET_PARENT",
       "kernels before 6.11: walks up from a client's PID namespace"},
  };
  return *requests;
}

namespace {

absl::Status Errno(const char* what) {
  return absl::InternalError(absl::StrCat(what, ": ", std::strerror(errno)));
}

// Step 0 on the calling thread: a mount namespace of its own whose root is
// an empty read-only tmpfs. Returns an fd of the new namespace, for the
// other threads to join.
absl::StatusOr<int> DetachFilesystem() {
  // Also unshares the thread's root and cwd (CLONE_FS), so the other
  // threads keep theirs until they join below.
  if (unshare(CLONE_NEWNS) != 0) return Errno("unshare(CLONE_NEWNS)");
  const int ns = open("/proc/thread-self/ns/mnt", O_RDONLY | O_CLOEXEC);
  if (ns < 0) return Errno("open /proc/thread-self/ns/mnt");
  auto fail = [&](const char* what) {
    absl::Status s = Errno(what);
    close(ns);
    return s;
  };
  // Nothing we do here reaches the host's mounts, nor theirs us.
  if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
    return fail("mount --make-rprivate /");
  }
  // The new root, on a directory every system has; in this namespace only.
  constexpr const char* kNewRoot = "/tmp";
  constexpr unsigned long kFlags = MS_NODEV | MS_NOEXEC | MS_NOSUID;
  if (mount("netstackd", kNewRoot, "tmpfs", kFlags,
            "size=4k,nr_inodes=8,mode=0755") != 0) {
    return fail("mount tmpfs");
  }
  if (kSanitized) {
    // The leak check at exit lists /proc/self/task and reads the maps.
    if (mkdir("/tmp/proc", 0555) != 0) return fail("mkdir proc");
    if (mount("/proc", "/tmp/proc", nullptr, MS_BIND | MS_REC, nullptr) !=
        0) {
      return fail("bind-mount /proc");
    }
  }
  if (mount(nullptr, kNewRoot, nullptr, MS_REMOUNT | MS_RDONLY | kFlags,
            nullptr) != 0) {
    return fail("remount the new root read-only");
  }
  // pivot_root(".", "."): the old root ends up on top of the new one, at
  // the same place, and the lazy unmount takes it away.
  if (chdir(kNewRoot) != 0) return fail("chdir to the new root");
  if (syscall(SYS_pivot_root, ".", ".") != 0) return fail("pivot_root");
  if (umount2(".", MNT_DETACH) != 0) return fail("unmount the old root");
  if (chdir("/") != 0) return fail("chdir /");
  return ns;
}

// Step 0 on another thread: join the namespace made above (its root and
// cwd become the namespace's root).
absl::Status JoinMountNamespace(int ns) {
  if (setns(ns, CLONE_NEWNS) != 0) return Errno("setns(CLONE_NEWNS)");
  if (chdir("/") != 0) return Errno("chdir /");
  return absl::OkStatus();
}

// Steps 1 and 2, which act on the calling thread only.
absl::Status DropOnThisThread(const LeastPrivilegeOptions& options) {
  if (absl::Status s = DropCapabilities(options); !s.ok()) return s;
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
    return Errno("PR_SET_NO_NEW_PRIVS");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status DropPrivileges(const LeastPrivilegeOptions& options) {
  auto everywhere = [&](absl::FunctionRef<absl::Status()> step,
                        const char* what) -> absl::Status {
    if (absl::Status s = step(); !s.ok()) return s;
    if (!options.on_other_threads) return absl::OkStatus();
    absl::Status s = options.on_other_threads(step);
    if (!s.ok()) {
      return absl::Status(s.code(), absl::StrCat(what, " on the guest-socket "
                                                 "thread: ", s.message()));
    }
    return s;
  };
  if (options.detach_filesystem) {
    absl::StatusOr<int> ns = DetachFilesystem();
    if (!ns.ok()) {
      return absl::Status(ns.status().code(),
                          absl::StrCat("detaching the filesystem: ",
                                       ns.status().message()));
    }
    absl::Status joined = absl::OkStatus();
    if (options.on_other_threads) {
      joined = options.on_other_threads([&] { return JoinMountNamespace(*ns); });
    }
    close(*ns);
    if (!joined.ok()) {
      return absl::Status(joined.code(),
                          absl::StrCat("detaching the filesystem on the "
                                       "guest-socket thread: ",
                                       joined.message()));
    }
  }
  if (absl::Status s =
          everywhere([&] { return DropOnThisThread(options); }, "dropping");
      !s.ok()) {
    return s;
  }
  return InstallFilter(options);
}


void AttemptForbiddenCall(const std::string& what) {
  if (what == "kill") {
    (void)kill(1, 0);
    return;
  }
  char* const argv[] = {const_cast<char*>("true"), nullptr};
  char* const envp[] = {nullptr};
  execve("/bin/true", argv, envp);
}

}  // namespace netstack::sandbox
