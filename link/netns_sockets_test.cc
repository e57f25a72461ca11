#include "link/netns_sockets.h"

#include <fcntl.h>
#include <linux/sockios.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace netstack::link {
namespace {

// The inode of the network namespace `fd` (a namespace fd) names.
ino_t NsInode(int fd) {
  struct stat st;
  return fstat(fd, &st) == 0 ? st.st_ino : 0;
}

// A fresh network namespace (made on a thread that then ends), as an fd.
int NewNetns() {
  int fd = -1;
  std::thread([&] {
    if (unshare(CLONE_NEWNET) == 0) {
      fd = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
    }
  }).join();
  return fd;
}

TEST(NetnsSockets, EachKindIsMadeInTheNamespaceAndReadyToUse) {
  const int ns = NewNetns();
  if (ns < 0) GTEST_SKIP() << "needs CAP_SYS_ADMIN (unshare CLONE_NEWNET)";
  auto made = NetnsSockets::Create(ns);
  ASSERT_TRUE(made.ok()) << made.status();
  NetnsSockets& sockets = **made;
  const int here = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
  ASSERT_NE(NsInode(ns), NsInode(here));
  struct Want {
    NetnsSockets::Kind kind;
    int domain, type;
  };
  for (const Want& w : {Want{NetnsSockets::kTcp4, AF_INET, SOCK_STREAM},
                        Want{NetnsSockets::kTcp6, AF_INET6, SOCK_STREAM},
                        Want{NetnsSockets::kUdp4, AF_INET, SOCK_DGRAM},
                        Want{NetnsSockets::kUdp6, AF_INET6, SOCK_DGRAM}}) {
    // More than the stock: the later ones wait for the thread.
    std::vector<int> fds;
    for (size_t i = 0; i < 3 * NetnsSockets::kStock; ++i) {
      absl::StatusOr<int> fd = sockets.Take(w.kind);
      ASSERT_TRUE(fd.ok()) << fd.status();
      fds.push_back(*fd);
    }
    for (int fd : fds) {
      int v = 0;
      socklen_t len = sizeof(v);
      ASSERT_EQ(getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &v, &len), 0);
      EXPECT_EQ(v, w.domain);
      ASSERT_EQ(getsockopt(fd, SOL_SOCKET, SO_TYPE, &v, &len), 0);
      EXPECT_EQ(v, w.type);
      EXPECT_TRUE(fcntl(fd, F_GETFL) & O_NONBLOCK);
      EXPECT_TRUE(fcntl(fd, F_GETFD) & FD_CLOEXEC);
      // The socket's namespace is the one we asked for, not ours.
      const int sk_ns = ioctl(fd, SIOCGSKNS);
      ASSERT_GE(sk_ns, 0);
      EXPECT_EQ(NsInode(sk_ns), NsInode(ns));
      close(sk_ns);
      close(fd);
    }
  }
  close(here);
  close(ns);
}

TEST(NetnsSockets, NotANamespaceSaysSo) {
  int p[2];
  ASSERT_EQ(pipe(p), 0);
  auto made = NetnsSockets::Create(p[0]);
  ASSERT_FALSE(made.ok());
  // EINVAL for a file that is not a namespace; EPERM without privilege.
  EXPECT_TRUE(absl::IsInvalidArgument(made.status()) ||
              absl::IsPermissionDenied(made.status()))
      << made.status();
  close(p[0]);
  close(p[1]);
}

TEST(NetnsSockets, DestroyingClosesTheStock) {
  const int ns = NewNetns();
  if (ns < 0) GTEST_SKIP() << "needs CAP_SYS_ADMIN";
  const int before = open("/dev/null", O_RDONLY);
  close(before);
  {
    auto made = NetnsSockets::Create(ns);
    ASSERT_TRUE(made.ok());
    absl::StatusOr<int> fd = (*made)->Take(NetnsSockets::kUdp4);
    ASSERT_TRUE(fd.ok());
    close(*fd);
  }
  // Every fd the stock held is closed again: the lowest free one is back.
  const int after = open("/dev/null", O_RDONLY);
  EXPECT_EQ(after, before);
  close(after);
  close(ns);
}

// RunOnWorker runs on the worker (another thread, in the namespace) and
// hands back its result; one call after another works.
TEST(NetnsSockets, RunOnWorkerRunsThereAndReturnsItsStatus) {
  const int ns = NewNetns();
  if (ns < 0) GTEST_SKIP() << "needs CAP_SYS_ADMIN";
  auto made = NetnsSockets::Create(ns);
  ASSERT_TRUE(made.ok());
  pid_t tid = 0;
  ino_t netns = 0;
  EXPECT_TRUE((*made)
                  ->RunOnWorker([&] {
                    tid = gettid();
                    const int self =
                        open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
                    netns = NsInode(self);
                    close(self);
                    return absl::OkStatus();
                  })
                  .ok());
  EXPECT_NE(tid, 0);
  EXPECT_NE(tid, gettid());
  EXPECT_EQ(netns, NsInode(ns));
  const absl::Status failed = (*made)->RunOnWorker(
      [] { return absl::InternalError("from the worker"); });
  EXPECT_EQ(failed, absl::InternalError("from the worker"));
  // Taking sockets still works after.
  absl::StatusOr<int> fd = (*made)->Take(NetnsSockets::kTcp4);
  ASSERT_TRUE(fd.ok());
  close(*fd);
  close(ns);
}

// Out of fds for a while: the failure is reported then, and once fds are
// back the next Take gets a socket (not the stale error).
TEST(NetnsSockets, AfterRunningOutOfFdsTheNextTakeSucceeds) {
  const int ns = NewNetns();
  if (ns < 0) GTEST_SKIP() << "needs CAP_SYS_ADMIN";
  auto made = NetnsSockets::Create(ns);
  ASSERT_TRUE(made.ok());
  NetnsSockets& sockets = **made;
  rlimit old{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &old), 0);
  rlimit low = old;
  low.rlim_cur = 256;
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  std::vector<int> filler;
  for (int fd; (fd = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0;) {
    filler.push_back(fd);
  }
  // Drain the stock; the thread cannot make more.
  std::vector<int> taken;
  absl::StatusOr<int> fd = -1;
  for (int i = 0; i < 64; ++i) {
    fd = sockets.Take(NetnsSockets::kTcp4);
    if (!fd.ok()) break;
    taken.push_back(*fd);
  }
  EXPECT_FALSE(fd.ok()) << "never ran out";
  // The thread's retry (woken by that Take) fails too while fds are out.
  usleep(100 * 1000);
  for (int f : filler) close(f);
  for (int f : taken) close(f);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &old), 0);
  fd = sockets.Take(NetnsSockets::kTcp4);
  ASSERT_TRUE(fd.ok()) << fd.status();
  close(*fd);
  close(ns);
}

}  // namespace
}  // namespace netstack::link
