#include "netstack/udp/udp_socket.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "netstack/udp/udp_layer.h"

namespace netstack::udp {

using transport::Family;
using transport::IpAddress;
using transport::SocketAddress;

namespace {

IpAddress Unspecified(Family f) {
  return f == Family::kIpv4 ? IpAddress(wire::Ipv4Address())
                            : IpAddress(wire::Ipv6Address());
}

absl::Status Closed() { return transport::InvalidState("socket is closed"); }

}  // namespace

UdpSocket::UdpSocket(UdpLayer& layer, Family family, size_t rcvbuf)
    : layer_(layer), family_(family), queue_(rcvbuf) {
  binding_.local_ip = Unspecified(family);
  binding_.socket = this;
  notifiable_.set_callback([this](uint32_t events) {
    // Nothing is touched after the callback: it may destroy the socket.
    if (!closed_ && callback_) callback_(events);
  });
}

UdpSocket::~UdpSocket() {
  Close();
  layer_.SocketClosed();
}

void UdpSocket::Close() {
  if (closed_) return;
  closed_ = true;
  if (bound_) layer_.Unbind(family_, binding_);
  bound_ = false;
  queue_.Clear();
}

absl::Status UdpSocket::SetReuseAddress(bool on) {
  if (closed_) return Closed();
  if (bound_) return transport::InvalidState("SO_REUSEADDR after bind");
  binding_.reuse_address = on;
  return absl::OkStatus();
}

absl::Status UdpSocket::SetReceiveBufferSize(size_t bytes) {
  if (closed_) return Closed();
  if (bytes == 0) return transport::InvalidArgument("receive buffer of 0");
  queue_.set_limit(bytes);
  return absl::OkStatus();
}

absl::Status UdpSocket::Bind(const SocketAddress& local) {
  if (closed_) return Closed();
  if (bound_) return transport::InvalidState("already bound");
  if (local.ip.family() != family_) {
    return transport::InvalidArgument("address of the other family");
  }
  if (!local.ip.IsUnspecified() && !layer_.IsLocalAddress(local.ip)) {
    return transport::InvalidArgument(
        local.ip.ToString() + " is not a local address (EADDRNOTAVAIL)");
  }
  binding_.local_ip = local.ip;
  if (absl::Status s = layer_.BindPort(family_, binding_, local.port);
      !s.ok()) {
    binding_.local_ip = Unspecified(family_);
    return s;
  }
  bound_ = true;
  address_bound_explicitly_ = !local.ip.IsUnspecified();
  return absl::OkStatus();
}

absl::Status UdpSocket::AutoBind() {
  if (bound_) return absl::OkStatus();
  return Bind(SocketAddress{Unspecified(family_), 0});
}

absl::Status UdpSocket::CheckDestination(const SocketAddress& dst) const {
  if (dst.ip.family() != family_) {
    return transport::InvalidArgument("destination of the other family");
  }
  if (dst.ip.IsUnspecified() || dst.port == 0) {
    return transport::InvalidArgument("destination " + dst.ToString());
  }
  if (dst.ip.is_v6()) {
    // ::ffff:0:0/96 names IPv4 hosts (RFC 4291 2.5.5.2); families are
    // kept apart, so an IPv6 socket does not reach them.
    const auto& b = dst.ip.v6().bytes;
    static constexpr uint8_t kMapped[12] = {0, 0, 0, 0, 0,    0,
                                            0, 0, 0, 0, 0xff, 0xff};
    if (std::memcmp(b.data(), kMapped, sizeof(kMapped)) == 0) {
      return transport::InvalidArgument("IPv4-mapped destination");
    }
  }
  return absl::OkStatus();
}

absl::Status UdpSocket::Connect(const SocketAddress& remote) {
  if (closed_) return Closed();
  if (absl::Status s = CheckDestination(remote); !s.ok()) return s;
  const std::optional<IpAddress> src = layer_.SourceFor(remote.ip);
  if (!src) {
    return transport::HostUnreachable(remote.ip.ToString());
  }
  if (absl::Status s = AutoBind(); !s.ok()) return s;
  if (!address_bound_explicitly_) {
    if (absl::Status s = layer_.Rebind(family_, binding_, *src); !s.ok()) {
      return s;
    }
  }
  binding_.remote = remote;
  return absl::OkStatus();
}

absl::Status UdpSocket::Disconnect() {
  if (closed_) return Closed();
  binding_.remote.reset();
  if (bound_ && !address_bound_explicitly_) {
    // Widening back to any address may meet a binding made since; then
    // the fixed address stays (better than failing the disconnect).
    layer_.Rebind(family_, binding_, Unspecified(family_)).IgnoreError();
  }
  return absl::OkStatus();
}

absl::Status UdpSocket::PrepareSend(const SocketAddress& dst, size_t len) {
  if (closed_) return Closed();
  if (!error_.ok()) return TakeError();
  if (absl::Status s = CheckDestination(dst); !s.ok()) return s;
  const size_t max = family_ == Family::kIpv4 ? UdpLayer::kMaxIpv4Payload
                                              : UdpLayer::kMaxIpv6Payload;
  if (len > max) {
    ++layer_.counters_.send_message_too_long;
    return transport::MessageTooLong();
  }
  return AutoBind();
}

absl::Status UdpSocket::SendTo(std::span<const uint8_t> data,
                               const SocketAddress& dst, Instant now) {
  if (absl::Status s = PrepareSend(dst, data.size()); !s.ok()) return s;
  absl::Status s = layer_.SendDatagram(local_address(), dst, data, now);
  if (s.ok()) ++stats_.datagrams_sent;
  return s;
}

absl::Status UdpSocket::SendViewsTo(std::span<const buffer::PayloadView> views,
                                    const SocketAddress& dst, Instant now) {
  size_t len = 0;
  for (const buffer::PayloadView& v : views) len += v.size();
  if (absl::Status s = PrepareSend(dst, len); !s.ok()) return s;
  if (views.size() > buffer::PacketBuffer::kMaxPayloadViews) {
    ++layer_.counters_.send_too_many_views;
    return transport::InvalidArgument("more payload views than a packet holds");
  }
  absl::Status s = layer_.SendDatagramViews(local_address(), dst, views, now);
  if (s.ok()) ++stats_.datagrams_sent;
  return s;
}

absl::Status UdpSocket::Send(std::span<const uint8_t> data, Instant now) {
  if (closed_) return Closed();
  if (!binding_.remote) return transport::NotConnected();
  return SendTo(data, *binding_.remote, now);
}

void UdpSocket::SetError(absl::Status error) {
  error_ = std::move(error);
  layer_.notifier_.Mark(notifiable_,
                        transport::event::kReadable | transport::event::kError);
}

absl::Status UdpSocket::TakeError() { return std::exchange(error_, {}); }

absl::StatusOr<RecvResult> UdpSocket::RecvFrom(std::span<uint8_t> out) {
  if (closed_) return Closed();
  if (!error_.ok()) return TakeError();
  if (queue_.empty()) return transport::WouldBlock();
  const DatagramQueue::Entry e = queue_.Pop();
  const std::span<const uint8_t> bytes = e.payload.bytes();
  RecvResult r;
  r.bytes = std::min(out.size(), bytes.size());
  r.from = e.from;
  r.truncated = bytes.size() > out.size();
  if (r.bytes > 0) std::memcpy(out.data(), bytes.data(), r.bytes);
  return r;
}

absl::StatusOr<ReceivedDatagram> UdpSocket::RecvDatagram() {
  if (closed_) return Closed();
  if (!error_.ok()) return TakeError();
  if (queue_.empty()) return transport::WouldBlock();
  DatagramQueue::Entry e = queue_.Pop();
  return ReceivedDatagram{std::move(e.payload), e.from};
}

std::optional<size_t> UdpSocket::NextDatagramSize() const {
  if (closed_ || queue_.empty()) return std::nullopt;
  return queue_.Front().payload.size();
}

bool UdpSocket::Enqueue(buffer::PayloadView payload,
                        const SocketAddress& from) {
  if (!queue_.Push(std::move(payload), from)) {
    ++stats_.receive_queue_full;
    return false;
  }
  ++stats_.datagrams_received;
  layer_.notifier_.Mark(notifiable_, transport::event::kReadable);
  return true;
}

void UdpSocket::set_callback(transport::ReadyCallback cb) {
  callback_ = std::move(cb);
  if (!closed_) layer_.notifier_.Mark(notifiable_, Events());
}

uint32_t UdpSocket::Events() const {
  if (closed_) return 0;
  uint32_t events = transport::event::kWritable;
  if (!queue_.empty()) events |= transport::event::kReadable;
  return events;
}

SocketAddress UdpSocket::local_address() const {
  return SocketAddress{binding_.local_ip, binding_.local_port};
}

}  // namespace netstack::udp
