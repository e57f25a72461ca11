// A UDP socket (RFC 768) of one address family, made by UdpLayer::Open.
//
// The API follows the BSD socket calls it replaces, with errors as
// errno-carrying statuses (netstack/transport/errors.h):
//
//   Bind          port 0 picks an ephemeral port; the unspecified address
//                 means every local address of the family. AddressInUse
//                 on a conflict (port_table.h has the rules),
//                 InvalidArgument for an address that is not ours (where
//                 Linux says EADDRNOTAVAIL) or of the other family.
//   Connect       sets the default destination and, from then on, accepts
//                 datagrams from that peer only. Binds an ephemeral port
//                 first if needed, and, unless an address was bound
//                 explicitly, fixes the local address to the route's
//                 source (as Linux's ip4_datagram_connect does).
//   SendTo/Send   copy the bytes into a chunk, add the UDP header with its
//                 checksum, and hand the datagram to the stack, which
//                 fragments it if it exceeds the MTU. The datagram leaves
//                 at the embedder's next Stack::Flush (end of the loop
//                 turn). An unbound socket binds an ephemeral port first.
//   RecvFrom      copies the oldest datagram out and consumes it; a
//                 datagram longer than `out` is truncated and the rest
//                 discarded, as recvfrom(2) does.
//   RecvDatagram  the zero-copy variant: the payload as a view sharing the
//                 received frame's chunk.
//
// Readiness: kWritable holds whenever the socket is open (there is no
// send buffer: a datagram is handed to the stack or refused at once);
// kReadable while a datagram is queued. The callback runs from
// Notifier::Dispatch, once per dispatch with the events that became true:
// kWritable when the callback is set, kReadable when datagrams arrived.
//
// Families are kept apart: an IPv6 socket never receives IPv4 datagrams
// and cannot send to IPv4 (or IPv4-mapped) addresses, as if IPV6_V6ONLY
// were always set. An application that serves both opens one socket each.
//
// Not supported yet: SO_BROADCAST (sending to a broadcast address is left
// to the route), multicast group membership, IPv6 scope ids (a link-local
// destination goes out of the NIC that owns fe80::/64's route), ICMP
// errors reported to the socket (ECONNREFUSED): the stack does not pass
// them to transports yet.
#ifndef NETSTACK_UDP_UDP_SOCKET_H_
#define NETSTACK_UDP_UDP_SOCKET_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "netstack/base/time.h"
#include "netstack/buffer/payload_view.h"
#include "netstack/transport/address.h"
#include "netstack/transport/errors.h"
#include "netstack/transport/notifier.h"
#include "netstack/udp/datagram_queue.h"
#include "netstack/udp/port_table.h"

namespace netstack::udp {

class UdpLayer;

// What RecvFrom copied.
struct RecvResult {
  size_t bytes = 0;  // copied into `out`
  transport::SocketAddress from;
  bool truncated = false;  // the datagram was longer than `out`
};

// What RecvDatagram hands over: the payload still in the received chunk.
struct ReceivedDatagram {
  buffer::PayloadView payload;
  transport::SocketAddress from;
};

class UdpSocket {
 public:
  struct Stats {
    uint64_t datagrams_received = 0;  // queued for the application
    uint64_t datagrams_sent = 0;      // handed to the stack
    // Dropped because the receive queue was full (Linux SO_RXQ_OVFL).
    uint64_t receive_queue_full = 0;
  };

  UdpSocket(const UdpSocket&) = delete;
  UdpSocket& operator=(const UdpSocket&) = delete;
  // Closes the socket.
  ~UdpSocket();

  transport::Family family() const { return family_; }

  // SO_REUSEADDR: bindings that all set it may share an address and port.
  // Only before Bind (InvalidState after).
  absl::Status SetReuseAddress(bool on);
  // SO_RCVBUF, in charged bytes (datagram_queue.h). InvalidArgument for 0.
  absl::Status SetReceiveBufferSize(size_t bytes);
  size_t receive_buffer_size() const { return queue_.limit(); }

  [[nodiscard]] absl::Status Bind(const transport::SocketAddress& local);
  [[nodiscard]] absl::Status Connect(const transport::SocketAddress& remote);
  // Forgets the peer (connect to AF_UNSPEC). An address fixed by Connect
  // goes back to unspecified, unless that would conflict with a later
  // binding (then it stays).
  [[nodiscard]] absl::Status Disconnect();

  // MessageTooLong above 65507 bytes (IPv4) / 65527 (IPv6);
  // HostUnreachable without a route; InvalidArgument for port 0, the
  // unspecified address or the other family; NoBuffers when a pool is
  // exhausted or the stack refused the packet.
  [[nodiscard]] absl::Status SendTo(std::span<const uint8_t> data,
                                    const transport::SocketAddress& dst,
                                    Instant now);
  // To the connected peer; NotConnected otherwise.
  [[nodiscard]] absl::Status Send(std::span<const uint8_t> data, Instant now);
  // One datagram whose payload is `views`, shared with the caller and
  // never copied (a relay passes on what it read into pooled chunks). At
  // most PacketBuffer::kMaxPayloadViews views (InvalidArgument beyond);
  // otherwise the errors of SendTo.
  [[nodiscard]] absl::Status SendViewsTo(
      std::span<const buffer::PayloadView> views,
      const transport::SocketAddress& dst, Instant now);

  // WouldBlock when no datagram is queued.
  [[nodiscard]] absl::StatusOr<RecvResult> RecvFrom(std::span<uint8_t> out);
  [[nodiscard]] absl::StatusOr<ReceivedDatagram> RecvDatagram();
  // The pending error (an ICMP error on a connected socket: ECONNREFUSED
  // for port unreachable), cleared by reading it, as SO_ERROR. Send and
  // the Recv calls return it first, once.
  absl::Status TakeError();
  // Payload size of the next datagram (FIONREAD); nullopt when none.
  std::optional<size_t> NextDatagramSize() const;

  // The callback gets kWritable at the next Dispatch (and kReadable if
  // datagrams are already queued).
  void set_callback(transport::ReadyCallback cb);
  // What holds now: kWritable while open, kReadable while a datagram is
  // queued; 0 once closed.
  uint32_t Events() const;

  // Port 0 until bound; the unspecified address when bound to any.
  transport::SocketAddress local_address() const;
  std::optional<transport::SocketAddress> remote_address() const {
    return binding_.remote;
  }
  bool is_bound() const { return bound_; }
  bool is_closed() const { return closed_; }
  const Stats& stats() const { return stats_; }

  // Unbinds and drops queued datagrams; the callback is not called again
  // (it may itself call Close, or destroy the socket). Every later call
  // fails with InvalidState. Idempotent.
  void Close();

 private:
  friend class UdpLayer;
  UdpSocket(UdpLayer& layer, transport::Family family, size_t rcvbuf);

  // An ICMP error for a connected socket: kept until the next Send or
  // Recv returns it (once), and the socket is marked readable with
  // kError (SO_ERROR semantics).
  void SetError(absl::Status error);

  // Receive path (from UdpLayer): queues the datagram and marks the
  // socket readable, or counts a full queue. Never allocates once the
  // queue's ring has grown to its working size.
  bool Enqueue(buffer::PayloadView payload,
               const transport::SocketAddress& from);
  absl::Status CheckDestination(const transport::SocketAddress& dst) const;
  // Binds port 0 on the unspecified address if not bound yet.
  absl::Status AutoBind();
  // What SendTo and SendViewsTo check first (closed, a pending error,
  // the destination, the size), then AutoBind.
  absl::Status PrepareSend(const transport::SocketAddress& dst, size_t len);

  UdpLayer& layer_;
  const transport::Family family_;
  PortBinding binding_;
  bool bound_ = false;
  // Bind() named an address: Connect must not replace it.
  bool address_bound_explicitly_ = false;
  bool closed_ = false;
  DatagramQueue queue_;
  transport::ReadyCallback callback_;
  // Its callback forwards to callback_ while the socket is open.
  transport::Notifiable notifiable_;
  Stats stats_;
  absl::Status error_;  // pending ICMP error (SetError)
};

}  // namespace netstack::udp

#endif  // NETSTACK_UDP_UDP_SOCKET_H_
