// The TCP socket API: non-blocking endpoints, in the shape of BSD sockets,
// with absl::Status errors that carry an errno (netstack/transport/errors.h)
// and readiness callbacks run by a transport::Notifier.
//
// Time: API calls take no clock. They change state and mark the
// connection; the segments go out at the next TcpLayer::Poll(now), which
// the embedder calls once per event-loop turn (after Notifier::Dispatch).
// So several Writes in one turn become one super-segment, and a Read that
// opens the window sends one window update.
//
//   auto s = tcp.Open(Family::kIpv4);
//   s->set_callback([&](uint32_t ev) { ... s->Read(buf) ... });
//   s->Connect(*SocketAddress::Parse("10.0.0.2:80"));
//   ... loop: link I/O, notifier.Dispatch(), tcp.Poll(now) ...
//
// A TcpSocket is owned by the application. Destroying it is Close(): the
// connection lives on inside the layer until its FIN is acknowledged and
// TIME_WAIT ends, as in the kernel.
#ifndef NETSTACK_TCP_TCP_SOCKET_H_
#define NETSTACK_TCP_TCP_SOCKET_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "netstack/buffer/payload_view.h"
#include "netstack/tcp/tcp_info.h"
#include "netstack/tcp/tcp_options.h"
#include "netstack/transport/address.h"
#include "netstack/transport/errors.h"

namespace netstack::tcp {

class TcpLayer;
class Connection;
class Listener;

class TcpSocket {
 public:
  TcpSocket(const TcpSocket&) = delete;
  TcpSocket& operator=(const TcpSocket&) = delete;
  ~TcpSocket();

  // Port 0: an ephemeral port. Address unspecified: every local address of
  // the socket's family. AddressInUse if taken.
  absl::Status Bind(const transport::SocketAddress& local);
  // Starts accepting; backlog counts connections not yet Accept()ed
  // (completed and half-open). Past it, SYN cookies (if enabled).
  absl::Status Listen(uint32_t backlog);
  // A connected socket, or WouldBlock.
  absl::StatusOr<std::unique_ptr<TcpSocket>> Accept();
  // Starts the handshake (binds an ephemeral port if needed). Returns OK
  // at once; kWritable reports success, kError failure (then error()
  // says ConnectionRefused, TimedOut or HostUnreachable).
  absl::Status Connect(const transport::SocketAddress& remote);

  // Copies received bytes out. 0 means end of stream (the peer's FIN, or
  // our own SHUT_RD). WouldBlock when nothing is readable yet. An error
  // once the connection failed: the error itself the first time
  // (ECONNRESET, ETIMEDOUT...), ECONNABORTED after another call took it.
  absl::StatusOr<size_t> Read(std::span<uint8_t> out);
  // Zero-copy read: moves up to `max_bytes` of received payload views out
  // (they share the receive chunks). Same return values as Read.
  absl::StatusOr<size_t> ReadViews(std::span<buffer::PayloadView> out,
                                   size_t max_bytes, size_t* views);
  // Copies as much of `data` as the send buffer takes; WouldBlock if none.
  absl::StatusOr<size_t> Write(std::span<const uint8_t> data);
  // Zero-copy write of a view the caller filled (whole or not at all).
  absl::Status WriteView(buffer::PayloadView view);

  // shutdown(2): SHUT_RD discards further data, SHUT_WR sends FIN after
  // the queued data.
  absl::Status Shutdown(bool read, bool write);
  // Graceful close (FIN after queued data); unread received data makes it
  // an abort (RST), as RFC 2525 2.17 and Linux do. The socket is empty
  // afterwards; Close on a closed socket is a no-op.
  void Close();
  // Sends RST and drops everything (SO_LINGER 0).
  void Abort();

  // Bind() may take an address that is not the stack's (IP_TRANSPARENT's
  // counterpart): the backend's inbound forwards open toward the guest
  // from the real client's address. Before Bind.
  void SetTransparent(bool on) { transparent_ = on; }
  // Options; per connection. Setting them after Connect/Listen is allowed
  // for nodelay, cork, keepalive and user_timeout.
  void SetNoDelay(bool on);
  void SetCork(bool on);
  void SetKeepalive(bool on, Duration idle, Duration interval,
                    uint32_t probes);
  void SetUserTimeout(Duration d);
  // Before Connect/Listen only (InvalidState afterwards).
  absl::Status SetOptions(const ConnectionOptions& o);
  const ConnectionOptions& options() const { return options_; }

  void set_callback(transport::ReadyCallback cb);
  // What holds now (event:: bits).
  uint32_t Events() const;
  // The pending error (reset, refused, timed out), cleared by reading it.
  absl::Status TakeError();

  transport::SocketAddress local_address() const;
  transport::SocketAddress remote_address() const;
  TcpState state() const;
  TcpInfo Info() const;
  // Bytes readable now / queued and not yet acked.
  size_t readable_bytes() const;
  size_t unsent_bytes() const;

 private:
  absl::StatusOr<size_t> ClosedOrWouldBlock() const;
  friend class TcpLayer;
  TcpSocket(TcpLayer& layer, transport::Family family,
            const ConnectionOptions& options);
  void Detach();

  TcpLayer& layer_;
  transport::Family family_;
  ConnectionOptions options_;
  transport::SocketAddress bound_;
  bool bound_set_ = false;
  bool transparent_ = false;
  Connection* conn_ = nullptr;
  Listener* listener_ = nullptr;
  transport::ReadyCallback pending_callback_;
};

}  // namespace netstack::tcp

#endif  // NETSTACK_TCP_TCP_SOCKET_H_
