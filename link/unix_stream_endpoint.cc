#include "link/unix_stream_endpoint.h"

#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "netstack/base/dcheck.h"
#include "netstack/wire/bytes.h"

namespace netstack::link {
namespace {

constexpr uint32_t kPrefixLen = 4;
constexpr uint32_t kMinMtu = 68;  // RFC 791: every IPv4 host must take 68
constexpr uint32_t kMaxMtu =
    UnixStreamEndpoint::kMaxFrameLen - 14;  // untagged max-size frame
// Below this much free space at the end of a chunk, a read would return
// so little that moving the unparsed rest to a fresh chunk is cheaper.
constexpr uint32_t kMinReadSpace = 2048;
// Reads per OnReadable(), so one busy peer cannot hold the loop.
constexpr int kMaxReadsPerCall = 16;
// Accepts per OnReadable(), for the same reason.
constexpr int kMaxAcceptsPerCall = 16;
// How long receive waits for chunks to come back when the pool is empty.
constexpr absl::Duration kRxRetryDelay = absl::Milliseconds(1);

struct UnixAddr {
  sockaddr_un addr;
  socklen_t len;
};

// "@name" is an abstract address (a leading NUL, not a file).
absl::StatusOr<UnixAddr> MakeUnixAddr(const std::string& path) {
  UnixAddr a;
  std::memset(&a.addr, 0, sizeof(a.addr));
  a.addr.sun_family = AF_UNIX;
  if (path.empty() || path == "@") {
    return absl::InvalidArgumentError("UNIX socket path is empty");
  }
  const bool abstract = path[0] == '@';
  // A filesystem path needs its terminating NUL in sun_path.
  const size_t limit = sizeof(a.addr.sun_path) - (abstract ? 0 : 1);
  if (path.size() > limit) {
    return absl::InvalidArgumentError(absl::StrCat(
        "UNIX socket path '", path, "' is longer than ", limit, " bytes"));
  }
  if (path.find('\0') != std::string::npos) {
    return absl::InvalidArgumentError("UNIX socket path contains a NUL byte");
  }
  std::memcpy(a.addr.sun_path, path.data(), path.size());
  if (abstract) a.addr.sun_path[0] = '\0';
  a.len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + path.size() +
                                 (abstract ? 0 : 1));
  return a;
}

absl::StatusOr<UniqueFd> NewStreamSocket() {
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return ErrnoStatus(errno, "socket(AF_UNIX, SOCK_STREAM)");
  return fd;
}

absl::Status SetNonBlocking(int fd) {
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) {
    return ErrnoStatus(errno, "fcntl O_NONBLOCK");
  }
  return absl::OkStatus();
}

absl::StatusOr<UniqueFd> ConnectTo(const std::string& path) {
  absl::StatusOr<UnixAddr> addr = MakeUnixAddr(path);
  if (!addr.ok()) return addr.status();
  absl::StatusOr<UniqueFd> fd = NewStreamSocket();
  if (!fd.ok()) return fd.status();
  // Blocking connect: setup code, and a UNIX listener answers at once
  // (or the call waits for backlog room, which a non-blocking connect
  // would report as EAGAIN).
  int r;
  do {
    r = ::connect(fd->get(), reinterpret_cast<const sockaddr*>(&addr->addr),
                  addr->len);
  } while (r < 0 && errno == EINTR);
  if (r < 0) {
    const int err = errno;
    if (err == ENOENT) {
      return absl::NotFoundError(
          absl::StrCat("no UNIX socket at '", path, "'"));
    }
    if (err == ECONNREFUSED) {
      return absl::UnavailableError(
          absl::StrCat("nothing listens on '", path, "'"));
    }
    return ErrnoStatus(err, absl::StrCat("connect to '", path, "'"));
  }
  return fd;
}

// Removes a socket file nobody listens on any more (left by a crashed
// process); leaves anything else alone.
absl::Status RemoveStaleSocket(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) return absl::OkStatus();
  if (!S_ISSOCK(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat("'", path, "' exists and is not a socket"));
  }
  absl::StatusOr<UniqueFd> probe = ConnectTo(path);
  if (probe.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("'", path, "' is in use: another process listens on it"));
  }
  if (absl::IsUnavailable(probe.status()) && ::unlink(path.c_str()) != 0 &&
      errno != ENOENT) {
    return ErrnoStatus(errno, absl::StrCat("unlink stale '", path, "'"));
  }
  return absl::OkStatus();
}

// `file_mode`: a socket file's permissions (an abstract name has none).
absl::StatusOr<UniqueFd> Listen(const std::string& path, mode_t file_mode) {
  absl::StatusOr<UnixAddr> addr = MakeUnixAddr(path);
  if (!addr.ok()) return addr.status();
  if (path[0] != '@') {
    if (absl::Status s = RemoveStaleSocket(path); !s.ok()) return s;
  }
  absl::StatusOr<UniqueFd> fd = NewStreamSocket();
  if (!fd.ok()) return fd.status();
  // The file gets its mode at bind, from the umask (fchmod on a socket fd
  // does not reach it): no moment in which another user could connect.
  const mode_t old_umask = ::umask(~file_mode & 0777);
  const int bound = ::bind(
      fd->get(), reinterpret_cast<const sockaddr*>(&addr->addr), addr->len);
  const int bind_errno = errno;
  ::umask(old_umask);
  if (bound != 0) {
    const int err = bind_errno;
    if (err == EADDRINUSE) {
      return absl::FailedPreconditionError(
          absl::StrCat("'", path, "' is in use"));
    }
    return ErrnoStatus(err, absl::StrCat("bind '", path, "'"));
  }
  if (::listen(fd->get(), 4) != 0) {
    return ErrnoStatus(errno, absl::StrCat("listen on '", path, "'"));
  }
  if (absl::Status s = SetNonBlocking(fd->get()); !s.ok()) return s;
  return fd;
}

absl::Status ValidateOptions(const UnixStreamOptions& o) {
  if (o.mtu < kMinMtu || o.mtu > kMaxMtu) {
    return absl::InvalidArgumentError(
        absl::StrCat("MTU ", o.mtu, " is outside ", kMinMtu, "..", kMaxMtu,
                     " (a stream frame is at most 65535 bytes)"));
  }
  if (o.rx_batch == 0 || o.rx_batch > 1024) {
    return absl::InvalidArgumentError("rx_batch must be 1..1024");
  }
  return absl::OkStatus();
}

// The uid of the process at the other end of `fd` (SO_PEERCRED: a
// connecting peer's at its connect(), a listener's at its listen()).
std::optional<uid_t> PeerUid(int fd) {
  ucred cred{0, static_cast<uid_t>(-1), static_cast<gid_t>(-1)};
  socklen_t len = sizeof(cred);
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
    return std::nullopt;
  }
  return cred.uid;
}

// Who may be the guest's side: our own user, root, or the allowed one.
bool UidAllowed(std::optional<uid_t> uid, uid_t own,
                std::optional<uid_t> allow) {
  return uid && (*uid == own || *uid == 0 || (allow && *uid == *allow));
}

absl::StatusOr<UniqueFd> NewEpoll() {
  UniqueFd ep(::epoll_create1(EPOLL_CLOEXEC));
  if (!ep.valid()) return ErrnoStatus(errno, "epoll_create1");
  return ep;
}

absl::Status EpollAdd(int ep, int fd) {
  epoll_event ev;
  std::memset(&ev, 0, sizeof(ev));
  ev.events = EPOLLIN;  // level-triggered: readable while data is queued
  ev.data.fd = fd;
  if (::epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) != 0) {
    return ErrnoStatus(errno, "epoll_ctl ADD");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<UnixStreamEndpoint>> UnixStreamEndpoint::Open(
    const UnixStreamOptions& options, buffer::ChunkPool& pool) {
  if (absl::Status s = ValidateOptions(options); !s.ok()) return s;
  if (options.mode == UnixStreamOptions::Mode::kConnect) {
    absl::StatusOr<UniqueFd> conn = ConnectTo(options.path);
    if (!conn.ok()) return conn.status();
    // Whoever listens on the name becomes the guest's side, and an
    // abstract name has no permissions: any local user could have bound
    // it first (second review of issue #30, finding 8). The listener's
    // uid passes the check a connecting peer's does (PeerAllowed). There
    // is one connection to make, so a refusal fails the open; it closes
    // the connection, and the listener sees EOF.
    const uid_t own = ::geteuid();
    if (const std::optional<uid_t> uid = PeerUid(conn->get());
        !UidAllowed(uid, own, options.allow_uid)) {
      return absl::PermissionDeniedError(absl::StrCat(
          "refused '", options.path, "': its listener is ",
          uid ? absl::StrCat("uid ", *uid) : std::string("of an unknown uid"),
          "; the guest's side must be our uid (", own, "), root or ",
          options.allow_uid
              ? absl::StrCat("uid ", *options.allow_uid, " (--unix-allow-uid)")
              : std::string("a --unix-allow-uid user")));
    }
    return FromConnectedFd(conn->release(), options, pool);
  }
  // The socket file is held by its directory, opened before the bind: it
  // is removed at the end even after netstackd's root has moved (its mount
  // namespace is detached after setup), and a directory that cannot be
  // opened fails here rather than leave the file behind at exit.
  DirEntryRef socket_file;
  if (options.path[0] != '@') {
    absl::StatusOr<DirEntryRef> e = DirEntryRef::Of(options.path);
    if (!e.ok()) return e.status();
    socket_file = *std::move(e);
  }
  absl::StatusOr<UniqueFd> listener =
      Listen(options.path, options.allow_uid ? 0666 : 0600);
  if (!listener.ok()) return listener.status();
  std::unique_ptr<UnixStreamEndpoint> endpoint(new UnixStreamEndpoint(
      UniqueFd(), std::move(*listener), options.path, options, pool));
  endpoint->socket_file_ = std::move(socket_file);  // from now on, removed
  absl::StatusOr<UniqueFd> ep = NewEpoll();
  if (!ep.ok()) return ep.status();
  if (absl::Status s = EpollAdd(ep->get(), endpoint->listener_.get());
      !s.ok()) {
    return s;
  }
  endpoint->epoll_ = std::move(*ep);
  return endpoint;
}

absl::StatusOr<std::unique_ptr<UnixStreamEndpoint>>
UnixStreamEndpoint::FromConnectedFd(int fd, const UnixStreamOptions& options,
                                    buffer::ChunkPool& pool) {
  UniqueFd conn(fd);
  if (absl::Status s = ValidateOptions(options); !s.ok()) return s;
  int type = 0;
  socklen_t len = sizeof(type);
  if (::getsockopt(conn.get(), SOL_SOCKET, SO_TYPE, &type, &len) != 0) {
    return ErrnoStatus(errno, "fd is not a socket (getsockopt SO_TYPE)");
  }
  if (type != SOCK_STREAM) {
    return absl::InvalidArgumentError("fd is not a SOCK_STREAM socket");
  }
  absl::StatusOr<UniqueFd> ep = NewEpoll();
  if (!ep.ok()) return ep.status();
  std::unique_ptr<UnixStreamEndpoint> endpoint(new UnixStreamEndpoint(
      std::move(*ep), UniqueFd(), options.path, options, pool));
  if (absl::Status s = endpoint->Adopt(std::move(conn)); !s.ok()) return s;
  return endpoint;
}

UnixStreamEndpoint::UnixStreamEndpoint(UniqueFd epoll, UniqueFd listener,
                                       std::string path,
                                       const UnixStreamOptions& options,
                                       buffer::ChunkPool& pool)
    : pool_(pool),
      epoll_(std::move(epoll)),
      listener_(std::move(listener)),
      path_(std::move(path)),
      caps_{.mtu = options.mtu,
            .gso_max_size = 0,
            .tx_checksum_offload = false,
            .vnet_hdr = false,
            .mac = options.mac ? *options.mac
                               : DeriveLocalMac(absl::StrCat("unix:", path_))},
      max_frame_(std::min(options.mtu + kEthernetOverhead, kMaxFrameLen)),
      rx_batch_(options.rx_batch),
      own_uid_(::geteuid()),
      allow_uid_(options.allow_uid),
      frames_(options.rx_batch),
      tx_tail_(new uint8_t[kPrefixLen + kMaxFrameLen]) {
}

UnixStreamEndpoint::~UnixStreamEndpoint() {
  if (socket_file_.valid()) (void)socket_file_.Unlink();
}

std::string UnixStreamEndpoint::Name() const {
  if (path_.empty()) return "unix:fd";
  return absl::StrCat("unix:", path_);
}

absl::Status UnixStreamEndpoint::Adopt(UniqueFd conn) {
  if (absl::Status s = SetNonBlocking(conn.get()); !s.ok()) return s;
  if (absl::Status s = EpollAdd(epoll_.get(), conn.get()); !s.ok()) return s;
  conn_ = std::move(conn);
  ++stream_stats_.connections;
  return absl::OkStatus();
}

bool UnixStreamEndpoint::PeerAllowed(int peer) {
  const std::optional<uid_t> uid = PeerUid(peer);
  if (UidAllowed(uid, own_uid_, allow_uid_)) return true;
  ++stream_stats_.refused_peers;
  if (!logged_refusal_) {
    logged_refusal_ = true;
    std::fprintf(stderr,
                 "netstack: %s: refused a peer of uid %d (only uid %d, root "
                 "and --unix-allow-uid may be the guest); further refusals "
                 "are not logged\n",
                 Name().c_str(), uid ? static_cast<int>(*uid) : -1,
                 static_cast<int>(own_uid_));
  }
  return false;
}

void UnixStreamEndpoint::AcceptPending() {
  // Bounded: peers that are refused at once could otherwise keep the loop
  // here. The listener stays readable for the rest.
  for (int i = 0; i < kMaxAcceptsPerCall; ++i) {
    UniqueFd peer(::accept4(listener_.get(), nullptr, nullptr,
                            SOCK_CLOEXEC | SOCK_NONBLOCK));
    if (!peer.valid()) return;  // EAGAIN, or a peer that left already
    if (!PeerAllowed(peer.get())) continue;  // closed
    if (conn_.valid()) {
      // One peer at a time: the newcomer sees EOF at once instead of
      // hanging in the backlog.
      ++stream_stats_.rejected_peers;
      continue;
    }
    if (!Adopt(std::move(peer)).ok()) ++stream_stats_.disconnect_io_error;
  }
}

void UnixStreamEndpoint::DropConnection(Disconnect why) {
  switch (why) {
    case Disconnect::kPeerClosed:
      ++stream_stats_.disconnect_peer_closed;
      break;
    case Disconnect::kIoError:
      ++stream_stats_.disconnect_io_error;
      break;
    case Disconnect::kBadLength:
      ++stream_stats_.disconnect_bad_length;
      break;
  }
  if (conn_.valid() && !rx_paused_) {
    ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, conn_.get(), nullptr);
  }
  conn_.reset();
  ++generation_;
  // Whatever was half received or half sent belongs to the old stream.
  rx_chunk_.Reset();
  rx_base_ = nullptr;
  rx_fill_ = rx_pos_ = rx_frame_len_ = 0;
  rx_paused_ = false;
  rx_retry_at_ = kNever;
  tx_tail_len_ = tx_tail_off_ = 0;
  tx_tail_packet_ = nullptr;
}

// ---------------------------------------------------------------- receive

bool UnixStreamEndpoint::EnsureRxSpace() {
  if (rx_chunk_ && rx_chunk_->refs() == 1 && rx_pos_ > 0) {
    // No view shares the chunk any more: slide the unparsed rest (less
    // than one frame) to the front and reuse it.
    std::memmove(rx_base_, rx_base_ + rx_pos_, rx_fill_ - rx_pos_);
    rx_fill_ -= rx_pos_;
    rx_pos_ = 0;
  }
  // End of the unit being parsed: the frame, or the length prefix.
  const uint64_t need =
      uint64_t{rx_pos_} + (rx_frame_len_ != 0 ? rx_frame_len_ : kPrefixLen);
  if (rx_chunk_ && need <= buffer::kChunkSize &&
      buffer::kChunkSize - rx_fill_ >= kMinReadSpace) {
    return true;
  }
  if (rx_chunk_ && need <= buffer::kChunkSize &&
      rx_fill_ < buffer::kChunkSize && rx_pos_ == 0) {
    return true;  // the whole chunk is one unfinished frame: keep filling
  }
  buffer::ChunkRef fresh = pool_.Allocate();
  if (!fresh) return false;
  uint8_t* base = fresh->mutable_data().data();
  const uint32_t rest = rx_fill_ - rx_pos_;
  if (rest > 0) {
    std::memcpy(base, rx_base_ + rx_pos_, rest);
    stream_stats_.rx_moved_bytes += rest;
  }
  rx_chunk_ = std::move(fresh);
  rx_base_ = base;
  rx_fill_ = rest;
  rx_pos_ = 0;
  return true;
}

bool UnixStreamEndpoint::Deliver(Instant now) {
  if (frames_pending_ == 0) return true;
  if (receiver_ == nullptr) {  // detached while frames were being cut
    stats_.rx_dropped += frames_pending_;
    stream_stats_.rx_no_receiver += frames_pending_;
    for (size_t i = 0; i < frames_pending_; ++i) frames_[i] = InboundFrame{};
    frames_pending_ = 0;
    return true;
  }
  const uint64_t generation = generation_;
  const size_t count = std::exchange(frames_pending_, 0);
  receiver_->DeliverFrames(std::span<InboundFrame>(frames_.data(), count), now);
  for (size_t i = 0; i < count; ++i) frames_[i] = InboundFrame{};
  // The receiver may have transmitted, failed, and dropped the connection.
  return generation == generation_;
}

bool UnixStreamEndpoint::ParseFrames(Instant now) {
  for (;;) {
    if (rx_frame_len_ == 0) {
      if (rx_fill_ - rx_pos_ < kPrefixLen) return true;
      const uint32_t len = wire::LoadBe32(rx_base_ + rx_pos_);
      if (len == 0 || len > kMaxFrameLen) {
        // No way to find the next frame boundary: give up on the stream,
        // after handing over the frames that came before.
        if (!Deliver(now)) return false;
        DropConnection(Disconnect::kBadLength);
        return false;
      }
      rx_pos_ += kPrefixLen;
      rx_frame_len_ = len;
    }
    if (rx_fill_ - rx_pos_ < rx_frame_len_) return true;
    const uint32_t start = rx_pos_;
    const uint32_t len = rx_frame_len_;
    rx_pos_ += len;
    rx_frame_len_ = 0;
    if (len < kMinFrameLen || len > max_frame_) {
      ++(len < kMinFrameLen ? stream_stats_.rx_runt
                            : stream_stats_.rx_oversize);
      ++stats_.rx_dropped;
      continue;
    }
    if (receiver_ == nullptr) {
      ++stream_stats_.rx_no_receiver;
      ++stats_.rx_dropped;
      continue;
    }
    // Frames from QEMU or passt carry complete checksums.
    frames_[frames_pending_++] =
        InboundFrame{buffer::PayloadView(rx_chunk_, start, len), false, false};
    ++stats_.rx_frames;
    stats_.rx_bytes += len;
    if (frames_pending_ == rx_batch_ && !Deliver(now)) return false;
  }
}

void UnixStreamEndpoint::PauseRx(Instant now) {
  ++stream_stats_.rx_no_buffer;
  ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, conn_.get(), nullptr);
  rx_paused_ = true;
  rx_retry_at_ = now + kRxRetryDelay;
}

void UnixStreamEndpoint::Poll(Instant now) {
  if (!rx_paused_ || now < rx_retry_at_ || !conn_.valid()) return;
  rx_paused_ = false;
  rx_retry_at_ = kNever;
  // Level-triggered: if data waited meanwhile, ReadFd() is readable again.
  if (!EpollAdd(epoll_.get(), conn_.get()).ok()) {
    DropConnection(Disconnect::kIoError);
  }
}

void UnixStreamEndpoint::OnReadable(Instant now) {
  if (listener_.valid()) AcceptPending();
  if (!conn_.valid() || rx_paused_) return;
  size_t delivered_before = stats_.rx_frames;
  for (int reads = 0; reads < kMaxReadsPerCall; ++reads) {
    if (!EnsureRxSpace()) {
      PauseRx(now);
      break;
    }
    ssize_t n;
    do {
      n = ::read(conn_.get(), rx_base_ + rx_fill_,
                 buffer::kChunkSize - rx_fill_);
      ++stats_.rx_syscalls;
    } while (n < 0 && errno == EINTR);
    if (n == 0) {
      if (!Deliver(now)) return;
      DropConnection(Disconnect::kPeerClosed);
      return;
    }
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      if (!Deliver(now)) return;
      DropConnection(Disconnect::kIoError);
      return;
    }
    rx_fill_ += static_cast<uint32_t>(n);
    if (!ParseFrames(now)) return;
    if (stats_.rx_frames - delivered_before >= rx_batch_) {
      ++stats_.rx_batch_limit_hits;
      break;
    }
  }
  Deliver(now);
}

// --------------------------------------------------------------- transmit

void UnixStreamEndpoint::DropAll(buffer::PacketChain& chain) {
  stream_stats_.tx_not_connected += chain.size();
  stats_.tx_dropped += chain.size();
  chain.Clear();
}

void UnixStreamEndpoint::SaveTail(const buffer::PacketBuffer& p,
                                  const uint8_t* prefix, size_t written) {
  // Copies the frame's bytes from offset `written` (counting the prefix)
  // to the end into tx_tail_.
  size_t skip = written;
  size_t out = 0;
  auto copy = [&](std::span<const uint8_t> piece) {
    if (skip >= piece.size()) {
      skip -= piece.size();
      return;
    }
    std::memcpy(tx_tail_.get() + out, piece.data() + skip, piece.size() - skip);
    out += piece.size() - skip;
    skip = 0;
  };
  copy(std::span<const uint8_t>(prefix, kPrefixLen));
  copy(p.headers().data());
  for (const buffer::PayloadView& v : p.payload()) copy(v.bytes());
  tx_tail_len_ = out;
  tx_tail_off_ = 0;
  tx_tail_packet_ = &p;
  tx_tail_packet_size_ = p.size();
}

bool UnixStreamEndpoint::FlushTail(buffer::PacketChain& chain, size_t& sent) {
  while (tx_tail_off_ < tx_tail_len_) {
    ssize_t n;
    do {
      n = ::send(conn_.get(), tx_tail_.get() + tx_tail_off_,
                 tx_tail_len_ - tx_tail_off_, MSG_NOSIGNAL | MSG_DONTWAIT);
      ++stats_.tx_syscalls;
    } while (n < 0 && errno == EINTR);
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return false;
      DropConnection(Disconnect::kIoError);
      return false;
    }
    tx_tail_off_ += static_cast<size_t>(n);
  }
  ++stats_.tx_frames;
  stats_.tx_bytes += tx_tail_packet_size_;
  // Normally the caller kept the packet at the front of its chain, as the
  // LinkEndpoint contract asks; if it did not, there is nothing to pop.
  if (!chain.empty() && &chain.front() == tx_tail_packet_ &&
      chain.front().size() == tx_tail_packet_size_) {
    chain.PopFront();
    ++sent;
  }
  tx_tail_len_ = tx_tail_off_ = 0;
  tx_tail_packet_ = nullptr;
  return true;
}

bool UnixStreamEndpoint::Sendable(const buffer::PacketBuffer& p) const {
  return p.size() <= kMaxFrameLen && FrameFitsMtu(p, caps_.mtu);
}

size_t UnixStreamEndpoint::Transmit(buffer::PacketChain& chain, Instant now) {
  size_t sent = 0;
  if (conn_.valid() && tx_tail_len_ > 0 && !FlushTail(chain, sent)) {
    if (!conn_.valid()) DropAll(chain);
    return sent;
  }
  while (!chain.empty()) {
    if (!conn_.valid()) {
      DropAll(chain);
      break;
    }
    const size_t front_size = chain.front().size();
    if (!Sendable(chain.front())) {
      ++(front_size < kMinFrameLen ? stream_stats_.tx_runt
                                   : stream_stats_.tx_oversize);
      ++stats_.tx_dropped;
      chain.PopFront();
      continue;
    }
    // One sendmsg for as many good packets as the iovec limit allows.
    size_t packets = 0;
    size_t iovcnt = 0;
    size_t bytes = 0;
    for (const buffer::PacketBuffer& p : chain) {
      if (packets == kMaxTxPackets || !Sendable(p)) break;
      wire::StoreBe32(tx_prefix_[packets], static_cast<uint32_t>(p.size()));
      tx_iov_[iovcnt++] = iovec{tx_prefix_[packets], kPrefixLen};
      iovcnt +=
          p.ToIovecs(std::span<iovec>(tx_iov_ + iovcnt, kIovPerPacket - 1));
      bytes += kPrefixLen + p.size();
      ++packets;
    }
    msghdr msg;
    std::memset(&msg, 0, sizeof(msg));
    msg.msg_iov = tx_iov_;
    msg.msg_iovlen = iovcnt;
    ssize_t n;
    do {
      n = ::sendmsg(conn_.get(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
      ++stats_.tx_syscalls;
    } while (n < 0 && errno == EINTR);
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      DropConnection(Disconnect::kIoError);  // EPIPE, ECONNRESET, ...
      DropAll(chain);
      break;
    }
    // Pop the frames that went out whole; keep the rest of a split one.
    size_t done = static_cast<size_t>(n);
    for (size_t i = 0; i < packets && done > 0; ++i) {
      const buffer::PacketBuffer& p = chain.front();
      const size_t frame = kPrefixLen + p.size();
      if (done < frame) {
        ++stream_stats_.tx_partial_writes;
        SaveTail(p, tx_prefix_[i], done);
        done = 0;
        break;
      }
      done -= frame;
      ++stats_.tx_frames;
      stats_.tx_bytes += p.size();
      chain.PopFront();
      ++sent;
    }
    // A short write means the socket buffer is full: wait for WriteFd().
    // A split frame's rest goes out first on the next call.
    if (static_cast<size_t>(n) < bytes) break;
  }
  return sent;
}

}  // namespace netstack::link
