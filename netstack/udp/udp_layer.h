// The UDP transport (RFC 768, with RFC 1122 4.1): the port tables, the
// receive demultiplexer the stack calls for every verified UDP datagram,
// ephemeral ports, and the send path of UdpSocket.
//
// Receive. The stack has parsed the UDP header and verified its checksum
// before Deliver (netstack/stack/ipv4.cc, ipv6.cc); `payload` starts at
// the UDP header. The datagram is matched in its family's PortTable and
// its payload, a sub-view of the received chunk, is queued on the socket:
// no copy, and no allocation once the socket's queue has warmed up.
//   - No matching socket: kUdpNoListener, and the stack answers with ICMP
//     port unreachable (RFC 1122 4.1.3.1), which it refuses itself for
//     broadcasts and multicasts.
//   - A full receive queue is a drop, but not a missing listener: no ICMP
//     may go out. No existing stack DropReason names it (kUdpNoListener
//     would send the ICMP, kTcpReceiveBufferFull would mislabel it), so
//     Deliver returns nullopt (the stack counts the frame consumed) and
//     the drop is counted here as receive_queue_full, and per socket.
//     With a kUdpReceiveBufferFull reason in counters.h this becomes a
//     one-line change (QueueFullDisposition in udp_layer.cc).
//   - A broadcast or multicast datagram goes to every matching socket
//     (each queues a view of the same chunk).
//
// Send: UdpSocket copies the application's bytes into a fresh chunk once,
// sums them while they are hot, prepends the UDP header with the checksum
// (mandatory over IPv6, RFC 8200 8.1; always filled over IPv4 too) and
// calls Stack::SendIpv4/SendIpv6.
//
// Ephemeral ports: RFC 6056 Algorithm 1, in [32768, 60999] like Linux's
// ip_local_port_range: a random start drawn from the seeded generator,
// then the next port that no socket of the family uses.
//
// One UdpLayer per Stack, on the stack's thread. It must outlive its
// sockets (DCHECK), and unregisters from the stack when destroyed.
#ifndef NETSTACK_UDP_UDP_LAYER_H_
#define NETSTACK_UDP_UDP_LAYER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "netstack/base/time.h"
#include "netstack/buffer/chunk.h"
#include "netstack/buffer/packet.h"
#include "netstack/stack/stack.h"
#include "netstack/transport/address.h"
#include "netstack/transport/notifier.h"
#include "netstack/udp/datagram_queue.h"
#include "netstack/udp/port_table.h"
#include "netstack/udp/udp_socket.h"

namespace netstack::udp {

struct UdpLayerOptions {
  // Linux's default net.ipv4.ip_local_port_range.
  uint16_t ephemeral_low = 32768;
  uint16_t ephemeral_high = 60999;
  // Each new socket's receive buffer (SO_RCVBUF), in charged bytes.
  size_t receive_buffer_bytes = DatagramQueue::kDefaultLimit;
};

// X(field, "name")
#define NETSTACK_UDP_COUNTERS(X)                                          \
  /* Receive: per socket a datagram was queued for (once for unicast). */ \
  X(datagrams_received, "datagrams_received")                             \
  /* No socket matched: answered with port unreachable by the stack. */   \
  X(no_port, "no_port")                                                   \
  /* No socket matched; the unmatched handler (a backend) took it. */      \
  X(unmatched_handled, "unmatched_handled")                               \
  /* A matching socket's queue was full (per socket refused). */          \
  X(receive_queue_full, "receive_queue_full")                             \
  /* The stack's header guarantee did not hold (defensive). */            \
  X(malformed, "malformed")                                               \
  /* Send: datagrams handed to the stack. */                              \
  X(datagrams_sent, "datagrams_sent")                                     \
  X(send_message_too_long, "send_message_too_long")                       \
  X(send_no_route, "send_no_route")                                       \
  /* No chunk or packet buffer, or the stack dropped it (its counters */  \
  /* say why). */                                                         \
  X(send_no_buffer, "send_no_buffer")                                     \
  /* ICMP errors: given to a connected socket, or not (an unconnected  */ \
  /* socket, a soft error, no socket). */                                  \
  X(icmp_errors_reported, "icmp_errors_reported")                         \
  X(icmp_errors_ignored, "icmp_errors_ignored")                           \
  /* SendViews with more views than a packet holds. */                     \
  X(send_too_many_views, "send_too_many_views")                           \
  X(ephemeral_exhausted, "ephemeral_exhausted")

struct UdpCounters {
#define NETSTACK_UDP_FIELD(f, name) uint64_t f = 0;
  NETSTACK_UDP_COUNTERS(NETSTACK_UDP_FIELD)
#undef NETSTACK_UDP_FIELD
  // "udp.<name> value" lines for every non-zero counter.
  std::string Format() const;
};

// Takes the unicast datagrams no socket matched, before the stack would
// answer them with port unreachable: a network backend relays them to host
// sockets (netstack/backend/udp_flows.h). `payload` is the datagram's
// payload (after the UDP header, cut at its Length), a view of the
// received chunk that the handler may keep.
class UnmatchedDatagramHandler {
 public:
  virtual ~UnmatchedDatagramHandler() = default;
  // True: consumed (no ICMP goes out; the handler counts what it did with
  // it). False: no listener, as without a handler.
  virtual bool OnUnmatchedDatagram(const transport::SocketAddress& src,
                                   const transport::SocketAddress& dst,
                                   const buffer::PayloadView& payload,
                                   Instant now) = 0;
  // A USO super-datagram (link::InboundFrame::udp_gso_size): `payload`
  // is datagrams of `segment_size` bytes, the last one shorter or equal.
  // A backend may relay it whole (UDP_SEGMENT); by default each datagram
  // goes to OnUnmatchedDatagram in order, and false for the first one is
  // false for all.
  virtual bool OnUnmatchedSuperDatagram(const transport::SocketAddress& src,
                                        const transport::SocketAddress& dst,
                                        const buffer::PayloadView& payload,
                                        uint16_t segment_size, Instant now);
  // The stack delivered the link's batch: a backend that holds the
  // batch's datagrams back sends them now.
  virtual void OnReceiveBatchEnd(Instant now) {}
};

class UdpLayer : public stack::TransportHandler {
 public:
  // Largest payloads: 65535 minus the IPv4 (20) and UDP (8) headers, and
  // minus the UDP header for IPv6, whose payload length excludes its own
  // 40-byte header (jumbograms, RFC 2675, are not supported).
  static constexpr size_t kMaxIpv4Payload = 65507;
  static constexpr size_t kMaxIpv6Payload = 65527;

  // Registers itself as the stack's protocol 17 handler. `seed` drives the
  // ephemeral port choice.
  UdpLayer(stack::Stack& stack, buffer::ChunkPool& chunks,
           buffer::PacketPool& packets, transport::Notifier& notifier,
           uint64_t seed, const UdpLayerOptions& options = {});
  UdpLayer(const UdpLayer&) = delete;
  UdpLayer& operator=(const UdpLayer&) = delete;
  ~UdpLayer() override;

  // A new, unbound socket.
  std::unique_ptr<UdpSocket> Open(transport::Family family);

  std::optional<stack::DropReason> Deliver(const stack::Ipv4Datagram& d,
                                           Instant now) override;
  std::optional<stack::DropReason> Deliver(const stack::Ipv6Datagram& d,
                                           Instant now) override;
  // An ICMP error about a datagram we sent: a connected socket gets the
  // hard ones (port or protocol unreachable, administratively
  // prohibited) as its pending error, as Linux without IP_RECVERR does.
  void OnIcmpError(const stack::IcmpError& e, Instant now) override;
  // Passed on to the unmatched handler.
  void OnReceiveBatchEnd(Instant now) override {
    if (unmatched_ != nullptr) unmatched_->OnReceiveBatchEnd(now);
  }

  // The unmatched-datagram hook; nullptr removes it. Not owned; must
  // outlive its registration. Broadcasts and multicasts never reach it.
  void SetUnmatchedHandler(UnmatchedDatagramHandler* handler) {
    unmatched_ = handler;
  }
  // Sends one datagram from `src`, which need not be one of our addresses
  // (a backend answers the guest from the host peer's address and port),
  // to `dst`, with `views` as its payload, shared and never copied. The
  // errors of UdpSocket::SendViewsTo (MessageTooLong is the caller's to
  // check: at most kMaxIpv4Payload / kMaxIpv6Payload bytes).
  [[nodiscard]] absl::Status SendFrom(
      const transport::SocketAddress& src, const transport::SocketAddress& dst,
      std::span<const buffer::PayloadView> views, Instant now);
  // USO toward `dst` (issue #34): the most payload bytes one super-
  // datagram of `segment_size`-byte datagrams may carry, or 0 when its
  // link does not take UDP super-datagrams (LinkCapabilities::udp_gso),
  // or one datagram would not fit the link's MTU whole. Bounded by the
  // link's gso_max_size and kMaxUsoSegments datagrams.
  static constexpr size_t kMaxUsoSegments = 64;  // Linux 5.x's UDP_MAX_SEGMENTS
  size_t SuperDatagramLimit(const transport::IpAddress& dst,
                            uint16_t segment_size) const;
  // Sends `views`, datagrams of `segment_size` bytes (the last one shorter
  // or equal; at most SuperDatagramLimit bytes), as ONE super-datagram
  // (GsoType::kUdpV4/kUdpV6) that the link, or the kernel behind it,
  // cuts: one UDP header, its checksum left partial, the payload never
  // read. Otherwise as SendFrom; InvalidArgument past the limit.
  [[nodiscard]] absl::Status SendSuperFrom(
      const transport::SocketAddress& src, const transport::SocketAddress& dst,
      std::span<const buffer::PayloadView> views, uint16_t segment_size,
      Instant now);

  const UdpCounters& counters() const { return counters_; }
  size_t open_sockets() const { return open_sockets_; }
  size_t bound_sockets(transport::Family family) const {
    return Table(family).size();
  }

 private:
  friend class UdpSocket;

  PortTable& Table(transport::Family f) {
    return f == transport::Family::kIpv4 ? table4_ : table6_;
  }
  const PortTable& Table(transport::Family f) const {
    return f == transport::Family::kIpv4 ? table4_ : table6_;
  }

  // Socket operations (udp_socket.cc calls these).
  void SocketClosed() { --open_sockets_; }
  // Binds `b` (already filled but for the port when `port` is 0) into its
  // family's table.
  absl::Status BindPort(transport::Family f, PortBinding& b, uint16_t port);
  void Unbind(transport::Family f, PortBinding& b);
  // Re-keys a bound binding to `ip` (Connect fixing the source address);
  // AddressInUse (and nothing changed) if that would conflict.
  absl::Status Rebind(transport::Family f, PortBinding& b,
                      const transport::IpAddress& ip);
  // Whether `ip` is one of our addresses.
  bool IsLocalAddress(const transport::IpAddress& ip) const;
  // The source address the stack would use towards `dst`; nullopt without
  // a route.
  std::optional<transport::IpAddress> SourceFor(
      const transport::IpAddress& dst) const;
  // Builds and sends one datagram from `local` (its address may be
  // unspecified: then the route's source) to `dst`. The bytes are copied
  // once, into the layer's send chunk (small datagrams share one chunk
  // instead of pinning 64 KiB each).
  absl::Status SendDatagram(const transport::SocketAddress& local,
                            const transport::SocketAddress& dst,
                            std::span<const uint8_t> data, Instant now);
  // The same with the payload as views, shared and never copied (at most
  // PacketBuffer::kMaxPayloadViews of them).
  // segment_size > 0: a super-datagram (SendSuperFrom).
  absl::Status SendDatagramViews(const transport::SocketAddress& local,
                                 const transport::SocketAddress& dst,
                                 std::span<const buffer::PayloadView> views,
                                 Instant now, uint16_t segment_size = 0);

  // Receive demultiplexing shared by both families. `l4` starts at the
  // UDP header; `multi`: a broadcast/multicast destination.
  std::optional<stack::DropReason> Demux(PortTable& table,
                                         const transport::IpAddress& dst,
                                         const transport::IpAddress& src,
                                         const buffer::PayloadView& l4,
                                         bool multi, uint16_t gso_size,
                                         Instant now);

  stack::Stack& stack_;
  buffer::ChunkPool& chunks_;
  buffer::PacketPool& packets_;
  transport::Notifier& notifier_;
  const UdpLayerOptions options_;
  std::mt19937_64 rng_;
  PortTable table4_;
  PortTable table6_;
  UdpCounters counters_;
  size_t open_sockets_ = 0;
  UnmatchedDatagramHandler* unmatched_ = nullptr;
  // Where SendDatagram copies payload: the chunk and its first free byte.
  // Packets hold views of it, so it goes back to the pool after the last
  // of them is sent.
  buffer::ChunkRef tx_chunk_;
  uint32_t tx_used_ = 0;
};

}  // namespace netstack::udp

#endif  // NETSTACK_UDP_UDP_LAYER_H_
