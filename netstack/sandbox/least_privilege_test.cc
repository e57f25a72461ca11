#include "netstack/sandbox/least_privilege.h"

#include <fcntl.h>
#include <linux/netlink.h>
#include <linux/nsfs.h>
#include <netinet/in.h>
#include <seccomp.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>

#include "gtest/gtest.h"

namespace netstack::sandbox {
namespace {

TEST(AllowedCalls, EachIsACallOfThisArchitecture) {
  for (const AllowedCall& c : AllowedCalls()) {
    EXPECT_NE(seccomp_syscall_resolve_name(c.name), __NR_SCMP_ERROR)
        << c.name;
    EXPECT_NE(std::string(c.why), "") << c.name;
  }
}

TEST(AllowedCalls, DocsSecurityListsEachOne) {
  std::ifstream in("docs/SECURITY.md");
  ASSERT_TRUE(in.good()) << "docs/SECURITY.md is not in the runfiles";
  std::stringstream text;
  text << in.rdbuf();
  for (const AllowedCall& c : AllowedCalls()) {
    EXPECT_NE(text.str().find(std::string("`") + c.name + "`"),
              std::string::npos)
        << c.name << " is allowed but docs/SECURITY.md does not list it";
  }
}

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif

// What a forked child did after DropPrivileges: its wait status and its
// stderr (where the SIGSYS handler names a trapped call).
struct Filtered {
  int status = 0;
  std::string err;
};

// Forks; the child applies the sandbox (without step 0, which needs root:
// the filter is what is tested here) and runs `body`, then exits 0. A
// call the filter traps ends it with 159 (128 + SIGSYS); `body` exits
// with another status to report a call that failed when it should not.
Filtered RunFiltered(
    const std::function<void()>& body, int proc_dir_fd = -1,
    const std::function<void(LeastPrivilegeOptions&)>& tune = nullptr) {
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) return {-1, "pipe2"};
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(pipe_fds[1], STDERR_FILENO);
    LeastPrivilegeOptions o;
    o.detach_filesystem = false;
    o.proc_dir_fd = proc_dir_fd;
    if (tune) tune(o);
    if (!DropPrivileges(o).ok()) _exit(2);
    body();
    _exit(0);
  }
  close(pipe_fds[1]);
  Filtered r;
  char buf[512];
  ssize_t n;
  while ((n = read(pipe_fds[0], buf, sizeof(buf))) > 0) r.err.append(buf, n);
  close(pipe_fds[0]);
  waitpid(pid, &r.status, 0);
  return r;
}

int ExitCode(const Filtered& r) {
  return WIFEXITED(r.status) ? WEXITSTATUS(r.status) : -1;
}

// The calls netstackd makes after setup still work under the filter.
TEST(Filter, AllowsWhatTheLoopUses) {
  char dir[] = "/tmp/nst-lp-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string file = std::string(dir) + "/sock";
  const int fd = open(file.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
  ASSERT_GE(fd, 0);
  close(fd);
  const int dir_fd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
  ASSERT_GE(dir_fd, 0);
  const Filtered r = RunFiltered([dir_fd] {
    // Host sockets of both families, TCP and UDP, non-blocking.
    for (int family : {AF_INET, AF_INET6}) {
      for (int type : {SOCK_STREAM, SOCK_DGRAM}) {
        const int s = socket(family, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (s < 0) _exit(3);
        close(s);
      }
    }
    // Ping sockets: the kernel may refuse them (ping_group_range), the
    // filter must not.
    const int ping = socket(AF_INET, SOCK_DGRAM, IPPROTO_ICMP);
    if (ping >= 0) close(ping);
    // The relay's pipes: FIONREAD.
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0) _exit(4);
    int queued = -1;
    if (ioctl(p[0], FIONREAD, &queued) != 0 || queued != 0) _exit(5);
    // stdio asks whether a stream is a terminal (TCGETS).
    struct termios t;
    (void)tcgetattr(p[0], &t);
    // A socket file removed at exit, by its directory.
    if (unlinkat(dir_fd, "sock", 0) != 0) _exit(6);
  });
  close(dir_fd);
  EXPECT_EQ(ExitCode(r), 0) << r.err;
  struct stat st;
  EXPECT_NE(stat(file.c_str(), &st), 0) << "not removed";
  rmdir(dir);
}

// What the forward API's PID namespace check needs
// (pid_namespace_fence.h): a client's pidfd and PID namespace and the
// namespace's parent; on older kernels <pid>/ns/pid opened read-only under
// the /proc fd given, and nothing else opened.
TEST(Filter, AllowsThePidNamespaceCheck) {
  const int proc = open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  ASSERT_GE(proc, 0);
  const Filtered r = RunFiltered(
      [proc] {
        const std::string name = std::to_string(getpid()) + "/ns/pid";
        const int ns = openat(proc, name.c_str(), O_RDONLY | O_CLOEXEC);
        if (ns < 0) _exit(3);
        // Our own namespace's parent is out of our scope: EPERM, not a
        // trap.
        if (ioctl(ns, NS_GET_PARENT) >= 0 || errno != EPERM) _exit(4);
        // A pid in that namespace (ours: our own), and a pidfd's info.
        const int ours = openat(proc, "self/ns/pid", O_RDONLY | O_CLOEXEC);
        if (ours < 0) _exit(5);
        if (ioctl(ours, _IOR(0xb7, 0x9, int) /* NS_GET_TGID_IN_PIDNS */,
                  getpid()) != getpid() &&
            errno != ENOTTY) {
          _exit(6);
        }
        int p[2];
        if (pipe2(p, O_CLOEXEC) != 0) _exit(7);
        unsigned char info[64] = {1};  // PIDFD_INFO_PID
        (void)ioctl(p[0], 0xc040ff0b /* PIDFD_GET_INFO */, info);
        // Anything else under /proc's fd is still read-only.
        (void)openat(proc, "self/comm", O_WRONLY | O_CLOEXEC);
      },
      proc);
  if (kSanitized) {
    // The sanitizers' runtimes may open any file (least_privilege.cc).
    EXPECT_EQ(ExitCode(r), 0) << r.err;
    close(proc);
    return;
  }
  EXPECT_EQ(ExitCode(r), 128 + SIGSYS) << r.err;
  EXPECT_NE(r.err.find("system call 257 (openat) is not allowed"),
            std::string::npos)
      << "the write open: " << r.err;
  // Without the fd, no openat at all.
  const Filtered none = RunFiltered(
      [proc] { (void)openat(proc, "self/comm", O_RDONLY | O_CLOEXEC); });
  EXPECT_EQ(ExitCode(none), 128 + SIGSYS) << none.err;
  close(proc);
}

// --flow-log's rotation and --policy's reread (flow_log.h, netstackd's
// SIGHUP): under the log's directory fd, a file created and appended to
// and renamed within it; under the policy's, a file read. Nothing else:
// no truncating open, no rename to another directory, no write open under
// the policy's directory, no openat at all without the fds.
TEST(Filter, AllowsTheFlowLogsRotationAndThePolicysReread) {
  char dir[] = "/tmp/nst-lp-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string d = dir;
  {
    std::ofstream(d + "/policy") << "allow example.com\n";
  }
  const int dir_fd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
  ASSERT_GE(dir_fd, 0);
  auto both = [dir_fd](LeastPrivilegeOptions& o) {
    o.flow_log_dir_fd = dir_fd;
    o.policy_dir_fd = dir_fd;
  };
  const Filtered r = RunFiltered(
      [dir_fd] {
        const int log = openat(dir_fd, "flows.log",
                               O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
        if (log < 0) _exit(3);
        if (write(log, "{}\n", 3) != 3) _exit(4);
        close(log);
        if (renameat(dir_fd, "flows.log", dir_fd, "flows.log.1") != 0) {
          _exit(5);
        }
        if (syscall(SYS_renameat2, dir_fd, "flows.log.1", dir_fd,
                    "flows.log.2", 0) != 0) {
          _exit(6);
        }
        const int p = openat(dir_fd, "policy", O_RDONLY | O_CLOEXEC);
        char buf[64];
        if (p < 0 || read(p, buf, sizeof(buf)) != 18) _exit(7);
        close(p);
      },
      -1, both);
  EXPECT_EQ(ExitCode(r), 0) << r.err;
  struct stat st;
  EXPECT_EQ(stat((d + "/flows.log.2").c_str(), &st), 0);
  EXPECT_EQ(st.st_size, 3);
  if (!kSanitized) {
    // The sanitizers' runtimes may open any file (least_privilege.cc).
    const struct {
      const char* what;
      const char* call;
      std::function<void()> body;
    } cases[] = {
        {"O_TRUNC", "257 (openat)",
         [dir_fd] {
           (void)openat(dir_fd, "flows.log.2",
                        O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0640);
         }},
        {"rename elsewhere", "264 (renameat)",
         [dir_fd] {
           (void)renameat(dir_fd, "flows.log.2", AT_FDCWD, "/tmp/x");
         }},
        {"RENAME_EXCHANGE", "316 (renameat2)",
         [dir_fd] {
           (void)syscall(SYS_renameat2, dir_fd, "flows.log.2", dir_fd,
                         "policy", 2 /* RENAME_EXCHANGE */);
         }},
        {"another fd", "257 (openat)",
         [] {
           (void)openat(AT_FDCWD, "/tmp/x",
                        O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
         }},
    };
    for (const auto& c : cases) {
      const Filtered t = RunFiltered(c.body, -1, both);
      EXPECT_EQ(ExitCode(t), 128 + SIGSYS) << c.what << ": " << t.err;
      EXPECT_NE(t.err.find(std::string("system call ") + c.call +
                           " is not allowed after setup"),
                std::string::npos)
          << c.what << ": " << t.err;
    }
    // The policy's directory alone: read-only.
    const Filtered w = RunFiltered(
        [dir_fd] {
          (void)openat(dir_fd, "policy", O_WRONLY | O_APPEND | O_CLOEXEC);
        },
        -1, [dir_fd](LeastPrivilegeOptions& o) { o.policy_dir_fd = dir_fd; });
    EXPECT_EQ(ExitCode(w), 128 + SIGSYS) << w.err;
    // Neither: no openat, no renameat.
    const Filtered none = RunFiltered([dir_fd] {
      (void)renameat(dir_fd, "flows.log.2", dir_fd, "flows.log");
    });
    EXPECT_EQ(ExitCode(none), 128 + SIGSYS) << none.err;
  }
  close(dir_fd);
  for (const char* f : {"/flows.log", "/flows.log.1", "/flows.log.2",
                        "/policy"}) {
    unlink((d + f).c_str());
  }
  rmdir(dir);
}

// The review's finding 15 (2026-12-06): ioctl, socket and unlinkat were
// allowed with any arguments. A request netstackd never makes (TIOCSTI,
// which types into a terminal; TUNSETIFF), a socket of another family
// (abstract AF_UNIX sockets of the host, netlink, packet) or of another
// type (raw), and the removal of a directory are trapped.
TEST(Filter, TrapsOtherArguments) {
  char dir[] = "/tmp/nst-lp-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string sub = std::string(dir) + "/d";
  ASSERT_EQ(mkdir(sub.c_str(), 0700), 0);
  const int dir_fd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
  ASSERT_GE(dir_fd, 0);
  int p[2];
  ASSERT_EQ(pipe2(p, O_CLOEXEC), 0);
  const struct {
    const char* what;
    const char* call;
    std::function<void()> body;
  } cases[] = {
      {"TIOCSTI", "16 (ioctl)",
       [&] {
         char c = 'x';
         (void)ioctl(p[0], TIOCSTI, &c);
       }},
      {"TUNSETIFF", "16 (ioctl)",
       [&] { (void)ioctl(p[0], 0x400454ca /* TUNSETIFF */, nullptr); }},
      {"AF_UNIX", "41 (socket)",
       [] { (void)socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0); }},
      {"AF_NETLINK", "41 (socket)",
       [] {
         (void)socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
       }},
      {"AF_PACKET", "41 (socket)",
       [] { (void)socket(AF_PACKET, SOCK_DGRAM | SOCK_CLOEXEC, 0); }},
      {"SOCK_RAW", "41 (socket)",
       [] { (void)socket(AF_INET, SOCK_RAW | SOCK_CLOEXEC, IPPROTO_ICMP); }},
      {"AT_REMOVEDIR", "263 (unlinkat)",
       [&] { (void)unlinkat(dir_fd, "d", AT_REMOVEDIR); }},
  };
  for (const auto& c : cases) {
    const Filtered r = RunFiltered(c.body);
    EXPECT_EQ(ExitCode(r), 128 + SIGSYS) << c.what << ": " << r.err;
    EXPECT_NE(r.err.find(std::string("system call ") + c.call +
                         " is not allowed after setup"),
              std::string::npos)
        << c.what << ": " << r.err;
  }
  struct stat st;
  EXPECT_EQ(stat(sub.c_str(), &st), 0) << "the directory was removed";
  close(p[0]);
  close(p[1]);
  close(dir_fd);
  rmdir(sub.c_str());
  rmdir(dir);
}

}  // namespace
}  // namespace netstack::sandbox
