// PipePool: pipes for the splice path, sized with F_SETPIPE_SZ, reused
// only when empty (Go's internal/poll lesson: a pipe that still holds a
// dead connection's bytes would hand them to the next one).
#include <errno.h>
#include <fcntl.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstddef>
#include <optional>

#include "netstack/forward/relay.h"

namespace netstack::forward {

namespace {

// The kernel's default pipe: PIPE_DEF_BUFFERS (16) pages. A new pipe gets
// fewer (PIPE_MIN_DEF_BUFFERS, 2) only when its user is past
// /proc/sys/fs/pipe-user-pages-soft.
size_t DefaultPipeCapacity() {
  static const size_t capacity = [] {
    const long page = sysconf(_SC_PAGESIZE);
    return 16 * static_cast<size_t>(page > 0 ? page : 4096);
  }();
  return capacity;
}

// Asks for `want` bytes, then for halves of it, until the kernel agrees
// or the request is no larger than what the pipe already has. EPERM is
// pipe-max-size (unprivileged) or pipe-user-pages-soft/-hard; ENOMEM and
// EINVAL (beyond 2^31) also mean "smaller". Returns the final capacity.
size_t GrowPipe(int fd, size_t current, size_t want) {
  for (size_t ask = want; ask > current; ask /= 2) {
    const int arg = static_cast<int>(std::min<size_t>(ask, size_t{1} << 30));
    const int got = fcntl(fd, F_SETPIPE_SZ, arg);
    if (got >= 0) return static_cast<size_t>(got);
    if (errno != EPERM && errno != ENOMEM && errno != EINVAL) break;
  }
  return current;
}

}  // namespace

PipePool::PipePool(Options options) : options_(options) {}

PipePool::~PipePool() {
  for (const Pipe& pipe : pooled_) Close(pipe);
}

void PipePool::Close(const Pipe& pipe) {
  close(pipe.read_fd);
  close(pipe.write_fd);
}

std::optional<PipePool::Pipe> PipePool::Acquire() {
  if (!pooled_.empty()) {
    Pipe pipe = pooled_.back();
    pooled_.pop_back();
    ++stats_.reused;
    --stats_.pooled;
    ++stats_.in_use;
    return pipe;
  }
  // The pool is empty, so in_use is the number of pipes that exist.
  if (stats_.in_use >= options_.max_pipes) {
    ++stats_.acquire_failed;
    return std::nullopt;
  }
  int fds[2];
  if (pipe2(fds, O_NONBLOCK | O_CLOEXEC) != 0) {
    ++stats_.acquire_failed;  // EMFILE, ENFILE, ENOMEM
    return std::nullopt;
  }
  Pipe pipe{fds[0], fds[1], 0};
  const int initial = fcntl(fds[0], F_GETPIPE_SZ);
  size_t capacity = initial > 0 ? static_cast<size_t>(initial) : 0;
  if (options_.pipe_size > capacity) {
    capacity = GrowPipe(fds[0], capacity, options_.pipe_size);
    if (capacity < options_.pipe_size) ++stats_.resize_refused;
  } else if (options_.pipe_size < capacity && options_.pipe_size > 0) {
    // A smaller pipe was asked for (tests do, to fill it quickly). The
    // kernel rounds up to a power of two pages.
    const int got =
        fcntl(fds[0], F_SETPIPE_SZ, static_cast<int>(options_.pipe_size));
    if (got > 0) capacity = static_cast<size_t>(got);
  }
  if (capacity == 0 ||
      capacity < std::min(options_.pipe_size, DefaultPipeCapacity())) {
    // Past pipe-user-pages-soft the kernel creates 2-page pipes and
    // refuses to grow them: the pool cannot grow, the caller copies.
    Close(pipe);
    ++stats_.acquire_failed;
    return std::nullopt;
  }
  pipe.capacity = capacity;
  ++stats_.created;
  ++stats_.in_use;
  return pipe;
}

void PipePool::Release(Pipe pipe, size_t bytes_in_pipe) {
  if (pipe.read_fd < 0) return;
  if (stats_.in_use > 0) --stats_.in_use;
  int queued = 0;
  // Trust, but verify: the caller's count says empty; FIONREAD must agree
  // before the pipe may serve another connection.
  if (bytes_in_pipe != 0 || ioctl(pipe.read_fd, FIONREAD, &queued) != 0 ||
      queued != 0) {
    ++stats_.closed_with_data;
    Close(pipe);
    return;
  }
  pooled_.push_back(pipe);
  ++stats_.pooled;
}

size_t PipePool::Trim(size_t keep) {
  size_t closed = 0;
  while (pooled_.size() > keep) {
    Close(pooled_.back());
    pooled_.pop_back();
    --stats_.pooled;
    ++stats_.trimmed;
    ++closed;
  }
  return closed;
}

}  // namespace netstack::forward
