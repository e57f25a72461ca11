// PipePool against the kernel's limits, which bind without CAP_SYS_RESOURCE
// (in the initial user namespace): a child that becomes uid 65534 is
// refused sizes above pipe-max-size, and past pipe-user-pages-soft gets no
// pipe from the pool at all. It must start as real root to drop to 65534,
// hence no sandbox (whose user namespace cannot map that uid).
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <optional>
#include <vector>

#include "gtest/gtest.h"
#include "netstack/forward/relay.h"

namespace netstack::forward {
namespace {

size_t ProcSize(const char* path) {
  std::ifstream in(path);
  size_t value = 0;
  in >> value;
  return value;
}

size_t PipeMaxSize() { return ProcSize("/proc/sys/fs/pipe-max-size"); }

// Above pipe-max-size only CAP_SYS_RESOURCE in the initial user namespace
// is granted the size. Without it (in a container, even as root: so on
// the machines this was written on) F_SETPIPE_SZ says EPERM, and the pool
// settles for the halved request, which is pipe-max-size itself.
TEST(PipePoolLimitsTest, OverPipeMaxSizeGetsWhatTheKernelAllows) {
  const size_t max = PipeMaxSize();
  ASSERT_GT(max, 0u);
  PipePool pool(PipePool::Options{.pipe_size = 2 * max});
  std::optional<PipePool::Pipe> pipe = pool.Acquire();
  ASSERT_TRUE(pipe.has_value());
  EXPECT_EQ(static_cast<size_t>(fcntl(pipe->read_fd, F_GETPIPE_SZ)),
            pipe->capacity);
  if (pipe->capacity == 2 * max) {
    EXPECT_EQ(pool.stats().resize_refused, 0u);  // privileged
  } else {
    EXPECT_EQ(pipe->capacity, max);
    EXPECT_EQ(pool.stats().resize_refused, 1u);
  }
  pool.Release(*pipe, 0);
}

// Runs `body` in a child that became uid/gid 65534 (no capabilities);
// the child's exit code is the result (0 = pass, else the failing check).
int RunUnprivileged(int (*body)()) {
  const pid_t pid = fork();
  if (pid == 0) {
    // 100: the child could not drop root.
    if (setgid(65534) != 0 || setuid(65534) != 0) _exit(100);
    _exit(body());
  }
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 200;
}

int UnprivilegedOverPipeMaxSize() {
  const size_t max = PipeMaxSize();
  PipePool pool(PipePool::Options{.pipe_size = 2 * max});
  std::optional<PipePool::Pipe> pipe = pool.Acquire();
  if (!pipe.has_value()) return 1;
  if (pipe->capacity != max) return 2;  // EPERM, then the halved request
  if (pool.stats().resize_refused != 1) return 3;
  pool.Release(*pipe, 0);
  return 0;
}

TEST(PipePoolLimitsTest, UnprivilegedGetsPipeMaxSizeAndResizeRefused) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to drop it";
  const int result = RunUnprivileged(&UnprivilegedOverPipeMaxSize);
  EXPECT_EQ(result, 0);
}

// Past pipe-user-pages-soft an unprivileged user's new pipes get 2 pages
// and cannot grow: the pool stops handing them out, so relays copy.
int UnprivilegedExhaustsUserPages() {
  const size_t soft_pages = ProcSize("/proc/sys/fs/pipe-user-pages-soft");
  if (soft_pages == 0) return 0;  // no soft limit on this machine
  PipePool pool(PipePool::Options{.max_pipes = 100000});
  std::vector<PipePool::Pipe> held;
  const size_t limit = soft_pages * 4096 / (64 * 1024) + 16;
  for (size_t i = 0; i < limit; ++i) {
    std::optional<PipePool::Pipe> pipe = pool.Acquire();
    if (!pipe.has_value()) break;
    held.push_back(*pipe);
  }
  if (held.empty()) return 1;
  if (held.front().capacity != (size_t{1} << 20)) return 2;
  if (pool.stats().acquire_failed != 1) return 3;  // it did stop
  if (pool.stats().resize_refused == 0) return 4;  // after refusing sizes
  for (const auto& p : held) {
    if (p.capacity < 64 * 1024) return 5;  // never handed out a tiny pipe
  }
  for (const auto& p : held) pool.Release(p, 0);
  return 0;
}

TEST(PipePoolLimitsTest, UserPagesSoftLimitMakesAcquireFail) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to drop it";
  const int result = RunUnprivileged(&UnprivilegedExhaustsUserPages);
  EXPECT_EQ(result, 0);
}

}  // namespace
}  // namespace netstack::forward
