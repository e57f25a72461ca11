#include "netstack/tcp/tcp_socket.h"

#include "netstack/tcp/connection.h"
#include "netstack/tcp/tcp_layer.h"

namespace netstack::tcp {

TcpSocket::TcpSocket(TcpLayer& layer, transport::Family family,
                     const ConnectionOptions& options)
    : layer_(layer), family_(family), options_(options) {}

TcpSocket::~TcpSocket() { Close(); }

absl::Status TcpSocket::Bind(const transport::SocketAddress& local) {
  if (bound_set_ || conn_ != nullptr || listener_ != nullptr) {
    return transport::InvalidState("already bound");
  }
  return layer_.BindSocket(*this, local);
}

absl::Status TcpSocket::Listen(uint32_t backlog) {
  if (conn_ != nullptr) return transport::InvalidState("connected");
  if (listener_ != nullptr) return absl::OkStatus();
  if (!bound_set_) {
    transport::SocketAddress any;
    any.ip = family_ == transport::Family::kIpv4
                 ? transport::IpAddress(wire::Ipv4Address())
                 : transport::IpAddress(wire::Ipv6Address());
    if (auto s = layer_.BindSocket(*this, any); !s.ok()) return s;
  }
  backlog = std::max<uint32_t>(1, std::min(backlog, layer_.options_.max_backlog));
  listener_ = new Listener(layer_, bound_, backlog, options_);
  layer_.listeners_[bound_] = listener_;
  if (pending_callback_) {
    listener_->notifiable().set_callback(std::move(pending_callback_));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<TcpSocket>> TcpSocket::Accept() {
  if (listener_ == nullptr) return transport::InvalidState("not listening");
  Connection* c = listener_->PopAccepted();
  if (c == nullptr) return transport::WouldBlock();
  std::unique_ptr<TcpSocket> s(new TcpSocket(layer_, family_, options_));
  s->conn_ = c;
  c->set_attached(true);
  // Data or a FIN may have arrived before Accept: say so.
  const uint32_t ev = c->Events();
  if (ev != 0) layer_.notifier_.Mark(c->notifiable(), ev);
  return s;
}

absl::Status TcpSocket::Connect(const transport::SocketAddress& remote) {
  if (conn_ != nullptr) {
    return transport::InvalidState("already connected");
  }
  if (listener_ != nullptr) return transport::InvalidState("listening");
  if (remote.ip.family() != family_) {
    return transport::InvalidArgument("address family does not match");
  }
  if (remote.port == 0 || remote.ip.IsUnspecified()) {
    return transport::InvalidArgument("bad remote address " +
                                      remote.ToString());
  }
  uint32_t mtu = 0;
  uint32_t gso = 0;
  auto src = layer_.SourceFor(remote.ip, &mtu, &gso);
  if (!src) return transport::HostUnreachable(remote.ToString());
  transport::SocketAddress local;
  if (bound_set_) {
    local = bound_;
    if (local.ip.IsUnspecified()) local.ip = *src;
  } else {
    auto port = layer_.AllocateEphemeral(*src, remote.ip, remote.port);
    if (!port.ok()) return port.status();
    local = {*src, *port};
  }
  transport::FourTuple t{local, remote};
  if (layer_.connections_.contains(t) || layer_.time_wait_.Contains(t)) {
    return transport::AddressInUse(local.ToString());
  }
  if (!layer_.ConnectionRoom()) return transport::NoBuffers();
  conn_ = layer_.NewConnection(t, options_);
  conn_->set_attached(true);
  if (pending_callback_) {
    conn_->notifiable().set_callback(std::move(pending_callback_));
  }
  conn_->StartActive(layer_.now_);
  return absl::OkStatus();
}

// A read that found no bytes, no FIN and no pending error. A CLOSED
// connection without the peer's FIN ended abortively, and an earlier call
// took its error (a Write that returned the reset): that is
// ECONNABORTED, never 0, which a relay would pass on as the peer's clean
// end of stream. (Linux's recv() returns 0 there.) After our own
// shutdown of reading, 0.
absl::StatusOr<size_t> TcpSocket::ClosedOrWouldBlock() const {
  if (conn_->state() != TcpState::kClosed) return transport::WouldBlock();
  if (conn_->read_shutdown()) return size_t{0};
  return transport::ConnectionAborted();
}

absl::StatusOr<size_t> TcpSocket::Read(std::span<uint8_t> out) {
  if (conn_ == nullptr) return transport::NotConnected();
  bool eof = false;
  const size_t n = conn_->Read(out, &eof);
  if (n > 0 || eof || out.empty()) return n;
  if (absl::Status e = conn_->TakeError(); !e.ok()) return e;
  return ClosedOrWouldBlock();
}

absl::StatusOr<size_t> TcpSocket::ReadViews(
    std::span<buffer::PayloadView> out, size_t max_bytes, size_t* views) {
  *views = 0;
  if (conn_ == nullptr) return transport::NotConnected();
  bool eof = false;
  const size_t n = conn_->ReadViews(out, max_bytes, views, &eof);
  if (n > 0 || eof) return n;
  if (absl::Status e = conn_->TakeError(); !e.ok()) return e;
  return ClosedOrWouldBlock();
}

absl::StatusOr<size_t> TcpSocket::Write(std::span<const uint8_t> data) {
  if (conn_ == nullptr) return transport::NotConnected();
  if (absl::Status e = conn_->TakeError(); !e.ok()) return e;
  const TcpState st = conn_->state();
  if (st == TcpState::kSynSent || st == TcpState::kSynReceived) {
    return transport::WouldBlock();
  }
  if (st != TcpState::kEstablished && st != TcpState::kCloseWait) {
    return transport::BrokenPipe();
  }
  if (data.empty()) return size_t{0};
  const size_t n = conn_->Write(data);
  if (n == 0) {
    return conn_->writable() ? transport::NoBuffers() : transport::WouldBlock();
  }
  return n;
}

absl::Status TcpSocket::WriteView(buffer::PayloadView view) {
  if (conn_ == nullptr) return transport::NotConnected();
  if (absl::Status e = conn_->TakeError(); !e.ok()) return e;
  const TcpState st = conn_->state();
  if (st != TcpState::kEstablished && st != TcpState::kCloseWait) {
    return st == TcpState::kSynSent || st == TcpState::kSynReceived
               ? transport::WouldBlock()
               : transport::BrokenPipe();
  }
  if (!conn_->WriteView(std::move(view))) return transport::WouldBlock();
  return absl::OkStatus();
}

absl::Status TcpSocket::Shutdown(bool read, bool write) {
  if (conn_ == nullptr) return transport::NotConnected();
  if (read) conn_->ShutdownRead();
  if (write) conn_->ShutdownWrite();
  return absl::OkStatus();
}

void TcpSocket::Detach() {
  if (conn_ != nullptr) {
    conn_->notifiable().set_callback(nullptr);
    conn_->set_attached(false);
    if (conn_->state() == TcpState::kClosed) layer_.closed_.push_back(conn_);
    conn_ = nullptr;
  }
  if (bound_set_) {
    auto it = layer_.bound_.find(bound_);
    if (it != layer_.bound_.end() && --it->second <= 0) {
      layer_.bound_.erase(it);
    }
    bound_set_ = false;
  }
}

void TcpSocket::Close() {
  if (listener_ != nullptr) {
    layer_.listeners_.erase(listener_->local());
    delete listener_;  // resets connections not yet accepted
    listener_ = nullptr;
  }
  if (conn_ != nullptr) conn_->Close(layer_.now_);
  Detach();
}

void TcpSocket::Abort() {
  if (conn_ != nullptr) conn_->Abort(layer_.now_);
  Close();
}

void TcpSocket::SetNoDelay(bool on) {
  options_.nodelay = on;
  if (conn_ != nullptr) conn_->SetNoDelay(on);
}

void TcpSocket::SetCork(bool on) {
  options_.cork = on;
  if (conn_ != nullptr) conn_->SetCork(on);
}

void TcpSocket::SetKeepalive(bool on, Duration idle, Duration interval,
                             uint32_t probes) {
  options_.keepalive = on;
  options_.keepalive_idle = idle;
  options_.keepalive_interval = interval;
  options_.keepalive_probes = probes;
  if (conn_ != nullptr) conn_->SetKeepalive(on, idle, interval, probes);
}

void TcpSocket::SetUserTimeout(Duration d) {
  options_.user_timeout = d;
  if (conn_ != nullptr) conn_->SetUserTimeout(d);
}

absl::Status TcpSocket::SetOptions(const ConnectionOptions& o) {
  if (conn_ != nullptr || listener_ != nullptr) {
    return transport::InvalidState("options are set before connect/listen");
  }
  options_ = o;
  return absl::OkStatus();
}

void TcpSocket::set_callback(transport::ReadyCallback cb) {
  if (conn_ != nullptr) {
    conn_->notifiable().set_callback(std::move(cb));
  } else if (listener_ != nullptr) {
    listener_->notifiable().set_callback(std::move(cb));
  } else {
    pending_callback_ = std::move(cb);
  }
}

uint32_t TcpSocket::Events() const {
  if (listener_ != nullptr) {
    return listener_->pending() > 0 ? transport::event::kReadable : 0;
  }
  if (conn_ != nullptr) return conn_->Events();
  return 0;
}

absl::Status TcpSocket::TakeError() {
  return conn_ != nullptr ? conn_->TakeError() : absl::OkStatus();
}

transport::SocketAddress TcpSocket::local_address() const {
  if (conn_ != nullptr) return conn_->tuple().local;
  return bound_;
}

transport::SocketAddress TcpSocket::remote_address() const {
  return conn_ != nullptr ? conn_->tuple().remote : transport::SocketAddress{};
}

TcpState TcpSocket::state() const {
  if (listener_ != nullptr) return TcpState::kListen;
  if (conn_ == nullptr) return TcpState::kClosed;
  // The connection itself closed when it handed its tuple to the TIME_WAIT
  // table; the socket shows TIME_WAIT while that entry lasts.
  if (conn_->state() == TcpState::kClosed && conn_->entered_time_wait() &&
      layer_.time_wait_.Contains(conn_->tuple())) {
    return TcpState::kTimeWait;
  }
  return conn_->state();
}

TcpInfo TcpSocket::Info() const {
  if (conn_ != nullptr) {
    TcpInfo i = conn_->Info();
    i.state = state();
    return i;
  }
  TcpInfo i;
  i.state = state();
  return i;
}

size_t TcpSocket::readable_bytes() const {
  return conn_ != nullptr ? conn_->readable_bytes() : 0;
}

size_t TcpSocket::unsent_bytes() const {
  return conn_ != nullptr ? conn_->unsent_bytes() : 0;
}

}  // namespace netstack::tcp
