#include "link/vhost_user_endpoint.h"

#include <fcntl.h>
#include <sys/time.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "link/gso.h"

namespace netstack::link {
namespace {

using vhost_user::ChainError;
using vhost_user::Device;
using vhost_user::kRxQueue;
using vhost_user::kTxQueue;
using vhost_user::Segment;
using vhost_user::Virtqueue;
namespace feature = vhost_user::feature;

constexpr uint32_t kMinMtu = 68;
constexpr uint32_t kMaxMtu = 65521;
constexpr uint32_t kRxPad = 2;  // IP header 4-byte aligned in the slot
// How long a message's rest may take to arrive once it began, and a reply
// to leave.
constexpr int kIoTimeoutMs = 1000;
// Most control messages handled per OnReadable().
constexpr int kMessagesPerTurn = 64;
// Most chains one frame to the guest may span (MRG_RXBUF).
constexpr size_t kMaxHeads = 256;

// epoll tags.
constexpr uint64_t kTagListener = 1;
constexpr uint64_t kTagConn = 2;
constexpr uint64_t kTagKick = 3;  // + queue index

absl::Status SetNonBlocking(int fd) {
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) {
    return ErrnoStatus(errno, "fcntl O_NONBLOCK");
  }
  return absl::OkStatus();
}

absl::Status EpollCtl(int ep, int op, int fd, uint64_t tag) {
  epoll_event ev;
  std::memset(&ev, 0, sizeof(ev));
  ev.events = EPOLLIN;
  ev.data.u64 = tag;
  if (::epoll_ctl(ep, op, fd, &ev) != 0) return ErrnoStatus(errno, "epoll_ctl");
  return absl::OkStatus();
}

struct UnixAddr {
  sockaddr_un addr;
  socklen_t len;
};

absl::StatusOr<UnixAddr> MakeAddr(const std::string& path) {
  UnixAddr a;
  std::memset(&a.addr, 0, sizeof(a.addr));
  a.addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(a.addr.sun_path) ||
      path.find('\0') != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad vhost-user socket path '", path, "'"));
  }
  const bool abstract = path[0] == '@';
  std::memcpy(a.addr.sun_path, path.data(), path.size());
  if (abstract) a.addr.sun_path[0] = '\0';
  a.len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) +
                                 path.size() + (abstract ? 0 : 1));
  return a;
}

// A socket file nobody listens on (a crashed run's) is removed; a live
// one, or anything that is not a socket, is an error.
absl::Status RemoveStale(const std::string& path, const UnixAddr& a) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) return absl::OkStatus();
  if (!S_ISSOCK(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat("'", path, "' exists and is not a socket"));
  }
  UniqueFd probe(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!probe.valid()) return ErrnoStatus(errno, "socket");
  if (::connect(probe.get(), reinterpret_cast<const sockaddr*>(&a.addr),
                a.len) == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("'", path, "' is in use: another process listens on it"));
  }
  if (errno == ECONNREFUSED && ::unlink(path.c_str()) != 0 && errno != ENOENT) {
    return ErrnoStatus(errno, absl::StrCat("unlink stale '", path, "'"));
  }
  return absl::OkStatus();
}

std::optional<uid_t> PeerUid(int fd) {
  ucred cred{0, static_cast<uid_t>(-1), static_cast<gid_t>(-1)};
  socklen_t len = sizeof(cred);
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
    return std::nullopt;
  }
  return cred.uid;
}

// Reads exactly `len` bytes from the connection, which is blocking with
// a receive timeout (SO_RCVTIMEO, kIoTimeoutMs): false on EOF, error or
// timeout. (No poll(2): netstackd's seccomp filter allows recvfrom.)
bool ReadFull(int fd, uint8_t* buf, size_t len) {
  size_t got = 0;
  while (got < len) {
    const ssize_t n = ::recv(fd, buf + got, len - got, 0);
    if (n > 0) {
      got += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    return false;
  }
  return true;
}

bool WriteFull(int fd, const uint8_t* buf, size_t len) {
  size_t put = 0;
  while (put < len) {
    const ssize_t n = ::send(fd, buf + put, len - put, MSG_NOSIGNAL);
    if (n > 0) {
      put += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    return false;
  }
  return true;
}

// Writes bytes sequentially over a list of guest buffers.
class SegmentWriter {
 public:
  SegmentWriter(Segment* segs, size_t n) : segs_(segs), n_(n) {}
  // The caller made sure the segments hold everything written.
  void Write(const uint8_t* p, size_t len) {
    while (len > 0 && i_ < n_) {
      const size_t room = segs_[i_].len - off_;
      const size_t take = std::min(room, len);
      std::memcpy(segs_[i_].data + off_, p, take);
      p += take;
      len -= take;
      off_ += take;
      if (off_ == segs_[i_].len) {
        ++i_;
        off_ = 0;
      }
    }
  }

 private:
  Segment* segs_;
  size_t n_;
  size_t i_ = 0;
  size_t off_ = 0;
};

// Copies bytes [from, from + len) of the concatenated segments to `out`.
void ReadSegments(const Segment* segs, size_t n, size_t from, uint8_t* out,
                  size_t len) {
  for (size_t i = 0; i < n && len > 0; ++i) {
    if (from >= segs[i].len) {
      from -= segs[i].len;
      continue;
    }
    const size_t take = std::min<size_t>(segs[i].len - from, len);
    std::memcpy(out, segs[i].data + from, take);
    out += take;
    len -= take;
    from = 0;
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<VhostUserEndpoint>> VhostUserEndpoint::Listen(
    const VhostUserOptions& options, buffer::ChunkPool& chunks,
    buffer::PacketPool& packets) {
  if (options.mtu < kMinMtu || options.mtu > kMaxMtu) {
    return absl::InvalidArgumentError(
        absl::StrCat("MTU ", options.mtu, " is outside ", kMinMtu, "..", kMaxMtu));
  }
  if (options.gso_max_size > 65535 || options.rx_batch == 0 ||
      options.rx_batch > 1024) {
    return absl::InvalidArgumentError(
        "gso_max_size must be 0..65535 and rx_batch 1..1024");
  }
  absl::StatusOr<UnixAddr> addr = MakeAddr(options.path);
  if (!addr.ok()) return addr.status();
  DirEntryRef socket_file;
  if (options.path[0] != '@') {
    if (absl::Status s = RemoveStale(options.path, *addr); !s.ok()) return s;
    absl::StatusOr<DirEntryRef> e = DirEntryRef::Of(options.path);
    if (!e.ok()) return e.status();
    socket_file = *std::move(e);
  }
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return ErrnoStatus(errno, "socket(AF_UNIX)");
  // The mode is set at bind through the umask: no window in which another
  // user could connect.
  const mode_t mode = options.allow_uid ? 0666 : 0600;
  const mode_t old_umask = ::umask(~mode & 0777);
  const int bound = ::bind(fd.get(), reinterpret_cast<const sockaddr*>(&addr->addr),
                           addr->len);
  const int bind_errno = errno;
  ::umask(old_umask);
  if (bound != 0) {
    return ErrnoStatus(bind_errno, absl::StrCat("bind '", options.path, "'"));
  }
  if (::listen(fd.get(), 4) != 0) {
    return ErrnoStatus(errno, absl::StrCat("listen on '", options.path, "'"));
  }
  if (absl::Status s = SetNonBlocking(fd.get()); !s.ok()) return s;
  UniqueFd ep(::epoll_create1(EPOLL_CLOEXEC));
  if (!ep.valid()) return ErrnoStatus(errno, "epoll_create1");
  if (absl::Status s = EpollCtl(ep.get(), EPOLL_CTL_ADD, fd.get(), kTagListener);
      !s.ok()) {
    return s;
  }
  std::unique_ptr<VhostUserEndpoint> e(new VhostUserEndpoint(
      std::move(ep), std::move(fd), options, chunks, packets));
  e->socket_file_ = std::move(socket_file);
  return e;
}

absl::StatusOr<std::unique_ptr<VhostUserEndpoint>>
VhostUserEndpoint::FromConnectedFd(int fd, const VhostUserOptions& options,
                                   buffer::ChunkPool& chunks,
                                   buffer::PacketPool& packets) {
  UniqueFd conn(fd);
  if (options.mtu < kMinMtu || options.mtu > kMaxMtu ||
      options.gso_max_size > 65535 || options.rx_batch == 0 ||
      options.rx_batch > 1024) {
    return absl::InvalidArgumentError("bad vhost-user options");
  }
  UniqueFd ep(::epoll_create1(EPOLL_CLOEXEC));
  if (!ep.valid()) return ErrnoStatus(errno, "epoll_create1");
  std::unique_ptr<VhostUserEndpoint> e(new VhostUserEndpoint(
      std::move(ep), UniqueFd(), options, chunks, packets));
  if (absl::Status s = e->Adopt(std::move(conn)); !s.ok()) return s;
  return e;
}

VhostUserEndpoint::VhostUserEndpoint(UniqueFd epoll, UniqueFd listener,
                                     const VhostUserOptions& options,
                                     buffer::ChunkPool& chunks,
                                     buffer::PacketPool& packets)
    : packets_(packets),
      epoll_(std::move(epoll)),
      listener_(std::move(listener)),
      path_(options.path),
      allow_uid_(options.allow_uid),
      own_uid_(::geteuid()),
      caps_{.mtu = options.mtu,
            .gso_max_size = options.gso_max_size,
            .tx_checksum_offload = false,
            .vnet_hdr = false,
            .mac = options.mac ? *options.mac
                               : DeriveLocalMac(absl::StrCat("vhost-user:",
                                                             options.path))},
      max_plain_frame_(options.mtu + kEthernetOverhead),
      max_frame_(static_cast<uint32_t>(buffer::kChunkSize) - kRxPad),
      rx_batch_(options.rx_batch),
      small_slots_(chunks, std::min<uint32_t>(buffer::kChunkSize,
                                              kRxPad + options.mtu +
                                                  kEthernetOverhead),
                   options.rx_batch),
      big_slots_(chunks, buffer::kChunkSize, options.rx_batch),
      frames_(options.rx_batch),
      segs_(new Segment[Virtqueue::kMaxSegments]),
      heads_(new Head[kMaxHeads]) {}

VhostUserEndpoint::~VhostUserEndpoint() {
  if (socket_file_.valid()) (void)socket_file_.Unlink();
}

std::string VhostUserEndpoint::Name() const {
  return absl::StrCat("vhost-user:", path_);
}

absl::Status VhostUserEndpoint::Adopt(UniqueFd conn) {
  // Blocking, with timeouts: a message is read whole once its first bytes
  // are there (the first read of each is MSG_DONTWAIT).
  const int flags = ::fcntl(conn.get(), F_GETFL);
  if (flags < 0 || ::fcntl(conn.get(), F_SETFL, flags & ~O_NONBLOCK) < 0) {
    return ErrnoStatus(errno, "fcntl");
  }
  const timeval tv{kIoTimeoutMs / 1000, (kIoTimeoutMs % 1000) * 1000};
  if (::setsockopt(conn.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) != 0 ||
      ::setsockopt(conn.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) != 0) {
    return ErrnoStatus(errno, "setsockopt SO_RCVTIMEO");
  }
  if (absl::Status s = EpollCtl(epoll_.get(), EPOLL_CTL_ADD, conn.get(), kTagConn);
      !s.ok()) {
    return s;
  }
  conn_ = std::move(conn);
  ++vstats_.connections;
  return absl::OkStatus();
}

void VhostUserEndpoint::Accept() {
  for (;;) {
    UniqueFd c(::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!c.valid()) return;
    const std::optional<uid_t> uid = PeerUid(c.get());
    if (!uid || (*uid != own_uid_ && *uid != 0 && !(allow_uid_ && *uid == *allow_uid_))) {
      ++vstats_.refused_peers;
      continue;  // closed
    }
    if (conn_.valid()) {
      ++vstats_.rejected_peers;
      continue;
    }
    if (!Adopt(std::move(c)).ok()) return;
  }
}

void VhostUserEndpoint::Disconnect(bool bad_stream) {
  if (!conn_.valid()) return;
  (void)::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, conn_.get(), nullptr);
  conn_.reset();
  device_.Reset();  // unmaps the memory, closes kick/call/err fds
  SyncKicks();
  ++vstats_.disconnects;
  if (bad_stream) ++vstats_.bad_streams;
  from_guest_more_ = false;
  to_guest_waiting_ = false;
  tx_live_ = false;
  broken_counted_[0] = broken_counted_[1] = false;
}

void VhostUserEndpoint::ReadMessages() {
  for (int i = 0; i < kMessagesPerTurn && conn_.valid(); ++i) {
    if (!ReadOneMessage()) return;
  }
}

bool VhostUserEndpoint::ReadOneMessage() {
  uint8_t hdr[vhost_user::kHeaderSize];
  alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof(int) * vhost_user::kMaxFds)];
  iovec iov{hdr, sizeof(hdr)};
  msghdr m;
  std::memset(&m, 0, sizeof(m));
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  m.msg_control = cbuf;
  m.msg_controllen = sizeof(cbuf);
  const ssize_t n = ::recvmsg(conn_.get(), &m, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
    return false;
  }
  // Every fd that came is owned here at once, so none leaks whatever
  // happens next.
  UniqueFd fds[vhost_user::kMaxFds];
  size_t nfds = 0;
  for (cmsghdr* c = CMSG_FIRSTHDR(&m); c != nullptr; c = CMSG_NXTHDR(&m, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t k = 0; k < count; ++k) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(c) + k * sizeof(int), sizeof(int));
      if (nfds < vhost_user::kMaxFds) {
        fds[nfds++].reset(fd);
      } else {
        ::close(fd);
      }
    }
  }
  if (n <= 0) {
    Disconnect(n < 0);
    return false;
  }
  if (static_cast<size_t>(n) < sizeof(hdr) &&
      !ReadFull(conn_.get(), hdr + n, sizeof(hdr) - static_cast<size_t>(n))) {
    Disconnect(true);
    return false;
  }
  uint32_t request, flags, size;
  std::memcpy(&request, hdr, 4);
  std::memcpy(&flags, hdr + 4, 4);
  std::memcpy(&size, hdr + 8, 4);
  uint8_t payload[vhost_user::kMaxPayload];
  // More fds than any message carries (the kernel cut the rest), or a
  // payload larger than any request's: the stream cannot be trusted.
  if ((m.msg_flags & MSG_CTRUNC) != 0 || size > sizeof(payload) ||
      !ReadFull(conn_.get(), payload, size)) {
    Disconnect(true);
    return false;
  }
  vhost_user::Reply reply;
  device_.Handle(request, flags, std::span<const uint8_t>(payload, size),
                 std::span<UniqueFd>(fds, nfds), &reply);
  SyncKicks();
  // A TX ring that (re)starts may hold chains posted while it was stopped,
  // whose kick went to the old fd: look once (from Poll) without a kick.
  const bool tx_live = device_.Live(kTxQueue);
  if (tx_live && !tx_live_) from_guest_more_ = true;
  tx_live_ = tx_live;
  if (reply.send) {
    uint8_t out[vhost_user::kHeaderSize + sizeof(reply.payload)];
    const uint32_t rflags = vhost_user::kVersion | vhost_user::kFlagReply;
    std::memcpy(out, &reply.request, 4);
    std::memcpy(out + 4, &rflags, 4);
    std::memcpy(out + 8, &reply.size, 4);
    std::memcpy(out + vhost_user::kHeaderSize, reply.payload, reply.size);
    if (!WriteFull(conn_.get(), out, vhost_user::kHeaderSize + reply.size)) {
      Disconnect(false);
      return false;
    }
  }
  return true;
}

void VhostUserEndpoint::SyncKicks() {
  for (int q = 0; q < vhost_user::kQueues; ++q) {
    if (device_.kick_generation(q) == kick_gen_[q]) continue;
    kick_gen_[q] = device_.kick_generation(q);
    // epoll watches a file description, not an fd number, and forgets it
    // only when every fd of it is closed; QEMU keeps its own. So epoll
    // gets our own dup, taken out again while it is still open: a kick
    // fd the device replaced or closed must not stay registered (a kick
    // there would wake us forever, never drained).
    if (kick_dup_[q].valid()) {
      (void)::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, kick_dup_[q].get(),
                        nullptr);
      kick_dup_[q].reset();
    }
    const int fd = device_.kick_fd(q);
    if (fd < 0) continue;
    UniqueFd dup(::fcntl(fd, F_DUPFD_CLOEXEC, 0));
    if (!dup.valid()) continue;
    // QEMU's eventfds are non-blocking already; make sure, since a read
    // that blocked would stop the loop.
    (void)SetNonBlocking(dup.get());
    if (EpollCtl(epoll_.get(), EPOLL_CTL_ADD, dup.get(),
                 kTagKick + static_cast<uint64_t>(q))
            .ok()) {
      kick_dup_[q] = std::move(dup);
    }
  }
}

void VhostUserEndpoint::DrainKick(int q) {
  const int fd = kick_dup_[q].get();
  if (fd < 0) return;
  uint64_t v;
  if (::read(fd, &v, sizeof(v)) == sizeof(v)) ++vstats_.kicks;
}

void VhostUserEndpoint::Signal(int q) {
  const int fd = device_.call_fd(q);
  if (fd < 0) return;
  const uint64_t one = 1;
  if (::write(fd, &one, sizeof(one)) == sizeof(one)) ++vstats_.calls;
}

void VhostUserEndpoint::OnReadable(Instant now) {
  epoll_event ev[8];
  const int n = ::epoll_wait(epoll_.get(), ev, 8, 0);
  for (int i = 0; i < n; ++i) {
    const uint64_t tag = ev[i].data.u64;
    if (tag == kTagListener) {
      Accept();
    } else if (tag == kTagConn) {
      ReadMessages();
    } else if (tag == kTagKick + kTxQueue) {
      DrainKick(kTxQueue);
      FromGuest(now);
    } else if (tag == kTagKick + kRxQueue) {
      DrainKick(kRxQueue);
      if (to_guest_waiting_) {
        // The guest posted receive buffers: an empty batch makes the stack
        // flush what it holds for us now rather than at its retry timer.
        to_guest_waiting_ = false;
        if (receiver_ != nullptr) receiver_->DeliverFrames({}, now);
      }
    }
  }
}

Instant VhostUserEndpoint::NextDeadline() const {
  return from_guest_more_ ? absl::InfinitePast() : kNever;
}

void VhostUserEndpoint::Poll(Instant now) {
  if (from_guest_more_) FromGuest(now);
}

void VhostUserEndpoint::FromGuest(Instant now) {
  from_guest_more_ = false;
  if (!device_.Started(kTxQueue)) return;
  // A started but disabled ring's chains are taken and discarded
  // (vhost-user.rst): the guest gets its buffers back, the stack nothing.
  const bool discard = !device_.Live(kTxQueue);
  Virtqueue& vq = device_.queue(kTxQueue);
  const size_t hdr_len = device_.vnet_hdr_len();
  uint8_t hdr[kVnetHdrMrgLen];
  size_t kept = 0;
  size_t small = 0;
  size_t big = 0;
  for (size_t budget = rx_batch_; budget > 0 && vq.Pending() > 0; --budget) {
    size_t nsegs = 0;
    uint64_t bytes = 0;
    uint16_t head = 0;
    const ChainError e =
        vq.Pop(false, hdr_len + max_frame_, segs_.get(), &nsegs, &bytes, &head);
    if (e != ChainError::kOk) {
      ++vstats_.from_guest_chain_refused[static_cast<size_t>(e)];
      ++stats_.rx_dropped;
      continue;
    }
    vq.PushUsed(head, 0);  // the copy below is all we keep of it
    if (discard) {
      ++vstats_.from_guest_disabled;
      ++stats_.rx_dropped;
      continue;
    }
    if (bytes < hdr_len + kMinFrameLen) {
      ++vstats_.from_guest_runt;
      ++stats_.rx_dropped;
      continue;
    }
    const uint32_t len = static_cast<uint32_t>(bytes - hdr_len);
    const bool is_small = len + kRxPad <= small_slots_.slot_size();
    RxSlots& slots = is_small ? small_slots_ : big_slots_;
    size_t& used = is_small ? small : big;
    if (slots.Prepare(used + 1) <= used) {
      ++vstats_.from_guest_no_buffer;
      ++stats_.rx_dropped;
      continue;
    }
    uint8_t* dst = slots.Slot(used) + kRxPad;
    ReadSegments(segs_.get(), nsegs, 0, hdr, hdr_len);
    ReadSegments(segs_.get(), nsegs, hdr_len, dst, len);
    // Checked on our copy: the guest may rewrite its buffer meanwhile.
    const VnetRxVerdict v = ValidateVnetRx(std::span<const uint8_t>(hdr, hdr_len),
                                           std::span<const uint8_t>(dst, len),
                                           caps_.mtu);
    if (v != VnetRxVerdict::kOk) {
      ++vstats_.from_guest_vnet_refused[static_cast<size_t>(v)];
      ++stats_.rx_dropped;
      continue;
    }
    if (receiver_ == nullptr) {
      ++vstats_.from_guest_no_receiver;
      ++stats_.rx_dropped;
      continue;
    }
    const VnetRxInfo info = ParseVnetHeader(hdr);
    vstats_.from_guest_gso += info.gso;
    InboundFrame& f = frames_[kept++];
    f = InboundFrame{};
    f.frame = slots.View(used++, kRxPad, len);
    f.checksum_partial = info.checksum_partial;
    ++stats_.rx_frames;
    stats_.rx_bytes += len;
  }
  if (vq.FlushUsed()) Signal(kTxQueue);
  vq.EnableNotify();
  // Re-read after asking for kicks: a chain posted in between would get
  // no kick.
  if (vq.Pending() > 0) {
    from_guest_more_ = true;
    ++stats_.rx_batch_limit_hits;
  }
  if (vq.broken() && !broken_counted_[kTxQueue]) {
    broken_counted_[kTxQueue] = true;
    ++vstats_.queue_broken;
  }
  small_slots_.Consume(small);
  big_slots_.Consume(big);
  ++stats_.rx_syscalls;
  if (kept > 0) {
    receiver_->DeliverFrames(std::span<InboundFrame>(frames_.data(), kept), now);
    // Drop our references, so the chunks recycle once the stack is done.
    for (size_t i = 0; i < kept; ++i) frames_[i] = InboundFrame{};
  }
}

bool VhostUserEndpoint::GuestTakesGso(const buffer::PacketBuffer& p) const {
  if (!device_.Has(feature::kGuestCsum)) return false;
  return p.gso().type == buffer::GsoType::kTcpV4
             ? device_.Has(feature::kGuestTso4)
             : device_.Has(feature::kGuestTso6);
}

VhostUserEndpoint::PutResult VhostUserEndpoint::ToGuest(
    const buffer::PacketBuffer& p) {
  Virtqueue& vq = device_.queue(kRxQueue);
  const size_t hdr_len = device_.vnet_hdr_len();
  uint8_t vh[kVnetHdrMrgLen] = {};
  if (p.is_gso()) {
    if (FillVnetHeader(p, std::span<uint8_t, kVnetHdrLen>(vh, kVnetHdrLen)) !=
        VnetTxKind::kGso) {
      ++vstats_.to_guest_malformed;
      return PutResult::kDropped;
    }
    if (!device_.Has(feature::kGuestEcn)) vh[1] &= ~vnet::kGsoEcn;
  } else if (p.size() > max_plain_frame_) {
    ++vstats_.to_guest_oversize;
    return PutResult::kDropped;
  }
  const uint64_t need = hdr_len + p.size();
  const bool mrg = device_.Has(feature::kMrgRxbuf);
  size_t nsegs = 0;
  uint64_t bytes = 0;
  uint16_t nheads = 0;
  auto give_back_empty = [&] {
    for (uint16_t i = 0; i < nheads; ++i) vq.PushUsed(heads_[i].id, 0);
  };
  while (bytes < need) {
    if (vq.Pending() == 0) {
      vq.Unpop(nheads);
      no_room_had_ = nheads;
      return PutResult::kNoRoom;
    }
    if (nheads == kMaxHeads) {
      give_back_empty();
      ++vstats_.to_guest_too_small;
      return PutResult::kDropped;
    }
    const uint64_t before = bytes;
    uint16_t head = 0;
    const ChainError e =
        vq.Pop(true, uint64_t{1} << 32, segs_.get(), &nsegs, &bytes, &head);
    if (e != ChainError::kOk) {
      ++vstats_.to_guest_chain_refused[static_cast<size_t>(e)];
      give_back_empty();
      return PutResult::kDropped;
    }
    heads_[nheads++] = Head{head, static_cast<uint32_t>(bytes - before)};
    if (!mrg && bytes < need) {
      // One chain must hold the frame; leave the buffer for a smaller one.
      vq.Unpop(1);
      ++vstats_.to_guest_too_small;
      return PutResult::kDropped;
    }
  }
  if (hdr_len == kVnetHdrMrgLen) vnet::StoreLe16(vh + 10, nheads);
  SegmentWriter w(segs_.get(), nsegs);
  w.Write(vh, hdr_len);
  const std::span<const uint8_t> h = p.headers().data();
  w.Write(h.data(), h.size());
  for (const buffer::PayloadView& v : p.payload()) {
    w.Write(v.bytes().data(), v.size());
  }
  uint64_t left = need;
  for (uint16_t i = 0; i < nheads; ++i) {
    const uint32_t len =
        static_cast<uint32_t>(std::min<uint64_t>(heads_[i].capacity, left));
    vq.PushUsed(heads_[i].id, len);
    left -= len;
  }
  vstats_.to_guest_merged += nheads > 1;
  vstats_.to_guest_gso += p.is_gso();
  return PutResult::kSent;
}

size_t VhostUserEndpoint::Transmit(buffer::PacketChain& chain, Instant) {
  if (!device_.Live(kRxQueue)) {
    vstats_.to_guest_not_ready += chain.size();
    stats_.tx_dropped += chain.size();
    chain.Clear();
    return 0;
  }
  Virtqueue& vq = device_.queue(kRxQueue);
  size_t sent = 0;
  while (!chain.empty()) {
    buffer::PacketBuffer& p = chain.front();
    if (p.is_gso() && !GuestTakesGso(p)) {
      // Split into wire packets that take the super-segment's place at the
      // front of the chain.
      buffer::PacketChain parts;
      const GsoSplitStatus s =
          SplitGso(chain.PopFront(), packets_, parts, caps_.mtu);
      if (s != GsoSplitStatus::kSplit) {
        ++vstats_.to_guest_split_failed;
        ++stats_.tx_dropped;
        continue;
      }
      ++vstats_.to_guest_split;
      parts.Append(std::move(chain));
      chain = std::move(parts);
      continue;
    }
    const PutResult r = ToGuest(p);
    if (r == PutResult::kNoRoom) {
      vq.EnableNotify();
      // Chains posted since (beyond the ones just given back) may do.
      if (vq.Pending() > no_room_had_) continue;
      ++vstats_.to_guest_waits;
      to_guest_waiting_ = true;
      break;
    }
    if (r == PutResult::kSent) {
      ++sent;
      ++stats_.tx_frames;
      stats_.tx_bytes += p.size();
    } else {
      ++stats_.tx_dropped;
    }
    (void)chain.PopFront();
  }
  if (vq.broken() && !broken_counted_[kRxQueue]) {
    broken_counted_[kRxQueue] = true;
    ++vstats_.queue_broken;
  }
  if (vq.FlushUsed()) Signal(kRxQueue);
  ++stats_.tx_syscalls;
  return sent;
}

std::string FormatVhostUserCounters(const VhostUserEndpoint& e) {
  const VhostUserStats& v = e.vhost_stats();
  const vhost_user::DeviceStats& d = e.device_stats();
  std::string out;
  auto line = [&](const char* name, uint64_t n) {
    absl::StrAppend(&out, "link.vhost_user.", name, " ", n, "\n");
  };
  line("connections", v.connections);
  line("rejected_peers", v.rejected_peers);
  line("refused_peers", v.refused_peers);
  line("disconnects", v.disconnects);
  line("bad_streams", v.bad_streams);
  line("messages", d.messages);
  line("mem_tables", d.mem_tables);
  line("ring_starts", d.ring_starts);
  line("ring_stops", d.ring_stops);
  line("kicks", v.kicks);
  line("calls", v.calls);
  line("queue_broken", v.queue_broken);
  line("from_guest_runt", v.from_guest_runt);
  line("from_guest_no_buffer", v.from_guest_no_buffer);
  line("from_guest_gso", v.from_guest_gso);
  line("from_guest_disabled", v.from_guest_disabled);
  line("to_guest_not_ready", v.to_guest_not_ready);
  line("to_guest_waits", v.to_guest_waits);
  line("to_guest_too_small", v.to_guest_too_small);
  line("to_guest_oversize", v.to_guest_oversize);
  line("to_guest_malformed", v.to_guest_malformed);
  line("to_guest_gso", v.to_guest_gso);
  line("to_guest_merged", v.to_guest_merged);
  line("to_guest_split", v.to_guest_split);
  line("to_guest_split_failed", v.to_guest_split_failed);
  // Per reason, only the ones seen.
  for (size_t i = 0; i < vhost_user::kRefusalCount; ++i) {
    if (d.refused[i] == 0) continue;
    absl::StrAppend(&out, "link.vhost_user.refused_messages.",
                    vhost_user::RefusalName(static_cast<vhost_user::Refusal>(i)),
                    " ", d.refused[i], "\n");
  }
  for (size_t i = 0; i < vhost_user::kChainErrorCount; ++i) {
    const char* name =
        vhost_user::ChainErrorName(static_cast<vhost_user::ChainError>(i));
    if (v.from_guest_chain_refused[i] != 0) {
      absl::StrAppend(&out, "link.vhost_user.from_guest_chain_refused.", name,
                      " ", v.from_guest_chain_refused[i], "\n");
    }
    if (v.to_guest_chain_refused[i] != 0) {
      absl::StrAppend(&out, "link.vhost_user.to_guest_chain_refused.", name,
                      " ", v.to_guest_chain_refused[i], "\n");
    }
  }
  for (size_t i = 0; i < kVnetRxVerdictCount; ++i) {
    if (v.from_guest_vnet_refused[i] == 0) continue;
    absl::StrAppend(&out, "link.vhost_user.from_guest_vnet_refused.",
                    VnetRxVerdictName(static_cast<VnetRxVerdict>(i)), " ",
                    v.from_guest_vnet_refused[i], "\n");
  }
  return out;
}

}  // namespace netstack::link
