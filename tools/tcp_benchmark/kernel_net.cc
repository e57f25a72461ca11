#include "tools/tcp_benchmark/kernel_net.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "netstack/transport/errors.h"

namespace netstack::tools::bench {

absl::StatusOr<RecvMode> ParseRecvMode(std::string_view name) {
  if (name == "plain") return RecvMode::kPlain;
  if (name == "splice") return RecvMode::kSplice;
  return absl::InvalidArgumentError(absl::StrCat(
      "--recv_mode: '", std::string(name), "' is not plain or splice"));
}

absl::StatusOr<SendMode> ParseSendMode(std::string_view name) {
  if (name == "plain") return SendMode::kPlain;
  if (name == "vmsplice") return SendMode::kVmsplice;
  if (name == "sendfile") return SendMode::kSendfile;
  return absl::InvalidArgumentError(
      absl::StrCat("--send_mode: '", std::string(name),
                   "' is not plain, vmsplice or sendfile"));
}

std::string RecvModeName(RecvMode mode) {
  return mode == RecvMode::kPlain ? "plain" : "splice";
}

std::string SendModeName(SendMode mode) {
  switch (mode) {
    case SendMode::kPlain: return "plain";
    case SendMode::kVmsplice: return "vmsplice";
    case SendMode::kSendfile: return "sendfile";
  }
  return "?";
}

namespace {

// errno of a failed socket call as a status ErrnoOf understands.
absl::Status ErrnoStatus(int err, const char* what) {
  switch (err) {
    case EAGAIN: return transport::WouldBlock();
    case ECONNREFUSED: return transport::ConnectionRefused();
    case ECONNRESET: return transport::ConnectionReset();
    case EPIPE: return transport::BrokenPipe();
    case ETIMEDOUT: return transport::TimedOut();
    case EHOSTUNREACH: return transport::HostUnreachable(what);
    case EADDRINUSE: return transport::AddressInUse(what);
    case ENOTCONN: return transport::NotConnected();
  }
  return absl::ErrnoToStatus(err, what);
}

// A file descriptor closed on destruction.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  Fd& operator=(Fd&& other) noexcept {
    Reset();
    fd_ = std::exchange(other.fd_, -1);
    return *this;
  }
  ~Fd() { Reset(); }
  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void Reset() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

// Page-aligned memory (vmsplice maps whole pages), freed on destruction.
class PageBuffer {
 public:
  explicit PageBuffer(size_t size) : size_(size) {
    void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    data_ = p == MAP_FAILED ? nullptr : static_cast<uint8_t*>(p);
  }
  ~PageBuffer() {
    if (data_ != nullptr) munmap(data_, size_);
  }
  PageBuffer(const PageBuffer&) = delete;
  PageBuffer& operator=(const PageBuffer&) = delete;
  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  uint8_t* data_;
  size_t size_;
};

// What every stream of one KernelNet shares: the loop, the options and
// the buffers/fds for the bulk modes (one thread, so one of each).
struct Shared {
  eventloop::EventLoop* loop;
  KernelNetOptions options;
  PageBuffer send_buffer;
  PageBuffer recv_buffer;
  Fd memfd;    // sendfile source, filled once
  Fd dev_null;  // splice sink

  Shared(eventloop::EventLoop* l, const KernelNetOptions& o)
      : loop(l), options(o), send_buffer(o.buffer_size),
        recv_buffer(o.buffer_size) {}
};

struct SockAddr {
  sockaddr_storage storage{};
  socklen_t len = 0;
  int family = AF_INET;
};

SockAddr ToSockAddr(const transport::SocketAddress& a) {
  SockAddr out;
  if (a.ip.is_v4()) {
    auto* sin = reinterpret_cast<sockaddr_in*>(&out.storage);
    sin->sin_family = AF_INET;
    sin->sin_port = htons(a.port);
    std::memcpy(&sin->sin_addr, a.ip.v4().bytes.data(), 4);
    out.len = sizeof(sockaddr_in);
    out.family = AF_INET;
  } else {
    auto* sin6 = reinterpret_cast<sockaddr_in6*>(&out.storage);
    sin6->sin6_family = AF_INET6;
    sin6->sin6_port = htons(a.port);
    std::memcpy(&sin6->sin6_addr, a.ip.v6().bytes.data(), 16);
    out.len = sizeof(sockaddr_in6);
    out.family = AF_INET6;
  }
  return out;
}

std::string FormatSockAddr(const sockaddr_storage& ss) {
  char host[INET6_ADDRSTRLEN] = "?";
  if (ss.ss_family == AF_INET) {
    const auto* sin = reinterpret_cast<const sockaddr_in*>(&ss);
    inet_ntop(AF_INET, &sin->sin_addr, host, sizeof(host));
    return absl::StrCat(host, ":", ntohs(sin->sin_port));
  }
  const auto* sin6 = reinterpret_cast<const sockaddr_in6*>(&ss);
  inet_ntop(AF_INET6, &sin6->sin6_addr, host, sizeof(host));
  return absl::StrCat("[", host, "]:", ntohs(sin6->sin6_port));
}

absl::Status SetIntOption(int fd, int level, int name, int value,
                          const char* what) {
  if (setsockopt(fd, level, name, &value, sizeof(value)) != 0) {
    return absl::ErrnoToStatus(errno, what);
  }
  return absl::OkStatus();
}

// StreamOptions on a socket. Buffers before listen/connect so that the
// window scale covers them.
absl::Status ApplyOptions(int fd, const StreamOptions& o) {
  if (o.no_delay) {
    if (absl::Status s = SetIntOption(fd, IPPROTO_TCP, TCP_NODELAY, 1,
                                      "setsockopt(TCP_NODELAY)");
        !s.ok()) {
      return s;
    }
  }
  if (!o.congestion_control.empty() &&
      setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, o.congestion_control.data(),
                 o.congestion_control.size()) != 0) {
    return absl::ErrnoToStatus(
        errno, absl::StrCat("setsockopt(TCP_CONGESTION, ", o.congestion_control,
                            ")"));
  }
  if (o.send_buffer > 0) {
    if (absl::Status s = SetIntOption(fd, SOL_SOCKET, SO_SNDBUF, o.send_buffer,
                                      "setsockopt(SO_SNDBUF)");
        !s.ok()) {
      return s;
    }
  }
  if (o.receive_buffer > 0) {
    return SetIntOption(fd, SOL_SOCKET, SO_RCVBUF, o.receive_buffer,
                        "setsockopt(SO_RCVBUF)");
  }
  return absl::OkStatus();
}

class KernelStream final : public Stream, public eventloop::Handler {
 public:
  KernelStream(Shared* shared, Fd fd, bool connecting)
      : shared_(shared), fd_(std::move(fd)), connecting_(connecting) {}
  ~KernelStream() override { Close(); }

  absl::Status Register() {
    return shared_->loop->Add(fd_.get(), Interest(), this);
  }

  absl::StatusOr<size_t> Read(std::span<uint8_t> out) override {
    if (!error_.ok()) return error_;
    const ssize_t n = recv(fd_.get(), out.data(), out.size(), 0);
    if (n < 0) return ErrnoStatus(errno, "recv");
    return static_cast<size_t>(n);
  }

  absl::StatusOr<size_t> Write(std::span<const uint8_t> in) override {
    if (!error_.ok()) return error_;
    const ssize_t n = send(fd_.get(), in.data(), in.size(), MSG_NOSIGNAL);
    if (n < 0) return ErrnoStatus(errno, "send");
    return static_cast<size_t>(n);
  }

  absl::StatusOr<size_t> SendBulk(size_t max) override {
    if (!error_.ok()) return error_;
    switch (shared_->options.send_mode) {
      case SendMode::kPlain:
        return Write({shared_->send_buffer.data(),
                      std::min(max, shared_->send_buffer.size())});
      case SendMode::kVmsplice: return SendVmsplice(max);
      case SendMode::kSendfile: return SendFile(max);
    }
    return absl::InternalError("bad send mode");
  }

  absl::StatusOr<size_t> DiscardBulk(size_t max) override {
    if (!error_.ok()) return error_;
    if (shared_->options.recv_mode == RecvMode::kSplice) {
      return DiscardSplice(max);
    }
    return Read({shared_->recv_buffer.data(),
                 std::min(max, shared_->recv_buffer.size())});
  }

  void SetHandler(Stream::Handler handler) override { handler_ = std::move(handler); }

  void WantWritable(bool want) override {
    if (want == want_writable_) return;
    want_writable_ = want;
    UpdateInterest();
  }

  void ShutdownWrite() override {
    if (fd_.valid()) shutdown(fd_.get(), SHUT_WR);
  }

  void Close() override {
    if (!fd_.valid()) return;
    (void)shared_->loop->Remove(fd_.get());
    fd_.Reset();
    pipe_read_.Reset();
    pipe_write_.Reset();
    handler_ = nullptr;
  }

  StreamInfo Info() const override {
    StreamInfo info;
    tcp_info ti{};
    socklen_t len = sizeof(ti);
    if (fd_.valid() &&
        getsockopt(fd_.get(), IPPROTO_TCP, TCP_INFO, &ti, &len) == 0) {
      info.retransmits = ti.tcpi_total_retrans;
      info.snd_cwnd_bytes = ti.tcpi_snd_cwnd * ti.tcpi_snd_mss;
      info.rtt_us = ti.tcpi_rtt;
    }
    return info;
  }

  std::string Describe() const override {
    sockaddr_storage local{}, remote{};
    socklen_t llen = sizeof(local), rlen = sizeof(remote);
    if (!fd_.valid() ||
        getsockname(fd_.get(), reinterpret_cast<sockaddr*>(&local), &llen) != 0 ||
        getpeername(fd_.get(), reinterpret_cast<sockaddr*>(&remote), &rlen) != 0) {
      return "(not connected)";
    }
    return absl::StrCat(FormatSockAddr(local), " -> ", FormatSockAddr(remote));
  }

  // eventloop::Handler.
  void OnReadable(Instant) override { Notify(ready::kReadable); }
  void OnWritable(Instant) override {
    if (connecting_) {
      connecting_ = false;
      int err = 0;
      socklen_t len = sizeof(err);
      getsockopt(fd_.get(), SOL_SOCKET, SO_ERROR, &err, &len);
      UpdateInterest();
      if (err != 0) {
        error_ = ErrnoStatus(err, "connect");
        Notify(ready::kError);
        return;
      }
    }
    Notify(ready::kWritable);
  }
  void OnError(Instant, uint32_t epoll_events) override {
    uint32_t bits = ready::kError;
    if (epoll_events & EPOLLHUP) bits |= ready::kHangup;
    Notify(bits);
  }

 private:
  uint32_t Interest() const {
    return eventloop::EventLoop::kReadable |
           (connecting_ || want_writable_ ? eventloop::EventLoop::kWritable : 0);
  }
  void UpdateInterest() {
    if (fd_.valid()) (void)shared_->loop->Modify(fd_.get(), Interest());
  }
  void Notify(uint32_t bits) {
    // The handler may Close() us (but not destroy us): keep it alive for
    // the call.
    if (!handler_) return;
    Stream::Handler h = handler_;
    h(bits);
  }

  absl::Status EnsurePipe() {
    if (pipe_read_.valid()) return absl::OkStatus();
    int p[2];
    if (pipe2(p, O_NONBLOCK | O_CLOEXEC) != 0) {
      return absl::ErrnoToStatus(errno, "pipe2");
    }
    pipe_read_ = Fd(p[0]);
    pipe_write_ = Fd(p[1]);
    // Best effort: a bigger pipe means fewer splice calls per byte.
    fcntl(p[1], F_SETPIPE_SZ, static_cast<int>(shared_->options.buffer_size));
    const int size = fcntl(p[1], F_GETPIPE_SZ);
    pipe_capacity_ = size > 0 ? static_cast<size_t>(size) : 65536;
    return absl::OkStatus();
  }

  // splice(socket -> pipe), then empty the pipe into /dev/null. Returns
  // what left the socket. The pipe is drained by byte count, not until
  // EAGAIN: a write side's EAGAIN says nothing about the pipe being empty.
  absl::StatusOr<size_t> DiscardSplice(size_t max) {
    if (absl::Status s = EnsurePipe(); !s.ok()) return s;
    if (absl::Status s = DrainPipe(); !s.ok()) return s;
    if (pipe_bytes_ > 0) return transport::WouldBlock();  // /dev/null stalled
    const ssize_t n =
        splice(fd_.get(), nullptr, pipe_write_.get(), nullptr,
               std::min(max, pipe_capacity_), SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
    if (n < 0) return ErrnoStatus(errno, "splice(socket -> pipe)");
    pipe_bytes_ += static_cast<size_t>(n);
    if (absl::Status s = DrainPipe(); !s.ok()) return s;
    return static_cast<size_t>(n);
  }

  absl::Status DrainPipe() {
    while (pipe_bytes_ > 0) {
      const ssize_t n = splice(pipe_read_.get(), nullptr, shared_->dev_null.get(),
                               nullptr, pipe_bytes_, SPLICE_F_MOVE);
      if (n < 0) {
        if (errno == EAGAIN || errno == EINTR) return absl::OkStatus();
        return absl::ErrnoToStatus(errno, "splice(pipe -> /dev/null)");
      }
      if (n == 0) return absl::InternalError("pipe empty before its count");
      pipe_bytes_ -= static_cast<size_t>(n);
    }
    return absl::OkStatus();
  }

  // vmsplice the send buffer into the pipe when it is empty, then splice
  // the pipe into the socket. Returns what entered the socket.
  absl::StatusOr<size_t> SendVmsplice(size_t max) {
    if (absl::Status s = EnsurePipe(); !s.ok()) return s;
    if (pipe_bytes_ == 0) {
      iovec iov{shared_->send_buffer.data(),
                std::min(pipe_capacity_, shared_->send_buffer.size())};
      const ssize_t n = vmsplice(pipe_write_.get(), &iov, 1, SPLICE_F_NONBLOCK);
      if (n < 0) return absl::ErrnoToStatus(errno, "vmsplice");
      pipe_bytes_ = static_cast<size_t>(n);
    }
    const ssize_t n =
        splice(pipe_read_.get(), nullptr, fd_.get(), nullptr,
               std::min(max, pipe_bytes_), SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
    if (n < 0) return ErrnoStatus(errno, "splice(pipe -> socket)");
    pipe_bytes_ -= static_cast<size_t>(n);
    return static_cast<size_t>(n);
  }

  absl::StatusOr<size_t> SendFile(size_t max) {
    const size_t size = shared_->send_buffer.size();
    if (file_offset_ >= static_cast<off_t>(size)) file_offset_ = 0;
    const size_t want = std::min(max, size - static_cast<size_t>(file_offset_));
    const ssize_t n = sendfile(fd_.get(), shared_->memfd.get(), &file_offset_, want);
    if (n < 0) return ErrnoStatus(errno, "sendfile");
    return static_cast<size_t>(n);
  }

  Shared* shared_;
  Fd fd_;
  bool connecting_;
  bool want_writable_ = false;
  absl::Status error_;  // a failed connect, reported by Read/Write
  Stream::Handler handler_;
  Fd pipe_read_, pipe_write_;
  size_t pipe_capacity_ = 0;
  size_t pipe_bytes_ = 0;  // in the pipe, not yet at the sink
  off_t file_offset_ = 0;
};

class KernelListener final : public Listener, public eventloop::Handler {
 public:
  KernelListener(Shared* shared, Fd fd, StreamOptions options)
      : shared_(shared), fd_(std::move(fd)), options_(std::move(options)) {}
  ~KernelListener() override { (void)shared_->loop->Remove(fd_.get()); }

  absl::StatusOr<std::unique_ptr<Stream>> Accept() override {
    const int s = accept4(fd_.get(), nullptr, nullptr,
                          SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (s < 0) return ErrnoStatus(errno, "accept");
    Fd fd(s);
    if (absl::Status st = ApplyOptions(fd.get(), options_); !st.ok()) return st;
    auto stream = std::make_unique<KernelStream>(shared_, std::move(fd), false);
    if (absl::Status st = stream->Register(); !st.ok()) return st;
    return stream;
  }
  void SetHandler(Listener::Handler handler) override { handler_ = std::move(handler); }
  void OnReadable(Instant) override {
    if (handler_) handler_();
  }

 private:
  Shared* shared_;
  Fd fd_;
  StreamOptions options_;
  Listener::Handler handler_;
};

class KernelNet final : public Net {
 public:
  KernelNet(std::unique_ptr<eventloop::EventLoop> loop,
            const KernelNetOptions& options)
      : loop_(std::move(loop)), shared_(loop_.get(), options) {}

  absl::Status Init() {
    if (shared_.send_buffer.data() == nullptr ||
        shared_.recv_buffer.data() == nullptr) {
      return absl::ResourceExhaustedError("mmap of the bulk buffers failed");
    }
    // Something other than zeros, so that nothing along the way can
    // shortcut zero pages.
    for (size_t i = 0; i < shared_.send_buffer.size(); ++i) {
      shared_.send_buffer.data()[i] = static_cast<uint8_t>(i * 131 + 7);
    }
    if (shared_.options.recv_mode == RecvMode::kSplice) {
      shared_.dev_null = Fd(open("/dev/null", O_WRONLY | O_CLOEXEC));
      if (!shared_.dev_null.valid()) {
        return absl::ErrnoToStatus(errno, "open(/dev/null)");
      }
    }
    if (shared_.options.send_mode == SendMode::kSendfile) return MakeMemfd();
    return absl::OkStatus();
  }

  eventloop::EventLoop& loop() override { return *loop_; }

  absl::StatusOr<std::unique_ptr<Listener>> Listen(
      const transport::SocketAddress& local,
      const StreamOptions& options) override {
    const SockAddr addr = ToSockAddr(local);
    Fd fd(socket(addr.family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!fd.valid()) return absl::ErrnoToStatus(errno, "socket");
    if (absl::Status s = SetIntOption(fd.get(), SOL_SOCKET, SO_REUSEADDR, 1,
                                      "setsockopt(SO_REUSEADDR)");
        !s.ok()) {
      return s;
    }
    if (absl::Status s = ApplyOptions(fd.get(), options); !s.ok()) return s;
    if (bind(fd.get(), reinterpret_cast<const sockaddr*>(&addr.storage),
             addr.len) != 0) {
      return ErrnoStatus(errno, local.ToString().c_str());
    }
    if (listen(fd.get(), 128) != 0) return absl::ErrnoToStatus(errno, "listen");
    const int raw = fd.get();
    auto listener =
        std::make_unique<KernelListener>(&shared_, std::move(fd), options);
    if (absl::Status s = loop_->Add(raw, eventloop::EventLoop::kReadable,
                                    listener.get());
        !s.ok()) {
      return s;
    }
    return listener;
  }

  absl::StatusOr<std::unique_ptr<Stream>> Connect(
      const transport::SocketAddress& remote,
      const StreamOptions& options) override {
    const SockAddr addr = ToSockAddr(remote);
    Fd fd(socket(addr.family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!fd.valid()) return absl::ErrnoToStatus(errno, "socket");
    if (absl::Status s = ApplyOptions(fd.get(), options); !s.ok()) return s;
    if (connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr.storage),
                addr.len) != 0 &&
        errno != EINPROGRESS) {
      return ErrnoStatus(errno, "connect");
    }
    auto stream = std::make_unique<KernelStream>(&shared_, std::move(fd), true);
    if (absl::Status s = stream->Register(); !s.ok()) return s;
    return stream;
  }

  std::string Describe() const override {
    return absl::StrCat("kernel (recv ", RecvModeName(shared_.options.recv_mode),
                        ", send ", SendModeName(shared_.options.send_mode), ")");
  }

 private:
  absl::Status MakeMemfd() {
    Fd fd(memfd_create("tcp_benchmark", MFD_CLOEXEC));
    if (!fd.valid()) return absl::ErrnoToStatus(errno, "memfd_create");
    size_t done = 0;
    while (done < shared_.send_buffer.size()) {
      const ssize_t n = write(fd.get(), shared_.send_buffer.data() + done,
                              shared_.send_buffer.size() - done);
      if (n <= 0) return absl::ErrnoToStatus(errno, "write(memfd)");
      done += static_cast<size_t>(n);
    }
    shared_.memfd = std::move(fd);
    return absl::OkStatus();
  }

  std::unique_ptr<eventloop::EventLoop> loop_;
  Shared shared_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Net>> CreateKernelNet(
    const KernelNetOptions& options) {
  if (options.buffer_size < 4096) {
    return absl::InvalidArgumentError("buffer_size below one page");
  }
  absl::StatusOr<std::unique_ptr<eventloop::EventLoop>> loop =
      eventloop::EventLoop::Create();
  if (!loop.ok()) return loop.status();
  auto net = std::make_unique<KernelNet>(*std::move(loop), options);
  if (absl::Status s = net->Init(); !s.ok()) return s;
  return net;
}

}  // namespace netstack::tools::bench
