// UDP flows: the guest's datagrams to host peers, relayed through
// connected host UDP sockets (issue 13, "Outbound flows", UDP).
//
// The table registers as the UdpLayer's unmatched-datagram handler: a
// unicast datagram that no netstack socket takes (the DNS forwarder's
// socket on the DNS address comes first) is looked up by the guest's
// (source, destination) pair.
//   - A new pair opens a non-blocking host socket of the destination's
//     family, bound to OutboundBind's address when set, with IP_RECVERR /
//     IPV6_RECVERR, and connect()ed to the destination. A connect that
//     fails at once (no route) answers the guest with ICMP net
//     unreachable; a table at max_flows answers with ICMP administratively
//     prohibited (not port unreachable: the peer's port is not known to be
//     closed, our policy refused the flow; the guest's kernel reports
//     EHOSTUNREACH instead of a misleading ECONNREFUSED).
//   - Guest to host: sendmmsg straight from the received chunk, never a
//     copy. A USO super-datagram (the guest sent with UDP_SEGMENT and the
//     TAP offers USO; issue #34) leaves in ONE sendmsg with a UDP_SEGMENT
//     control message, so the host kernel cuts it, not us. A socket that
//     refuses that (EINVAL: a segment larger than the path's MTU; EIO:
//     no checksum offload on the route) makes the flow split its super-
//     datagrams here from then on, a sendmmsg of views (counted).
//   - A full host send buffer (EAGAIN) does not drop: what is left waits
//     on the flow's backlog (kBacklog datagrams or super-datagrams, in
//     order; later datagrams queue behind it) and leaves, by sendmmsg, when
//     the socket is writable again. Past kBacklog the newest is dropped
//     (to_host_dropped.full), as a full socket buffer would drop it.
//   - Host to guest: recvmmsg, up to kRecvBatch datagrams per call, each
//     into a pooled chunk. The socket has UDP_GRO: a peer that sends with
//     UDP_SEGMENT (or a GRO'd burst) arrives as one super-datagram with
//     its segment size, and each of its datagrams goes to the guest as a
//     view of the one chunk. UdpLayer::SendFrom sends from the peer's
//     address and port to the guest's; the stack fragments above the MTU.
//     Where the guest's link takes USO (a TAP with virtio-net headers,
//     LinkCapabilities::udp_gso), a super-datagram instead leaves whole,
//     ONE frame that the guest's kernel cuts (UdpLayer::SendSuperFrom;
//     to_guest_uso), cut here only where it exceeds one frame's limits;
//     so does a recvmmsg's run of plain datagrams of one size (a peer
//     without UDP_SEGMENT, a path without GRO: the host's loopback), one
//     view per datagram, up to 16.
//     At most kReadBatch datagrams or super-datagrams per readiness call.
//   - A host ICMP error (read from the socket's error queue) becomes a
//     destination unreachable to the guest, from the peer's address:
//     port unreachable for port unreachable, host/net for those.
//   - Idle flows (no datagram either way for idle_timeout) close. Flows
//     sit on lists in order of their last activity, one list per timeout,
//     so expiry looks at the fronts only and activity is an O(1) splice.
//   - Inbound flows (-u through the stack, ReadInbound) have a share of
//     their own (max_inbound_flows), so clients on the network, whose
//     addresses may be spoofed, never take the guest's outbound share. One
//     the guest has not answered closes after inbound_unreplied_timeout
//     (conntrack's UNREPLIED), and a full share makes room by evicting the
//     least recently active unanswered flow, else the least recently
//     active answered one: a new client always gets in (review 2026-12-06,
//     finding 8).
// Single-threaded, on the stack's event loop; outlives none of its flows.
#ifndef NETSTACK_BACKEND_UDP_FLOWS_H_
#define NETSTACK_BACKEND_UDP_FLOWS_H_

#include <sys/socket.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "netstack/backend/rate_limit.h"
#include "netstack/backend/udp_host_socket.h"
#include "netstack/base/time.h"
#include "netstack/buffer/chunk.h"
#include "netstack/buffer/packet.h"
#include "netstack/eventloop/event_loop.h"
#include "netstack/stack/stack.h"
#include "netstack/transport/address.h"
#include "netstack/udp/udp_layer.h"

namespace netstack::backend {

struct UdpFlowOptions {
  size_t max_flows = 1024;            // --max-udp-flows: the guest's own
  // Inbound flows at once (ReadInbound), apart from max_flows. They hold
  // no host socket (the forward's carries them), so no fd either.
  size_t max_inbound_flows = 1024;
  Duration idle_timeout = absl::Seconds(180);  // --udp-timeout
  // An inbound flow the guest never answered closes after this (at most
  // idle_timeout): a client's one datagram, or a spoofed one's, holds its
  // entry as briefly as Linux's conntrack holds an UNREPLIED UDP entry
  // (nf_conntrack_udp_timeout, 30 s). Answered, it has idle_timeout.
  Duration inbound_unreplied_timeout = absl::Seconds(30);
  OutboundBind bind;                  // --outbound-bind
  // Destinations that are the stack itself (the gateway, the DNS
  // address): never relayed; the stack answers port unreachable.
  std::vector<transport::IpAddress> self_addresses;
  // The egress policy's hooks (the Backend's; issue #33). `admit` is
  // asked once for each new outbound flow, never per datagram nor for
  // inbound flows: false refuses it before any host socket, with ICMP
  // administratively prohibited quoting the datagram (refused.policy).
  // `closed` is told when a flow `admit` let in ends, however it ends:
  // its payload bytes each way and when it opened. Unset: every flow.
  // `admit` may also say drop (the new-flow rate, rate_limit.h): the
  // datagram is dropped in silence and the guest resends.
  std::function<Admission(const transport::SocketAddress& guest,
                          const transport::SocketAddress& peer, Instant now)>
      admit;
  // The guest's egress byte rate (the Backend's; null: none): a datagram
  // of the guest's own flows over it is dropped (counted there).
  EgressLimiter* egress_limit = nullptr;
  std::function<void(const transport::SocketAddress& guest,
                     const transport::SocketAddress& peer, uint64_t bytes_out,
                     uint64_t bytes_in, Instant opened)>
      closed;
  // Tests: stands in for sendmmsg(fd, msgs, n, MSG_DONTWAIT | MSG_NOSIGNAL)
  // on the guest's flows (same return value and errno), to make a host
  // socket refuse part of a batch. Unset: sendmmsg.
  std::function<int(int fd, mmsghdr* msgs, unsigned n)> send_batch;
  // The guest's datagrams wait for the end of the link's receive batch
  // (a TAP reads up to 64 frames; UdpLayer's OnReceiveBatchEnd), or of
  // the loop's turn, whichever comes first, and each flow's leave
  // together: one sendmmsg, datagrams of one size in a row as one
  // UDP_SEGMENT message. Off: each leaves when it arrives.
  bool coalesce = false;
};

// X(field, "name")
#define NETSTACK_UDP_FLOW_COUNTERS(X)                                     \
  X(opened, "opened")                                                     \
  X(closed_idle, "closed.idle")                                           \
  X(closed_shutdown, "closed.shutdown")                                   \
  X(closed_socket_error, "closed.socket_error")                           \
  /* Closed by CloseOutbound: a new egress policy denies them. */         \
  X(closed_policy, "closed.policy")                                       \
  X(refused_limit, "refused.limit")                                       \
  /* UdpFlowOptions::admit said no (the egress policy). */                \
  X(refused_policy, "refused.policy")                                     \
  X(refused_self, "refused.self")                                         \
  /* Port 0 either way, an unspecified destination, or one that */       \
  /* embeds IPv4 (::ffff:0:0/96, ::/96): never relayed. */                \
  X(refused_bad_address, "refused.bad_address")                           \
  X(refused_socket, "refused.socket")                                     \
  X(refused_connect, "refused.connect")                                   \
  X(datagrams_to_host, "datagrams_to_host")                               \
  X(bytes_to_host, "bytes_to_host")                                       \
  X(datagrams_to_guest, "datagrams_to_guest")                             \
  X(bytes_to_guest, "bytes_to_guest")                                     \
  /* Guest USO super-datagrams sent whole with UDP_SEGMENT, and those */  \
  /* split here because the host socket refused UDP_SEGMENT. */           \
  X(to_host_segmented, "to_host_segmented")                               \
  X(to_host_split, "to_host_split")                                       \
  /* Messages of several same-sized datagrams coalesced in a turn, sent */ \
  /* with UDP_SEGMENT (UdpFlowOptions::coalesce). */                      \
  X(to_host_coalesced, "to_host_coalesced")                               \
  /* Datagrams that found the host socket's buffer full (EAGAIN) and */   \
  /* waited on the flow's backlog; sendmmsg calls on guest flows. */      \
  X(to_host_waited, "to_host_waited")                                     \
  X(to_host_batches, "to_host_batches")                                   \
  /* Host super-datagrams read with UDP_GRO; recvmmsg calls (the */      \
  /* guest's flows and -u forwards' sockets). */                          \
  X(to_guest_gro, "to_guest_gro")                                         \
  X(to_guest_batches, "to_guest_batches")                                 \
  /* Super-frames sent to the guest whole (USO), where the link takes */  \
  /* them: GRO reads, and recvmmsg runs of same-sized datagrams. */       \
  X(to_guest_uso, "to_guest_uso")                                         \
  /* Guest to host: the host socket's buffer was full (EAGAIN), the */    \
  /* datagram was too big for the host path (EMSGSIZE), another error. */ \
  X(to_host_dropped_full, "to_host_dropped.full")                         \
  X(to_host_dropped_too_big, "to_host_dropped.too_big")                   \
  X(to_host_dropped_error, "to_host_dropped.error")                       \
  /* Host to guest: no chunk, too long for the guest's family, the */     \
  /* stack refused it. */                                                 \
  X(to_guest_dropped_no_buffer, "to_guest_dropped.no_buffer")             \
  X(to_guest_dropped_too_big, "to_guest_dropped.too_big")                 \
  X(to_guest_dropped_send, "to_guest_dropped.send")                       \
  /* Inbound (-u through the stack): flows opened, and datagrams */      \
  /* dropped because the guest-side source port was taken or no */       \
  /* datagram could be read. */                                          \
  X(inbound_opened, "inbound.opened")                                     \
  X(inbound_refused_port, "inbound.refused_port")                         \
  /* Inbound flows closed to make room in a full inbound share: one the */ \
  /* guest never answered (least recently active first), else the least */ \
  /* recently active answered one; and those the unreplied timeout */      \
  /* closed (counted in closed.idle too). */                               \
  X(inbound_evicted_unreplied, "inbound.evicted_unreplied")               \
  X(inbound_evicted_replied, "inbound.evicted_replied")                   \
  X(inbound_unreplied_expired, "inbound.unreplied_expired")               \
  X(host_icmp_port_unreachable, "host_icmp.port_unreachable")             \
  X(host_icmp_unreachable, "host_icmp.unreachable")                       \
  X(host_icmp_other, "host_icmp.other")

// What one inbound forward's flows moved (-u through the stack); the
// forward owns it and outlives its flows (CloseInbound).
struct InboundUdpCounts {
  uint64_t flows_opened = 0;
  uint64_t flows_open = 0;
  uint64_t flows_expired = 0;
  // Closed to make room for another client (UdpFlowOptions::
  // max_inbound_flows; the table's inbound.evicted_* say which kind).
  uint64_t flows_evicted = 0;
  // Of flows_evicted, those the guest never answered; of flows_expired,
  // those the unreplied timeout closed.
  uint64_t flows_evicted_unreplied = 0;
  uint64_t flows_expired_unreplied = 0;
  uint64_t refused_limit = 0;
  uint64_t dropped = 0;  // either way: no room, a send that failed
  uint64_t datagrams_to_guest = 0;
  uint64_t bytes_to_guest = 0;
  uint64_t datagrams_from_guest = 0;
  uint64_t bytes_from_guest = 0;
};

struct UdpFlowCounters {
#define NETSTACK_UDP_FLOW_FIELD(f, name) uint64_t f = 0;
  NETSTACK_UDP_FLOW_COUNTERS(NETSTACK_UDP_FLOW_FIELD)
#undef NETSTACK_UDP_FLOW_FIELD
  // "backend.udp.<name> value" lines, every counter.
  std::string Format() const;
};

class UdpFlowTable final : public udp::UnmatchedDatagramHandler,
                           public eventloop::Poller {
 public:
  static constexpr int kReadBatch = 32;
  // Datagrams per recvmmsg (each into a 64 KiB chunk, held only during
  // the call) and messages per sendmmsg.
  static constexpr unsigned kRecvBatch = 16;
  static constexpr unsigned kSendBatch = 64;
  // Datagrams (or super-datagrams) a flow holds while its host socket's
  // buffer is full.
  static constexpr size_t kBacklog = 64;
  // SO_RCVBUF of a flow's host socket (the kernel doubles it for its
  // bookkeeping): a host peer's burst waits there for our next read.
  static constexpr int kHostReceiveBuffer = 4 << 20;
  // One UDP_SEGMENT message: at most this many datagrams (Linux's
  // UDP_MAX_SEGMENTS is 64 before 6.x, 128 after) and payload bytes.
  static constexpr uint32_t kMaxSegments = 64;
  static constexpr uint32_t kMaxSegmentedPayload = 65507;

  // Registers with `udp` as its unmatched handler (and with `loop` as a
  // poller, for the idle timer); both undone by the destructor, which
  // closes every flow. Everything must outlive the table.
  UdpFlowTable(stack::Stack& stack, udp::UdpLayer& udp,
               buffer::ChunkPool& chunks, buffer::PacketPool& packets,
               eventloop::EventLoop& loop, UdpFlowOptions options);
  UdpFlowTable(const UdpFlowTable&) = delete;
  UdpFlowTable& operator=(const UdpFlowTable&) = delete;
  ~UdpFlowTable() override;

  bool OnUnmatchedDatagram(const transport::SocketAddress& src,
                           const transport::SocketAddress& dst,
                           const buffer::PayloadView& payload,
                           Instant now) override;
  // coalesce: the batch's datagrams leave now (FlushDirty).
  void OnReceiveBatchEnd(Instant now) override { FlushDirty(now); }
  // A USO super-datagram: relayed whole (UDP_SEGMENT) on the guest's flows.
  bool OnUnmatchedSuperDatagram(const transport::SocketAddress& src,
                                const transport::SocketAddress& dst,
                                const buffer::PayloadView& payload,
                                uint16_t segment_size, Instant now) override;
  // The oldest flow's expiry.
  Instant NextDeadline() const override;
  // Closes the flows idle for idle_timeout.
  void Poll(Instant now) override;

  // Inbound flows (host -> guest, -u through the stack), in the same
  // table as the guest's own but with their own limit and, until the
  // guest answers, a shorter timeout (UdpFlowOptions): reads the
  // datagrams waiting on `host_fd` (a forward's bound socket, not owned)
  // and sends each to `guest` from `SourceFor(client)`: the client's own
  // IPv4 address off the host's loopback, else `gateway`; its port when
  // free, another one otherwise. The guest's replies to that source go
  // back to the client from `host_fd`. Each datagram is received into a
  // pooled chunk and handed to the stack as a view of it, no copy: by
  // recvmmsg, kRecvBatch at a time, at most kReadBatch a call.
  void ReadInbound(int host_fd, const transport::SocketAddress& guest,
                   const transport::IpAddress& gateway,
                   InboundUdpCounts& counts, Instant now);
  // Closes the inbound flows of `host_fd` (its forward is going).
  void CloseInbound(int host_fd);

  // Closes each of the guest's own flows `doomed` says must go (a new
  // egress policy denies it; counted closed.policy); the guest's next
  // datagram on it is a new flow, judged again. Returns how many.
  size_t CloseOutbound(
      const std::function<bool(const transport::SocketAddress& guest,
                               const transport::SocketAddress& peer)>& doomed);

  size_t size() const { return flows_.size(); }
  const UdpFlowCounters& counters() const { return counters_; }
  // The host socket of the guest's (src, dst) flow; -1 if none (tests).
  int HostFd(const transport::SocketAddress& src,
             const transport::SocketAddress& dst) const;

 private:
  struct Flow;
  class FlowHandler;
  struct TxScratch;
  struct RxScratch;
  // A datagram, or a super-datagram of segment_size-byte datagrams, on
  // its way to the host.
  struct Pending {
    buffer::PayloadView payload;
    uint16_t segment_size = 0;  // 0: one datagram
  };
  // How far SendNow got: entries sent or dropped, bytes of the next one
  // already sent (a split super-datagram), and whether the flow closed.
  struct SendProgress {
    size_t entries = 0;
    uint32_t offset = 0;
    bool closed = false;
  };
  using Key = transport::FourTuple;  // local: the guest, remote: the peer

  // `udp_len`: the guest's datagram's (header included), for the quote
  // of an error that refuses the flow.
  Flow* Open(const Key& key, uint16_t udp_len, Instant now);
  // An inbound flow for `client` on `host_fd`; null when refused (counted).
  Flow* OpenInbound(int host_fd, const transport::SocketAddress& client,
                    const transport::SocketAddress& guest,
                    const transport::IpAddress& gateway,
                    InboundUdpCounts& counts, Instant now);
  // Closes one inbound flow to make room (counted); false if none.
  bool EvictInbound();
  void Close(Flow* flow);
  // Puts `flow` at the end of `list` (its timeout's).
  void Link(Flow& flow, std::list<Flow*>& list);
  void Touch(Flow& flow, Instant now);
  // The guest sent on an inbound flow: it moves to idle_timeout.
  void MarkReplied(Flow& flow);
  // Closes the flows of `list` idle for `timeout` at `now`.
  void ExpireList(std::list<Flow*>& list, Duration timeout, Instant now);
  Duration UnrepliedTimeout() const {
    return std::min(options_.inbound_unreplied_timeout, options_.idle_timeout);
  }
  bool Relay(const transport::SocketAddress& src,
             const transport::SocketAddress& dst,
             const buffer::PayloadView& payload, uint16_t segment_size,
             Instant now);
  void SendToHost(Flow& flow, const buffer::PayloadView& payload,
                  uint16_t segment_size, Instant now);
  // Sends `entries` in order, the first from byte `first_offset`, until
  // the socket's buffer is full (EAGAIN); other errors drop the datagram
  // they concern (counted).
  SendProgress SendNow(Flow& flow, std::span<const Pending> entries,
                       uint32_t first_offset, Instant now);
  // Keeps what SendNow left of `entries` on the backlog (room allowing).
  void Backlog(Flow& flow, std::span<const Pending> entries,
               const SendProgress& done);
  // The socket is writable (or the turn ends): the backlog leaves; false
  // if the flow closed meanwhile.
  bool FlushBacklog(Flow& flow, Instant now);
  // UdpFlowOptions::coalesce: `entry` waits on the backlog for the turn's
  // end (FlushDirty).
  void Queue(Flow& flow, const Pending& entry, Instant now);
  void FlushDirty(Instant now);
  int SendBatch(Flow& flow, mmsghdr* msgs, unsigned n);
  void ReadHost(Flow& flow, Instant now);
  // `n` bytes in `chunk` to the guest from the flow's peer: one datagram,
  // or (segment_size > 0, a UDP_GRO read) datagrams of segment_size
  // bytes; false when one was dropped (counted: too big, or the stack
  // refused).
  bool SendToGuest(Flow& flow, buffer::ChunkRef chunk, size_t n,
                   uint16_t segment_size, Instant now);
  // USO where the guest's link takes it: the run of plain datagrams of
  // one size (the last one shorter or equal) that starts at message
  // `first` of the n rx_ holds leaves as ONE super-datagram of views.
  // Returns the messages it took (0: no run of 2; they go one by one).
  int SendRunToGuest(Flow& flow, int first, int n, Instant now);
  // Drains the error queue; false if the flow was closed.
  bool ReadErrors(Flow& flow, Instant now);
  bool IsSelf(const transport::IpAddress& ip) const;

  stack::Stack& stack_;
  udp::UdpLayer& udp_;
  buffer::ChunkPool& chunks_;
  buffer::PacketPool& packets_;
  eventloop::EventLoop& loop_;
  const UdpFlowOptions options_;
  absl::flat_hash_map<Key, std::unique_ptr<Flow>> flows_;
  // Inbound flows by (their forward's socket, the host client).
  using InboundKey = std::pair<int, transport::SocketAddress>;
  absl::flat_hash_map<InboundKey, Flow*> inbound_;
  uint16_t next_inbound_port_ = 49152;
  // Least recently active first, one list per timeout: the guest's own
  // flows and the inbound ones it answered (idle_timeout), and the
  // inbound ones it has not (UnrepliedTimeout). Their sizes are the
  // shares' counts.
  std::list<Flow*> outbound_lru_;
  std::list<Flow*> inbound_replied_lru_;
  std::list<Flow*> inbound_unreplied_lru_;
  UdpFlowCounters counters_;
  // sendmmsg/recvmmsg arrays, reused (no allocation per datagram).
  std::unique_ptr<TxScratch> tx_;
  std::unique_ptr<RxScratch> rx_;
  // Flows with datagrams queued this turn (coalesce); null: closed since.
  std::vector<Flow*> dirty_;
  eventloop::EventLoop::HookId turn_hook_ = 0;
};

}  // namespace netstack::backend

#endif  // NETSTACK_BACKEND_UDP_FLOWS_H_
