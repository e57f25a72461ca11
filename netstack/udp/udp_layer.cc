#include "netstack/udp/udp_layer.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "netstack/base/dcheck.h"
#include "netstack/transport/errors.h"
#include "netstack/wire/bytes.h"
#include "netstack/wire/checksum.h"
#include "netstack/wire/ip_protocol.h"
#include "netstack/wire/ipv4.h"
#include "netstack/wire/ipv6.h"
#include "netstack/wire/udp.h"

namespace netstack::udp {
namespace {

using stack::DropReason;
using transport::Family;
using transport::IpAddress;
using transport::SocketAddress;

constexpr uint8_t kUdp = static_cast<uint8_t>(wire::IpProtocol::kUdp);

// What Deliver returns when every matching socket's queue was full: a
// receive drop, but not one that earns an ICMP port unreachable.
constexpr std::optional<DropReason> QueueFullDisposition() {
  return DropReason::kUdpReceiveBufferFull;
}

}  // namespace

bool UnmatchedDatagramHandler::OnUnmatchedSuperDatagram(
    const SocketAddress& src, const SocketAddress& dst,
    const buffer::PayloadView& payload, uint16_t segment_size, Instant now) {
  if (segment_size == 0) {
    return OnUnmatchedDatagram(src, dst, payload, now);
  }
  for (uint32_t off = 0; off < payload.size(); off += segment_size) {
    const uint32_t n = std::min<uint32_t>(segment_size, payload.size() - off);
    if (!OnUnmatchedDatagram(src, dst, payload.Subview(off, n), now) &&
        off == 0) {
      return false;
    }
  }
  return true;
}

std::string UdpCounters::Format() const {
  std::string out;
#define NETSTACK_UDP_LINE(f, name) \
  if (f != 0) absl::StrAppend(&out, "udp." name " ", f, "\n");
  NETSTACK_UDP_COUNTERS(NETSTACK_UDP_LINE)
#undef NETSTACK_UDP_LINE
  return out;
}

UdpLayer::UdpLayer(stack::Stack& stack, buffer::ChunkPool& chunks,
                   buffer::PacketPool& packets, transport::Notifier& notifier,
                   uint64_t seed, const UdpLayerOptions& options)
    : stack_(stack),
      chunks_(chunks),
      packets_(packets),
      notifier_(notifier),
      options_(options),
      rng_(seed) {
  NETSTACK_DCHECK(options.ephemeral_low <= options.ephemeral_high);
  stack_.SetTransport(kUdp, this);
}

UdpLayer::~UdpLayer() {
  // Sockets hold a reference to their layer.
  NETSTACK_DCHECK(open_sockets_ == 0);
  stack_.SetTransport(kUdp, nullptr);
}

std::unique_ptr<UdpSocket> UdpLayer::Open(Family family) {
  ++open_sockets_;
  return std::unique_ptr<UdpSocket>(
      new UdpSocket(*this, family, options_.receive_buffer_bytes));
}

// ---------------------------------------------------------------------------
// Binding

absl::Status UdpLayer::BindPort(Family f, PortBinding& b, uint16_t port) {
  PortTable& table = Table(f);
  if (port == 0) {
    const uint32_t span =
        uint32_t{options_.ephemeral_high} - options_.ephemeral_low + 1;
    const uint16_t start =
        static_cast<uint16_t>(options_.ephemeral_low + rng_() % span);
    const std::optional<uint16_t> free = table.FindFreePort(
        options_.ephemeral_low, options_.ephemeral_high, start);
    if (!free) {
      ++counters_.ephemeral_exhausted;
      return transport::AddressInUse("no free ephemeral port");
    }
    port = *free;
  } else if (table.Conflicts(b.local_ip, port, b.reuse_address)) {
    return transport::AddressInUse(SocketAddress{b.local_ip, port}.ToString());
  }
  b.local_port = port;
  table.Insert(&b);
  return absl::OkStatus();
}

void UdpLayer::Unbind(Family f, PortBinding& b) { Table(f).Remove(&b); }

absl::Status UdpLayer::Rebind(Family f, PortBinding& b, const IpAddress& ip) {
  if (b.local_ip == ip) return absl::OkStatus();
  PortTable& table = Table(f);
  table.Remove(&b);
  if (table.Conflicts(ip, b.local_port, b.reuse_address)) {
    table.Insert(&b);
    return transport::AddressInUse(SocketAddress{ip, b.local_port}.ToString());
  }
  b.local_ip = ip;
  table.Insert(&b);
  return absl::OkStatus();
}

bool UdpLayer::IsLocalAddress(const IpAddress& ip) const {
  return ip.is_v4() ? stack_.HasAddress(ip.v4()) : stack_.HasAddress(ip.v6());
}

std::optional<IpAddress> UdpLayer::SourceFor(const IpAddress& dst) const {
  if (dst.is_v4()) {
    if (auto path = stack_.Path(dst.v4())) return IpAddress(path->src);
  } else {
    if (auto path = stack_.Path(dst.v6())) return IpAddress(path->src);
  }
  return std::nullopt;
}

// ---------------------------------------------------------------------------
// Send

absl::Status UdpLayer::SendDatagram(const SocketAddress& local,
                                    const SocketAddress& dst,
                                    std::span<const uint8_t> data,
                                    Instant now) {
  NETSTACK_DCHECK(data.size() <= kMaxIpv6Payload);
  if (data.empty()) return SendDatagramViews(local, dst, {}, now);
  const uint32_t n = static_cast<uint32_t>(data.size());
  if (!tx_chunk_ || buffer::kChunkSize - tx_used_ < n) {
    // Let go of the full chunk first: if its datagrams have left, the
    // pool hands the same chunk back.
    tx_chunk_.Reset();
    tx_chunk_ = chunks_.Allocate();
    tx_used_ = 0;
    if (!tx_chunk_) {
      ++counters_.send_no_buffer;
      return transport::NoBuffers();
    }
  }
  // The one copy of the application's bytes. Views of the chunk's front
  // may be queued already; the bytes past tx_used_ are covered by none.
  std::memcpy(tx_chunk_->unshared_tail(tx_used_).data(), data.data(), n);
  const buffer::PayloadView view(tx_chunk_, tx_used_, n);
  // The next datagram starts on a cache line of its own.
  tx_used_ = std::min<uint32_t>((tx_used_ + n + 63) & ~63u,
                                static_cast<uint32_t>(buffer::kChunkSize));
  return SendDatagramViews(local, dst, std::span<const buffer::PayloadView>(
                                           &view, 1),
                           now);
}

absl::Status UdpLayer::SendDatagramViews(
    const SocketAddress& local, const SocketAddress& dst,
    std::span<const buffer::PayloadView> views, Instant now,
    uint16_t segment_size) {
  size_t len = 0;
  for (const buffer::PayloadView& v : views) len += v.size();
  NETSTACK_DCHECK(len <= kMaxIpv6Payload);
  const std::optional<IpAddress> route_src = SourceFor(dst.ip);
  if (!route_src) {
    ++counters_.send_no_route;
    return transport::HostUnreachable(dst.ip.ToString());
  }
  // A socket bound to one address sends from it, even if the route would
  // pick another (the weak host model, as Linux).
  const IpAddress src = local.ip.IsUnspecified() ? *route_src : local.ip;

  buffer::PacketPtr packet = packets_.Allocate();
  if (packet == nullptr) {
    ++counters_.send_no_buffer;
    return transport::NoBuffers();
  }
  // A super-datagram's link sums each datagram's slice: here it gets only
  // the pseudo-header sum (CHECKSUM_PARTIAL), as TCP's super-segments.
  const bool super = segment_size != 0;
  wire::ChecksumAccumulator payload_sum;
  for (const buffer::PayloadView& v : views) {
    if (v.empty()) continue;
    if (!super) payload_sum.Add(v.bytes());
    if (!packet->AppendPayload(v)) {
      ++counters_.send_too_many_views;
      return transport::InvalidArgument("more payload views than a packet holds");
    }
  }
  const wire::UdpRepr repr{.src_port = local.port,
                           .dst_port = dst.port,
                           .payload_len = static_cast<uint16_t>(len)};
  std::optional<std::span<uint8_t>> hdr =
      packet->headers().Prepend(repr.BufferLen());
  NETSTACK_DCHECK(hdr.has_value());  // a fresh packet has all its headroom
  if (!hdr) {
    ++counters_.send_no_buffer;
    return transport::NoBuffers();
  }
  wire::MutableUdpHeader udp(*hdr);
  repr.Emit(udp);
  const uint32_t udp_len =
      wire::UdpHeader::kHeaderLen + static_cast<uint32_t>(len);

  bool sent = false;
  if (dst.ip.is_v4()) {
    const uint16_t pseudo =
        wire::Ipv4PseudoHeaderSum(src.v4(), dst.ip.v4(), kUdp, udp_len);
    if (super) {
      packet->gso() = buffer::GsoInfo{buffer::GsoType::kUdpV4, segment_size};
      udp.SetChecksum(pseudo);
    } else {
      udp.FillChecksum(pseudo, payload_sum);
    }
    wire::Ipv4Repr ip;
    ip.src = src.v4();
    ip.dst = dst.ip.v4();
    ip.protocol = kUdp;
    sent = stack_.SendIpv4(ip, std::move(packet), now);
  } else {
    // RFC 8200 8.1: mandatory over IPv6; FillChecksum never writes zero.
    const uint16_t pseudo =
        wire::Ipv6PseudoHeaderSum(src.v6(), dst.ip.v6(), kUdp, udp_len);
    if (super) {
      packet->gso() = buffer::GsoInfo{buffer::GsoType::kUdpV6, segment_size};
      udp.SetChecksum(pseudo);
    } else {
      udp.FillChecksum(pseudo, payload_sum);
    }
    wire::Ipv6Repr ip;
    ip.src = src.v6();
    ip.dst = dst.ip.v6();
    ip.next_header = kUdp;
    sent = stack_.SendIpv6(ip, std::move(packet), now);
  }
  if (!sent) {
    // The stack counted its reason (no_buffer, fragmentation_needed,
    // neighbor_queue_full...).
    ++counters_.send_no_buffer;
    return transport::NoBuffers();
  }
  ++counters_.datagrams_sent;
  return absl::OkStatus();
}

absl::Status UdpLayer::SendFrom(const SocketAddress& src,
                               const SocketAddress& dst,
                               std::span<const buffer::PayloadView> views,
                               Instant now) {
  if (src.ip.is_v4() != dst.ip.is_v4() || src.ip.IsUnspecified()) {
    return transport::InvalidArgument("source and destination families");
  }
  size_t len = 0;
  for (const buffer::PayloadView& v : views) len += v.size();
  if (len > (dst.ip.is_v4() ? kMaxIpv4Payload : kMaxIpv6Payload)) {
    ++counters_.send_message_too_long;
    return transport::MessageTooLong();
  }
  return SendDatagramViews(src, dst, views, now);
}

size_t UdpLayer::SuperDatagramLimit(const IpAddress& dst,
                                    uint16_t segment_size) const {
  if (segment_size == 0) return 0;
  size_t ip_header = 0;
  uint32_t mtu = 0;
  uint32_t gso_max = 0;
  bool udp_gso = false;
  if (dst.is_v4()) {
    const auto path = stack_.Path(dst.v4());
    if (!path) return 0;
    ip_header = wire::Ipv4Packet::kMinHeaderLen;
    mtu = path->mtu;
    gso_max = path->gso_max_size;
    udp_gso = path->udp_gso;
  } else {
    const auto path = stack_.Path(dst.v6());
    if (!path) return 0;
    ip_header = wire::Ipv6Packet::kHeaderLen;
    mtu = path->mtu;
    gso_max = path->gso_max_size;
    udp_gso = path->udp_gso;
  }
  const size_t headers = ip_header + wire::UdpHeader::kHeaderLen;
  // Each datagram must fit the MTU whole: a super-datagram is never
  // fragmented, and the guest would have got its datagrams unfragmented.
  if (!udp_gso || headers + segment_size > mtu) return 0;
  const size_t by_size =
      std::min<size_t>(gso_max, 65535) > headers
          ? std::min<size_t>(gso_max, 65535) - headers
          : 0;
  return std::min(by_size, kMaxUsoSegments * segment_size);
}

absl::Status UdpLayer::SendSuperFrom(const SocketAddress& src,
                                     const SocketAddress& dst,
                                     std::span<const buffer::PayloadView> views,
                                     uint16_t segment_size, Instant now) {
  if (src.ip.is_v4() != dst.ip.is_v4() || src.ip.IsUnspecified()) {
    return transport::InvalidArgument("source and destination families");
  }
  size_t len = 0;
  for (const buffer::PayloadView& v : views) len += v.size();
  if (len <= segment_size) return SendFrom(src, dst, views, now);
  if (len > SuperDatagramLimit(dst.ip, segment_size)) {
    return transport::InvalidArgument("super-datagram past the link's limit");
  }
  return SendDatagramViews(src, dst, views, now, segment_size);
}

// ---------------------------------------------------------------------------
// ICMP errors

void UdpLayer::OnIcmpError(const stack::IcmpError& e, Instant) {
  // The invoking datagram went from (src, sport) to (dst, dport).
  const uint16_t sport = wire::LoadBe16(&e.l4[0]);
  const uint16_t dport = wire::LoadBe16(&e.l4[2]);
  const IpAddress src = e.v6 ? IpAddress(e.src6) : IpAddress(e.src4);
  const IpAddress dst = e.v6 ? IpAddress(e.dst6) : IpAddress(e.dst4);
  absl::Status err;
  switch (e.kind) {
    case stack::IcmpErrorKind::kPortUnreachable:
      err = transport::ConnectionRefused();
      break;
    case stack::IcmpErrorKind::kProtocolUnreachable:
      err = transport::ProtocolUnavailable();
      break;
    case stack::IcmpErrorKind::kAdminProhibited:
      err = transport::HostUnreachable("administratively prohibited");
      break;
    default:
      // Soft errors (RFC 1122 4.1.3.3 leaves them to the application;
      // Linux reports them only with IP_RECVERR), and PMTU: nothing to
      // report on a datagram socket.
      ++counters_.icmp_errors_ignored;
      return;
  }
  // The socket that sent it: bound to (src, sport) and, to take the
  // error, connected to (dst, dport) (RFC 1122 4.1.3.3; an unconnected
  // socket cannot tell which of its peers it concerns).
  PortTable& table = e.v6 ? table6_ : table4_;
  PortBinding* b = table.Lookup(src, sport, SocketAddress{dst, dport});
  if (b == nullptr || b->socket == nullptr || !b->remote ||
      *b->remote != SocketAddress{dst, dport}) {
    ++counters_.icmp_errors_ignored;
    return;
  }
  ++counters_.icmp_errors_reported;
  b->socket->SetError(std::move(err));
}

// ---------------------------------------------------------------------------
// Receive

std::optional<DropReason> UdpLayer::Deliver(const stack::Ipv4Datagram& d,
                                            Instant now) {
  // The stack drops a unicast datagram in a link-layer broadcast, so a
  // link-multicast frame here carries a broadcast or multicast IP
  // destination (a subnet broadcast is only recognisable that way here).
  const bool multi =
      d.link_multicast || d.ip.dst.IsBroadcast() || d.ip.dst.IsMulticast();
  return Demux(table4_, IpAddress(d.ip.dst), IpAddress(d.ip.src), d.payload,
               multi, d.udp_gso_size, now);
}

std::optional<DropReason> UdpLayer::Deliver(const stack::Ipv6Datagram& d,
                                            Instant now) {
  return Demux(table6_, IpAddress(d.ip.dst), IpAddress(d.ip.src), d.payload,
               d.ip.dst.IsMulticast(), d.udp_gso_size, now);
}

std::optional<DropReason> UdpLayer::Demux(PortTable& table,
                                          const IpAddress& dst,
                                          const IpAddress& src_ip,
                                          const buffer::PayloadView& l4,
                                          bool multi, uint16_t gso_size,
                                          Instant now) {
  // The stack parsed this header already; parsing again costs a few loads
  // and keeps this function safe on its own (after Check, no read is out
  // of bounds, and Length is within the view).
  const wire::UdpHeader header(l4.bytes());
  wire::UdpRepr udp;
  if (wire::UdpRepr::Parse(header, udp) != wire::WireError::kOk) {
    ++counters_.malformed;
    return DropReason::kUdpMalformed;
  }
  const SocketAddress src{src_ip, udp.src_port};
  // Length, not the IP payload size: bytes after it are not the datagram's.
  const buffer::PayloadView payload =
      l4.Subview(wire::UdpHeader::kHeaderLen, udp.payload_len);

  // A USO super-datagram holds several datagrams: a socket of ours gets
  // each as a view of the same chunk, in order.
  const bool super = gso_size != 0 && payload.size() > gso_size;
  size_t matched = 0;
  size_t queued = 0;
  auto enqueue = [&](PortBinding& b) {
    ++matched;
    const uint32_t step = super ? gso_size : payload.size();
    uint32_t off = 0;
    do {
      const uint32_t n = std::min<uint32_t>(step, payload.size() - off);
      if (b.socket->Enqueue(payload.Subview(off, n), src)) {
        ++queued;
        ++counters_.datagrams_received;
      } else {
        ++counters_.receive_queue_full;
      }
      off += n;
    } while (off < payload.size());
  };
  if (multi) {
    table.ForEachMatch(dst, udp.dst_port, src, enqueue);
  } else if (PortBinding* b = table.Lookup(dst, udp.dst_port, src)) {
    enqueue(*b);
  }
  if (matched == 0) {
    if (!multi && unmatched_ != nullptr &&
        (super ? unmatched_->OnUnmatchedSuperDatagram(
                     src, SocketAddress{dst, udp.dst_port}, payload, gso_size,
                     now)
               : unmatched_->OnUnmatchedDatagram(
                     src, SocketAddress{dst, udp.dst_port}, payload, now))) {
      ++counters_.unmatched_handled;
      return std::nullopt;
    }
    ++counters_.no_port;
    return DropReason::kUdpNoListener;
  }
  if (queued == 0) return QueueFullDisposition();
  return std::nullopt;
}

}  // namespace netstack::udp
