#include "netstack/forward/relay_test_util.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <utility>

namespace netstack::forward::test {

namespace {

size_t LogUniform(std::mt19937_64& rng, size_t lo, size_t hi) {
  if (hi <= lo) return lo;
  std::uniform_real_distribution<double> dist(std::log2(double(lo)),
                                              std::log2(double(hi) + 1));
  const size_t v = static_cast<size_t>(std::exp2(dist(rng)));
  return std::clamp(v, lo, hi);
}

absl::StatusOr<Leg> MakeTcpLeg(int family, const LegOptions& options) {
  const int listener = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listener < 0) return absl::ErrnoToStatus(errno, "socket");
  sockaddr_storage addr = {};
  socklen_t len;
  if (family == AF_INET) {
    auto* in = reinterpret_cast<sockaddr_in*>(&addr);
    in->sin_family = AF_INET;
    in->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    len = sizeof(*in);
  } else {
    auto* in6 = reinterpret_cast<sockaddr_in6*>(&addr);
    in6->sin6_family = AF_INET6;
    in6->sin6_addr = in6addr_loopback;
    len = sizeof(*in6);
  }
  if (bind(listener, reinterpret_cast<sockaddr*>(&addr), len) != 0 ||
      listen(listener, 1) != 0 ||
      getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    const int err = errno;
    close(listener);
    return absl::ErrnoToStatus(err, "bind/listen");
  }
  const int client = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (client < 0) {
    const int err = errno;
    close(listener);
    return absl::ErrnoToStatus(err, "socket");
  }
  if (options.peer_rcvbuf > 0) {
    setsockopt(client, SOL_SOCKET, SO_RCVBUF, &options.peer_rcvbuf,
               sizeof(options.peer_rcvbuf));
  }
  if (connect(client, reinterpret_cast<sockaddr*>(&addr), len) != 0) {
    const int err = errno;
    close(listener);
    close(client);
    return absl::ErrnoToStatus(err, "connect");
  }
  const int accepted = accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
  const int err = errno;
  close(listener);
  if (accepted < 0) {
    close(client);
    return absl::ErrnoToStatus(err, "accept");
  }
  if (options.peer_rcvbuf > 0) {
    setsockopt(accepted, SOL_SOCKET, SO_SNDBUF, &options.peer_rcvbuf,
               sizeof(options.peer_rcvbuf));
  }
  return Leg{client, accepted};
}

}  // namespace

std::string LegKindName(LegKind kind) {
  switch (kind) {
    case LegKind::kTcp4:
      return "tcp4";
    case LegKind::kTcp6:
      return "tcp6";
    case LegKind::kUnix:
      return "unix";
  }
  return "unknown";
}

absl::StatusOr<Leg> MakeLeg(LegKind kind, const LegOptions& options) {
  switch (kind) {
    case LegKind::kTcp4:
      return MakeTcpLeg(AF_INET, options);
    case LegKind::kTcp6:
      return MakeTcpLeg(AF_INET6, options);
    case LegKind::kUnix: {
      int sv[2];
      if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
        return absl::ErrnoToStatus(errno, "socketpair");
      }
      if (options.peer_rcvbuf > 0) {
        // A UNIX stream queues on the receiver but charges the sender's
        // buffer: the relay's end is the sender toward the peer.
        setsockopt(sv[1], SOL_SOCKET, SO_SNDBUF, &options.peer_rcvbuf,
                   sizeof(options.peer_rcvbuf));
      }
      return Leg{sv[0], sv[1]};
    }
  }
  return absl::InvalidArgumentError("leg kind");
}

std::vector<uint8_t> SeededBytes(size_t size, uint64_t seed) {
  std::vector<uint8_t> out(size);
  std::mt19937_64 rng(seed);
  size_t i = 0;
  for (; i + 8 <= size; i += 8) {
    const uint64_t v = rng();
    std::memcpy(out.data() + i, &v, 8);
  }
  for (; i < size; ++i) out[i] = static_cast<uint8_t>(rng());
  return out;
}

Peer::~Peer() {
  Abort();
  Join();
  close(fd_);
}

void Peer::StartWriter(std::vector<uint8_t> data,
                       const WriterOptions& options) {
  writer_ = std::thread([this, data = std::move(data), options] {
    std::mt19937_64 rng(options.seed);
    size_t off = 0;
    while (off < data.size()) {
      const size_t chunk =
          std::min(data.size() - off,
                   LogUniform(rng, options.min_chunk, options.max_chunk));
      const ssize_t n = send(fd_, data.data() + off, chunk, MSG_NOSIGNAL);
      if (n < 0) {
        if (errno == EINTR) continue;
        write_errno_ = errno;
        return;
      }
      off += static_cast<size_t>(n);
      written_.store(off);
    }
    if (options.shutdown_at_end && shutdown(fd_, SHUT_WR) != 0) {
      write_errno_ = errno;
    }
  });
}

void Peer::StartReader(const ReaderOptions& options) {
  reader_ = std::thread([this, options] {
    if (options.gate != nullptr) {
      while (!options.gate->load()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
    std::mt19937_64 rng(options.seed);
    std::vector<uint8_t> buf(options.max_read);
    int reads = 0;
    for (;;) {
      const size_t want = LogUniform(rng, options.min_read, options.max_read);
      const ssize_t n = recv(fd_, buf.data(), want, 0);
      if (n < 0) {
        if (errno == EINTR) continue;
        read_errno_ = errno;
        reader_done_.store(true);
        return;
      }
      if (n == 0) {
        eof_ = true;
        reader_done_.store(true);
        return;
      }
      received_.insert(received_.end(), buf.begin(), buf.begin() + n);
      received_count_.store(received_.size());
      if (options.pause_every > 0 && ++reads % options.pause_every == 0) {
        std::this_thread::sleep_for(absl::ToChronoNanoseconds(options.pause));
      }
    }
  });
}

void Peer::Abort() {
  if (writer_.joinable() || reader_.joinable()) shutdown(fd_, SHUT_RDWR);
}

void Peer::Join() {
  if (writer_.joinable()) writer_.join();
  if (reader_.joinable()) reader_.join();
}

bool RunUntil(eventloop::EventLoop& loop, absl::FunctionRef<bool()> done,
              absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!done()) {
    if (absl::Now() > deadline) return false;
    if (!loop.RunOnce(absl::Milliseconds(10)).ok()) return false;
  }
  return true;
}

void RunFor(eventloop::EventLoop& loop, absl::Duration duration) {
  const absl::Time deadline = absl::Now() + duration;
  while (absl::Now() < deadline) {
    (void)loop.RunOnce(
        std::min(absl::Milliseconds(10), deadline - absl::Now()));
  }
}

bool KernelGrantsPipes(size_t size) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return false;
  const bool ok = fcntl(fds[0], F_GETPIPE_SZ) >= 64 * 1024 &&
                  fcntl(fds[0], F_SETPIPE_SZ, static_cast<int>(size)) >= 0;
  close(fds[0]);
  close(fds[1]);
  return ok;
}

int CountOpenFds() {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  int count = 0;
  while (dirent* entry = readdir(dir)) {
    if (entry->d_name[0] != '.') ++count;
  }
  closedir(dir);
  return count - 1;  // the directory's own fd
}

bool FdIsOpen(int fd) { return fcntl(fd, F_GETFD) != -1 || errno != EBADF; }

}  // namespace netstack::forward::test
