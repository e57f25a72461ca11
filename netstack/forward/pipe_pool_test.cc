// PipePool: sizes, reuse only when empty, the max_pipes bound. The kernel's
// limits are in pipe_pool_limits_test.cc.
#include <fcntl.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <optional>
#include <vector>

#include "gtest/gtest.h"
#include "netstack/forward/relay.h"
#include "netstack/forward/relay_test_util.h"

namespace netstack::forward {
namespace {

TEST(PipePoolTest, GrantsTheRequestedSize) {
  PipePool pool(PipePool::Options{});
  std::optional<PipePool::Pipe> pipe = pool.Acquire();
  ASSERT_TRUE(pipe.has_value());
  EXPECT_EQ(pipe->capacity, size_t{1} << 20);
  EXPECT_EQ(static_cast<size_t>(fcntl(pipe->read_fd, F_GETPIPE_SZ)),
            pipe->capacity);
  EXPECT_TRUE(fcntl(pipe->read_fd, F_GETFL) & O_NONBLOCK);
  EXPECT_TRUE(fcntl(pipe->write_fd, F_GETFL) & O_NONBLOCK);
  EXPECT_EQ(pool.stats().created, 1u);
  EXPECT_EQ(pool.stats().resize_refused, 0u);
  EXPECT_EQ(pool.stats().in_use, 1u);
  pool.Release(*pipe, 0);
}

TEST(PipePoolTest, SmallerSizeOnRequest) {
  PipePool pool(PipePool::Options{.pipe_size = 4096});
  std::optional<PipePool::Pipe> pipe = pool.Acquire();
  ASSERT_TRUE(pipe.has_value());
  EXPECT_EQ(pipe->capacity, 4096u);
  pool.Release(*pipe, 0);
}

TEST(PipePoolTest, EmptyPipeIsReused) {
  PipePool pool(PipePool::Options{});
  std::optional<PipePool::Pipe> first = pool.Acquire();
  ASSERT_TRUE(first.has_value());
  pool.Release(*first, 0);
  EXPECT_EQ(pool.stats().pooled, 1u);
  EXPECT_EQ(pool.stats().in_use, 0u);
  std::optional<PipePool::Pipe> second = pool.Acquire();
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(second->read_fd, first->read_fd);
  EXPECT_EQ(second->write_fd, first->write_fd);
  EXPECT_EQ(pool.stats().reused, 1u);
  EXPECT_EQ(pool.stats().created, 1u);
  EXPECT_EQ(pool.stats().pooled, 0u);
  pool.Release(*second, 0);
}

TEST(PipePoolTest, PipeWithDataIsClosedNotPooled) {
  PipePool pool(PipePool::Options{});
  std::optional<PipePool::Pipe> pipe = pool.Acquire();
  ASSERT_TRUE(pipe.has_value());
  ASSERT_EQ(write(pipe->write_fd, "leftover", 8), 8);
  pool.Release(*pipe, 8);
  EXPECT_EQ(pool.stats().closed_with_data, 1u);
  EXPECT_EQ(pool.stats().pooled, 0u);
  EXPECT_FALSE(test::FdIsOpen(pipe->read_fd));
  EXPECT_FALSE(test::FdIsOpen(pipe->write_fd));
}

TEST(PipePoolTest, UncountedDataIsCaughtToo) {
  // The caller's count says empty, the pipe disagrees: FIONREAD wins.
  PipePool pool(PipePool::Options{});
  std::optional<PipePool::Pipe> pipe = pool.Acquire();
  ASSERT_TRUE(pipe.has_value());
  ASSERT_EQ(write(pipe->write_fd, "x", 1), 1);
  pool.Release(*pipe, 0);
  EXPECT_EQ(pool.stats().closed_with_data, 1u);
  EXPECT_EQ(pool.stats().pooled, 0u);
  std::optional<PipePool::Pipe> next = pool.Acquire();
  ASSERT_TRUE(next.has_value());
  int queued = -1;
  ASSERT_EQ(ioctl(next->read_fd, FIONREAD, &queued), 0);
  EXPECT_EQ(queued, 0);
  pool.Release(*next, 0);
}

TEST(PipePoolTest, MaxPipesBoundsPipesInUse) {
  PipePool pool(PipePool::Options{.max_pipes = 2});
  std::optional<PipePool::Pipe> p1 = pool.Acquire();
  std::optional<PipePool::Pipe> p2 = pool.Acquire();
  ASSERT_TRUE(p1.has_value() && p2.has_value());
  EXPECT_FALSE(pool.Acquire().has_value());
  EXPECT_EQ(pool.stats().acquire_failed, 1u);
  pool.Release(*p1, 0);
  std::optional<PipePool::Pipe> p3 = pool.Acquire();
  ASSERT_TRUE(p3.has_value());
  EXPECT_EQ(pool.stats().reused, 1u);
  EXPECT_EQ(pool.stats().created, 2u);
  pool.Release(*p2, 0);
  pool.Release(*p3, 0);
  EXPECT_EQ(pool.stats().pooled, 2u);
}

TEST(PipePoolTest, ZeroPipesNeverGivesOne) {
  PipePool pool(PipePool::Options{.max_pipes = 0});
  EXPECT_FALSE(pool.Acquire().has_value());
  EXPECT_EQ(pool.stats().acquire_failed, 1u);
  EXPECT_EQ(pool.stats().created, 0u);
}

TEST(PipePoolTest, TrimClosesIdlePipesOnly) {
  const int baseline = test::CountOpenFds();
  PipePool pool(PipePool::Options{});
  std::vector<PipePool::Pipe> pipes;
  for (int i = 0; i < 4; ++i) pipes.push_back(*pool.Acquire());
  for (int i = 0; i < 3; ++i) pool.Release(pipes[i], 0);
  EXPECT_EQ(pool.stats().pooled, 3u);
  EXPECT_EQ(pool.Trim(1), 2u);
  EXPECT_EQ(pool.stats().pooled, 1u);
  EXPECT_EQ(pool.stats().trimmed, 2u);
  EXPECT_EQ(test::CountOpenFds(), baseline + 4);  // 1 pooled + 1 in use
  EXPECT_EQ(pool.Trim(), 1u);
  EXPECT_EQ(test::CountOpenFds(), baseline + 2);
  // The pipe in use is untouched and still works.
  EXPECT_TRUE(test::FdIsOpen(pipes[3].read_fd));
  ASSERT_EQ(write(pipes[3].write_fd, "x", 1), 1);
  char c;
  EXPECT_EQ(read(pipes[3].read_fd, &c, 1), 1);
  pool.Release(pipes[3], 0);
  EXPECT_EQ(pool.stats().in_use, 0u);
  // After a trim the pool creates again.
  std::optional<PipePool::Pipe> again = pool.Acquire();
  ASSERT_TRUE(again.has_value());
  pool.Release(*again, 0);
}

TEST(PipePoolTest, DestructorClosesPooledPipes) {
  const int baseline = test::CountOpenFds();
  {
    PipePool pool(PipePool::Options{});
    std::vector<PipePool::Pipe> pipes;
    for (int i = 0; i < 5; ++i) pipes.push_back(*pool.Acquire());
    for (const auto& p : pipes) pool.Release(p, 0);
    EXPECT_EQ(test::CountOpenFds(), baseline + 10);
  }
  EXPECT_EQ(test::CountOpenFds(), baseline);
}

}  // namespace
}  // namespace netstack::forward
