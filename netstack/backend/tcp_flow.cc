#include "netstack/backend/tcp_flow.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "netstack/backend/udp_host_socket.h"
#include "netstack/transport/errors.h"
#include "netstack/transport/notifier.h"

namespace netstack::backend {
namespace {

namespace ev = transport::event;

// One sockaddr conversion for the whole backend (udp_host_socket.h).
socklen_t HostSockaddr(const transport::SocketAddress& a, sockaddr_storage& ss) {
  return ToSockaddr(a, ss);
}

}  // namespace

TcpFlow::TcpFlow(Backend& backend, const transport::FourTuple& tuple)
    : backend_(backend), tuple_(tuple) {}

TcpFlow::~TcpFlow() {
  if (inbound_counts_) --inbound_counts_->active;
  if (phase_ != Phase::kEnded) {
    // The backend is going away with the flow live.
    if (phase_ == Phase::kConnecting || phase_ == Phase::kConnectDone) {
      (void)backend_.tcp_.RefuseHeld(tuple_, tcp::HeldSynRefusal::kReset,
                                     backend_.loop_.Now());
    }
    End(FlowEnd::kShutdown, /*host_abortive=*/true, /*guest_reset=*/true);
  }
  CloseHost(true);
}

void TcpFlow::Start(const transport::SocketAddress& host, bool egress,
                    Instant now) {
  egress_ = egress;
  host_ = host;
  started_ = now;
  const int family = host.ip.is_v4() ? AF_INET : AF_INET6;
  fd_ = socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd_ < 0) return ConnectDone(errno);
  ++backend_.counters_.tcp_host_fds_open;
  ++backend_.counters_.tcp_flows_opened;
  if (family == AF_INET6) {
    // An AF_INET6 socket speaks IPv4 to a mapped address (::ffff:127.0.0.1
    // is the host's loopback): never, whatever HostDestination let by.
    const int on = 1;
    if (setsockopt(fd_, IPPROTO_IPV6, IPV6_V6ONLY, &on, sizeof(on)) != 0) {
      return ConnectDone(errno);
    }
  }
  const BackendPolicy& p = backend_.config_.policy;
  const bool loopback = host.ip.is_v4() ? host.ip.v4().bytes[0] == 127
                                        : host.ip == transport::IpAddress(
                                                         *wire::Ipv6Address::Parse("::1"));
  std::optional<transport::IpAddress> bind_to;
  if (!loopback && host.ip.is_v4() && p.outbound_bind4) bind_to = *p.outbound_bind4;
  if (!loopback && host.ip.is_v6() && p.outbound_bind6) bind_to = *p.outbound_bind6;
  sockaddr_storage ss;
  if (bind_to) {
    const socklen_t len = HostSockaddr({*bind_to, 0}, ss);
    if (bind(fd_, reinterpret_cast<sockaddr*>(&ss), len) != 0) {
      return ConnectDone(errno);
    }
  }
  const socklen_t len = HostSockaddr(host, ss);
  if (connect(fd_, reinterpret_cast<sockaddr*>(&ss), len) == 0) {
    return ConnectDone(0);
  }
  if (errno != EINPROGRESS) return ConnectDone(errno);
  interest_ = eventloop::EventLoop::kWritable;
  if (!backend_.loop_.Add(fd_, interest_, this).ok()) return ConnectDone(ENOMEM);
}

void TcpFlow::StartInbound(int host_fd, std::unique_ptr<tcp::TcpSocket> sock) {
  fd_ = host_fd;
  inbound_ = true;
  ++backend_.counters_.tcp_host_fds_open;
  sock_ = std::move(sock);
  phase_ = Phase::kGuestConnecting;
  sock_->SetNoDelay(true);
  sock_->set_callback([this](uint32_t events) { OnGuestEvents(events); });
}

uint64_t TcpFlow::buffered_bytes() const {
  uint64_t n = 0;
  for (size_t i = pending_first_; i < pending_n_; ++i) n += pending_[i].size();
  if (sock_ != nullptr) n += sock_->readable_bytes() + sock_->unsent_bytes();
  return n;
}

void TcpFlow::ResetForPolicy() {
  if (phase_ == Phase::kEnded) return;
  if (phase_ == Phase::kConnecting || phase_ == Phase::kConnectDone) {
    // The guest's SYN is still held: refused as a SYN the policy denied.
    (void)backend_.tcp_.RefuseHeld(tuple_, tcp::HeldSynRefusal::kReset,
                                   backend_.loop_.Now());
  }
  End(FlowEnd::kPolicyReset, /*host_abortive=*/true, /*guest_reset=*/true);
}

void TcpFlow::ConnectDone(int error) {
  connect_error_ = error;
  phase_ = Phase::kConnectDone;
  backend_.MarkForSweep(tuple_);
}

bool TcpFlow::Sweep(Instant now) {
  if (phase_ == Phase::kConnectDone) {
    if (connect_error_ == 0) {
      Accept(now);
    } else {
      Refuse(connect_error_, now);
    }
  } else if (phase_ == Phase::kRelaying) {
    Pump();  // a chunk may be free again
  }
  return phase_ == Phase::kEnded;
}

void TcpFlow::Accept(Instant now) {
  auto s = backend_.tcp_.AcceptHeld(tuple_, now);
  if (!s.ok()) {
    End(FlowEnd::kConnectFailed, /*host_abortive=*/true, false);
    return;
  }
  ++backend_.counters_.tcp_flows_established;
  sock_ = std::move(*s);
  sock_->SetNoDelay(true);  // the host's segmentation already decided
  if (const Duration t = backend_.config_.limits.tcp_guest_timeout;
      t > absl::ZeroDuration()) {
    sock_->SetUserTimeout(t);
    sock_->SetKeepalive(true, t, t / 4, 3);
  }
  sock_->set_callback([this](uint32_t events) { OnGuestEvents(events); });
  phase_ = Phase::kRelaying;
  if (fd_ >= 0 && !backend_.loop_.IsRegistered(fd_)) {
    (void)backend_.loop_.Add(fd_, 0, this);
  }
  UpdateInterest();
}

void TcpFlow::Refuse(int error, Instant now) {
  tcp::HeldSynRefusal how = tcp::HeldSynRefusal::kReset;
  FlowEnd why = FlowEnd::kConnectFailed;
  switch (error) {
    case ECONNREFUSED:
      why = FlowEnd::kConnectRefused;
      break;
    case ENETUNREACH:
      how = tcp::HeldSynRefusal::kNetUnreachable;
      why = FlowEnd::kConnectNetUnreachable;
      break;
    case EHOSTUNREACH:
      how = tcp::HeldSynRefusal::kHostUnreachable;
      why = FlowEnd::kConnectHostUnreachable;
      break;
    case ETIMEDOUT:
      // The guest's kernel sees what it would behind a black hole.
      how = tcp::HeldSynRefusal::kSilent;
      why = FlowEnd::kConnectTimedOut;
      break;
    case EACCES:
    case EPERM:
      how = tcp::HeldSynRefusal::kAdminProhibited;
      why = FlowEnd::kConnectProhibited;
      break;
    default:
      break;
  }
  (void)backend_.tcp_.RefuseHeld(tuple_, how, now);
  End(why, /*host_abortive=*/false, false);
}

void TcpFlow::OnWritable(Instant now) {
  (void)now;
  if (phase_ == Phase::kConnecting) {
    int err = 0;
    socklen_t len = sizeof(err);
    if (getsockopt(fd_, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
    // Stop watching until the outcome is applied.
    interest_ = 0;
    (void)backend_.loop_.Modify(fd_, 0);
    return ConnectDone(err);
  }
  if (phase_ == Phase::kRelaying) {
    host_full_ = false;
    Pump();
  }
}

void TcpFlow::OnReadable(Instant now) {
  (void)now;
  host_readable_ = true;
  if (phase_ == Phase::kRelaying) Pump();
}

void TcpFlow::OnError(Instant now, uint32_t epoll_events) {
  (void)epoll_events;
  if (phase_ == Phase::kConnecting) return OnWritable(now);
  if (phase_ != Phase::kRelaying) return;
  int err = 0;
  socklen_t len = sizeof(err);
  (void)getsockopt(fd_, SOL_SOCKET, SO_ERROR, &err, &len);
  if (err == ECONNRESET || err == EPIPE) {
    return End(FlowEnd::kHostReset, false, /*guest_reset=*/true);
  }
  if (err != 0) return End(FlowEnd::kHostError, false, true);
  host_readable_ = true;  // a recv sees the hang-up
  Pump();
  if (phase_ == Phase::kRelaying && host_eof_ && host_wr_shut_) MaybeFinish();
}

void TcpFlow::OnGuestEvents(uint32_t events) {
  if (phase_ == Phase::kGuestConnecting) {
    if (events & ev::kError) {
      const absl::Status e = sock_->TakeError();
      ++backend_.counters_.tcp_inbound_refused;
      return End(transport::ErrnoOf(e) == ECONNREFUSED
                     ? FlowEnd::kConnectRefused
                     : FlowEnd::kConnectFailed,
                 /*host_abortive=*/true, /*guest_reset=*/false);
    }
    if (!(events & ev::kWritable)) return;
    // The guest accepted: relay as a guest-opened flow does.
    ++backend_.counters_.tcp_inbound_established;
    phase_ = Phase::kRelaying;
    if (const Duration t = backend_.config_.limits.tcp_guest_timeout;
        t > absl::ZeroDuration()) {
      sock_->SetUserTimeout(t);
      sock_->SetKeepalive(true, t, t / 4, 3);
    }
    (void)backend_.loop_.Add(fd_, 0, this);
    UpdateInterest();
  }
  if (phase_ != Phase::kRelaying) return;
  if (events & ev::kError) {
    if (const absl::Status e = sock_->TakeError(); !e.ok()) {
      return EndOnGuestError(e);
    }
  }
  Pump();
}

void TcpFlow::EndOnGuestError(const absl::Status& e) {
  // A guest RST becomes an abortive close on the host; a guest side that
  // timed out, too. A RST to our SYN-ACK (the guest's kernel answering a
  // SYN it never sent: a SYN flood from a raw socket) reaches the socket
  // as ECONNREFUSED (RFC 9293 3.10.7.4, SYN-RECEIVED of no listener): a
  // guest reset too, not a guest error.
  const int err = transport::ErrnoOf(e);
  const bool reset = err == ECONNRESET || err == ECONNREFUSED;
  End(reset ? FlowEnd::kGuestReset : FlowEnd::kGuestError,
      /*host_abortive=*/true, false);
}

void TcpFlow::Pump() {
  if (phase_ != Phase::kRelaying || in_pump_) return;
  in_pump_ = true;
  const bool alive = PumpGuestToHost() && PumpHostToGuest();
  in_pump_ = false;
  if (!alive) return;
  MaybeFinish();
  if (phase_ == Phase::kRelaying) UpdateInterest();
}

bool TcpFlow::PumpGuestToHost() {
  const uint32_t limit = backend_.config_.limits.guest_to_host_pending;
  // The egress byte rate (rate_limit.h): the guest's own flows only. Off,
  // this is one null test per pump.
  EgressLimiter* const rate =
      inbound_ ? nullptr : backend_.egress_limit_.get();
  if (rate != nullptr && egress_waiting_) return true;  // the timer resumes it
  const Instant now = rate != nullptr ? backend_.loop_.Now() : Instant();
  while (true) {
    // What the budget lets this write move, when there is something to
    // move; none: wait for the timer, reading no more from the guest.
    uint64_t allow = UINT64_MAX;
    if (rate != nullptr &&
        (pending_first_ < pending_n_ || sock_->readable_bytes() > 0)) {
      allow = rate->Allow(now);
      if (allow == 0) {
        egress_waiting_ = true;
        rate->Wait(tuple_, now);
        return true;
      }
    }
    if (pending_first_ == pending_n_) {
      pending_first_ = pending_n_ = 0;
      if (guest_eof_) {
        // Every byte before the FIN went out: relay the half-close.
        if (!host_wr_shut_) {
          (void)shutdown(fd_, SHUT_WR);
          host_wr_shut_ = true;
        }
        return true;
      }
      size_t views = 0;
      auto r = sock_->ReadViews(pending_, std::min<uint64_t>(limit, allow),
                                &views);
      if (!r.ok()) {
        if (transport::IsWouldBlock(r.status())) return true;  // nothing yet
        // The read took the socket's error (a guest RST, a timeout): no
        // event will repeat it, so it ends the flow here.
        EndOnGuestError(r.status());
        return false;
      }
      if (*r == 0 && views == 0) {
        guest_eof_ = true;
        continue;
      }
      pending_n_ = views;
    }
    std::array<iovec, kMaxViews> iov;
    size_t n_iov = 0;
    uint64_t offered = 0;  // at most `allow`
    for (size_t i = pending_first_; i < pending_n_ && offered < allow; ++i) {
      const auto b = pending_[i].bytes();
      const size_t len = static_cast<size_t>(
          std::min<uint64_t>(b.size(), allow - offered));
      iov[n_iov++] = iovec{const_cast<uint8_t*>(b.data()), len};
      offered += len;
    }
    msghdr msg{};
    msg.msg_iov = iov.data();
    msg.msg_iovlen = n_iov;
    const ssize_t sent = sendmsg(fd_, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (sent < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        host_full_ = true;
        return true;
      }
      End(errno == ECONNRESET || errno == EPIPE ? FlowEnd::kHostReset
                                                : FlowEnd::kHostError,
          false, /*guest_reset=*/true);
      return false;
    }
    if (rate != nullptr) rate->Sent(static_cast<uint64_t>(sent));
    backend_.counters_.tcp_bytes_guest_to_host += static_cast<uint64_t>(sent);
    bytes_out_ += static_cast<uint64_t>(sent);
    if (inbound_counts_) {
      inbound_counts_->bytes_from_guest += static_cast<uint64_t>(sent);
    }
    size_t left = static_cast<size_t>(sent);
    while (pending_first_ < pending_n_ && left > 0) {
      buffer::PayloadView& v = pending_[pending_first_];
      if (left >= v.size()) {
        left -= v.size();
        v = buffer::PayloadView();
        ++pending_first_;
      } else {
        v.TrimFront(static_cast<uint32_t>(left));
        left = 0;
      }
    }
    if (pending_first_ < pending_n_) {
      // The budget stopped it, not the host: the loop's top waits.
      if (static_cast<uint64_t>(sent) == offered && rate != nullptr) continue;
      // A short write: the host socket is full. The views stay; the
      // netstack socket is not read, so the guest's window closes.
      host_full_ = true;
      return true;
    }
  }
}

bool TcpFlow::PumpHostToGuest() {
  const uint32_t limit = backend_.config_.limits.host_to_guest_buffer;
  while (!host_eof_) {
    if ((sock_->Events() & ev::kWritable) == 0 ||
        sock_->unsent_bytes() >= limit) {
      return true;  // the guest's side is full: leave the host unread
    }
    const auto room = backend_.host_arena_.Room(kMinRecvRoom);
    if (room.empty()) {
      // Only the pool's receive reserve is left. Reading on would take
      // the chunks the guest's acks must be received into, and only
      // those acks free chunks: leave the host unread until they do.
      if (!waiting_for_chunk_) {
        waiting_for_chunk_ = true;
        ++backend_.counters_.tcp_chunk_waits;
        backend_.WaitForChunk(tuple_);
      }
      return true;
    }
    waiting_for_chunk_ = false;  // (still listed: ChunkAvailable is harmless)
    if (!host_readable_) return true;  // epoll's OnReadable brings us back
    const size_t want =
        std::min<size_t>(room.size(), limit - sock_->unsent_bytes());
    const ssize_t n = recv(fd_, room.data(), want, MSG_DONTWAIT);
    if (n > 0) {
      if (absl::Status s = sock_->WriteView(
              backend_.host_arena_.Commit(static_cast<uint32_t>(n)));
          !s.ok()) {
        EndOnGuestError(s);  // it may have taken the socket's error
        return false;
      }
      backend_.counters_.tcp_bytes_host_to_guest += static_cast<uint64_t>(n);
      bytes_in_ += static_cast<uint64_t>(n);
      if (inbound_counts_) {
        inbound_counts_->bytes_to_guest += static_cast<uint64_t>(n);
      }
      // A short read emptied the socket's queue: asking again would
      // only say EAGAIN (one of the seven system calls a TCP_RR
      // transaction cost). The loop's epoll is level-triggered, so
      // bytes or a FIN that come later wake us as before.
      if (static_cast<size_t>(n) < want) {
        host_readable_ = false;
        return true;
      }
      continue;
    }
    if (n == 0) {
      // The host's FIN, after every byte before it was queued: FIN to
      // the guest after them.
      host_eof_ = true;
      (void)sock_->Shutdown(false, true);
      return true;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      host_readable_ = false;
      return true;
    }
    End(errno == ECONNRESET ? FlowEnd::kHostReset : FlowEnd::kHostError,
        false, /*guest_reset=*/true);
    return false;
  }
  return true;
}

void TcpFlow::ChunkAvailable() {
  waiting_for_chunk_ = false;
  Pump();
}

void TcpFlow::EgressResumed() {
  if (!egress_waiting_) return;  // a stale entry, or a new flow of the tuple
  egress_waiting_ = false;
  Pump();
}

void TcpFlow::MaybeFinish() {
  if (phase_ != Phase::kRelaying) return;
  if (guest_eof_ && host_wr_shut_ && host_eof_) {
    End(FlowEnd::kClosed, false, false);
  }
}

void TcpFlow::End(FlowEnd why, bool host_abortive, bool guest_reset) {
  if (phase_ == Phase::kEnded) return;
  phase_ = Phase::kEnded;
  ++backend_.counters_.tcp_flows_closed;
  ++backend_.counters_.tcp_ends[static_cast<size_t>(why)];
  if (egress_) {
    backend_.LogClosed(policy::kTcp, tuple_.remote, host_, bytes_out_,
                       bytes_in_, started_);
  }
  CloseHost(host_abortive);
  if (sock_ != nullptr) {
    sock_->set_callback(nullptr);
    if (guest_reset) {
      sock_->Abort();
    } else {
      sock_->Close();  // graceful: the layer finishes the FIN exchange
    }
    sock_.reset();
  }
  for (auto& v : pending_) v = buffer::PayloadView();
  pending_first_ = pending_n_ = 0;
  backend_.MarkForSweep(tuple_);
}

void TcpFlow::CloseHost(bool abortive) {
  if (fd_ < 0) return;
  if (backend_.loop_.IsRegistered(fd_)) (void)backend_.loop_.Remove(fd_);
  if (abortive) {
    const linger l{1, 0};
    (void)setsockopt(fd_, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
  }
  (void)close(fd_);
  fd_ = -1;
  --backend_.counters_.tcp_host_fds_open;
}

void TcpFlow::UpdateInterest() {
  if (fd_ < 0) return;
  uint32_t want = 0;
  // Read the host while the guest's side has room; watch for room on the
  // host while guest bytes wait for it.
  if (!host_eof_ && !waiting_for_chunk_ && sock_ != nullptr &&
      (sock_->Events() & ev::kWritable) &&
      sock_->unsent_bytes() < backend_.config_.limits.host_to_guest_buffer) {
    want |= eventloop::EventLoop::kReadable;
  }
  if (host_full_) want |= eventloop::EventLoop::kWritable;
  if (want == interest_) return;
  interest_ = want;
  (void)backend_.loop_.Modify(fd_, want);
}

}  // namespace netstack::backend
