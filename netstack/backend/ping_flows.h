// Ping: the guest's ICMP and ICMPv6 echo requests to host peers, relayed
// through unprivileged ICMP sockets (socket(AF_INET, SOCK_DGRAM,
// IPPROTO_ICMP), IPPROTO_ICMPV6 for IPv6), issue 13 "Outbound flows".
//
// The forwarder is the stack's EchoHandler. A request whose destination
// is not one of `self_addresses` (the gateway and DNS addresses, which the
// stack answers itself) belongs to the flow of (guest address, guest echo
// id, destination); each flow is one ping socket connect()ed to the
// destination. The kernel picks the echo id on the wire (the socket's
// "port") and fixes the checksum; the sequence number and data go
// through unchanged, the data without a copy (sendmsg with an iovec for
// the 8-byte header and one for the request's data view).
//
// An echo reply read from the socket gets the guest's id back and a new
// checksum, and goes to the guest from the destination's address, as a
// view of the chunk it was read into. Nothing else is ever sent: no route,
// a silent host, a socket we may not open, all leave the guest without an
// answer, as its own kernel would see it (never a forged reply).
//
// ping_group_range: when the kernel refuses ping sockets (EACCES), the
// forwarder logs it once to stderr, counts every refused request, and
// tries again no sooner than a minute later.
//
// Limits: max_flows sockets at once (a request past it is dropped,
// counted), idle_timeout after the last request or reply.
//
// The egress policy (issue #33): PingOptions::admit is asked once per new
// flow; a refused request is answered at once with destination
// unreachable, administratively prohibited (ICMP 3/13, ICMPv6 1/1),
// quoting it: the one error this forwarder sends, since the refusal is
// ours and the guest must not wait for a silent peer.
#ifndef NETSTACK_BACKEND_PING_FLOWS_H_
#define NETSTACK_BACKEND_PING_FLOWS_H_

#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "netstack/backend/rate_limit.h"
#include "netstack/backend/udp_host_socket.h"
#include "netstack/base/time.h"
#include "netstack/buffer/chunk.h"
#include "netstack/buffer/packet.h"
#include "netstack/eventloop/event_loop.h"
#include "netstack/stack/stack.h"
#include "netstack/transport/address.h"

namespace netstack::backend {

struct PingOptions {
  size_t max_flows = 256;
  Duration idle_timeout = absl::Seconds(60);
  OutboundBind bind;
  std::vector<transport::IpAddress> self_addresses;
  // The egress policy's hooks (the Backend's), as UdpFlowOptions's:
  // `admit` once per new flow (refused: ICMP administratively
  // prohibited, no socket; dropped, the new-flow rate: nothing, the
  // guest pings again); `closed` when an admitted flow ends, with its
  // echo data bytes each way (requests out, replies in) and when it
  // opened. Addresses with port 0.
  std::function<Admission(const transport::SocketAddress& guest,
                          const transport::SocketAddress& peer, Instant now)>
      admit;
  // The guest's egress byte rate (the Backend's; null: none): a request
  // (its 8-byte header and data) over it is dropped.
  EgressLimiter* egress_limit = nullptr;
  std::function<void(const transport::SocketAddress& guest,
                     const transport::SocketAddress& peer, uint64_t bytes_out,
                     uint64_t bytes_in, Instant opened)>
      closed;
};

// X(field, "name")
#define NETSTACK_PING_COUNTERS(X)                                  \
  X(opened, "opened")                                              \
  X(closed_idle, "closed.idle")                                    \
  X(closed_shutdown, "closed.shutdown")                            \
  /* CloseIf: a new egress policy denies them. */                  \
  X(closed_policy, "closed.policy")                                \
  X(requests, "requests")                                          \
  X(replies, "replies")                                            \
  X(refused_limit, "refused.limit")                                \
  /* PingOptions::admit said no: answered administratively */      \
  /* prohibited. */                                                \
  X(refused_policy, "refused.policy")                              \
  /* The kernel refused a ping socket (ping_group_range). */       \
  X(refused_forbidden, "refused.forbidden")                        \
  X(refused_socket, "refused.socket")                              \
  X(refused_connect, "refused.connect")                            \
  X(send_failed, "send_failed")                                    \
  X(reply_malformed, "reply_malformed")                            \
  X(reply_no_buffer, "reply_no_buffer")                            \
  X(reply_send_failed, "reply_send_failed")                        \
  X(host_errors, "host_errors")

struct PingCounters {
#define NETSTACK_PING_FIELD(f, name) uint64_t f = 0;
  NETSTACK_PING_COUNTERS(NETSTACK_PING_FIELD)
#undef NETSTACK_PING_FIELD
  // "backend.ping.<name> value" lines, every counter.
  std::string Format() const;
};

class PingForwarder final : public stack::EchoHandler,
                            public eventloop::Poller {
 public:
  static constexpr int kReadBatch = 32;

  // Registers as `stack`'s echo handler and `loop`'s poller; the
  // destructor undoes both and closes every socket.
  PingForwarder(stack::Stack& stack, buffer::ChunkPool& chunks,
                buffer::PacketPool& packets, eventloop::EventLoop& loop,
                PingOptions options);
  PingForwarder(const PingForwarder&) = delete;
  PingForwarder& operator=(const PingForwarder&) = delete;
  ~PingForwarder() override;

  bool OnEchoRequest(const stack::EchoRequest& request, Instant now) override;
  Instant NextDeadline() const override;
  void Poll(Instant now) override;

  // Closes each flow `doomed` says must go (a new egress policy denies
  // it; closed.policy); the guest's next request is judged again.
  // Returns how many.
  size_t CloseIf(
      const std::function<bool(const transport::SocketAddress& guest,
                               const transport::SocketAddress& peer)>& doomed);

  size_t size() const { return flows_.size(); }
  const PingCounters& counters() const { return counters_; }

 private:
  struct Key {
    transport::IpAddress guest;
    transport::IpAddress peer;
    uint16_t id = 0;
    friend bool operator==(const Key&, const Key&) = default;
    template <typename H>
    friend H AbslHashValue(H h, const Key& k) {
      return H::combine(std::move(h), k.guest, k.peer, k.id);
    }
  };
  struct Flow;
  class FlowHandler;

  Flow* Open(const Key& key, Instant now);
  // Answers `r` with administratively prohibited (refused by policy).
  void Refuse(const stack::EchoRequest& r, Instant now);
  void Close(Flow* flow);
  void ReadHost(Flow& flow, Instant now);

  stack::Stack& stack_;
  buffer::ChunkPool& chunks_;
  buffer::PacketPool& packets_;
  eventloop::EventLoop& loop_;
  const PingOptions options_;
  absl::flat_hash_map<Key, std::unique_ptr<Flow>> flows_;
  std::list<Flow*> lru_;  // least recently active first
  bool forbidden_logged_ = false;
  Instant forbidden_until_ = absl::InfinitePast();
  PingCounters counters_;
};

}  // namespace netstack::backend

#endif  // NETSTACK_BACKEND_PING_FLOWS_H_
