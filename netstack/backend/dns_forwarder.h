// The DNS forwarder (issue 13, "Guest configuration", DNS): queries to the
// plan's DNS address (10.0.2.3 / fd00::3, port 53), over UDP and TCP, go
// to the upstream resolvers and their answers come back.
//
// Guest side: a netstack UdpSocket bound to each DNS address and port 53,
// and a TcpSocket listening there. A TCP connection carries messages with
// a 2-byte length prefix (RFC 1035 4.2.2, RFC 7766); each is forwarded
// like a UDP query, and its answer is written back with its prefix.
//
// Upstream side: one connected host UDP socket per upstream (connected,
// so the kernel drops datagrams from anyone else), bound to OutboundBind
// unless the upstream is on the host's loopback (127.0.0.53 must work).
// A query goes to the current upstream; a timeout moves the current one
// to the next (failover), the guest's resolver retries.
//
// Query ids: each forwarded query gets a fresh random id that no pending
// query uses, so two guests' (or one guest's two sockets') queries with
// the same id cannot take each other's answers, and an off-path host
// cannot guess it. The guest's id is put back in the answer. The id is
// replaced without a copy of the query: sendmsg with an iovec for the new
// id and one for the rest of the received view. The answer is received
// into a pooled chunk, its id rewritten in place and sent as a view.
//
// Bounded: max_pending queries wait at once (past it, a query is dropped
// and counted: the guest retries), each for at most `timeout`;
// max_tcp_clients guest connections, each with one partial message
// buffered (at most 2 + 65535 bytes).
//
// Malformed input is dropped with a counted reason, never answered:
// shorter than the 12-byte header, a response (QR=1) where a query
// belongs or the other way round, a TCP message shorter than a header
// (the connection is closed), an answer with an id we did not send.
//
// Not done: an answer with TC=1 to a TCP query is passed on as it is
// (the upstream leg is UDP); the guest's resolver then retries, but large
// answers need the upstream leg to be TCP as well.
#ifndef NETSTACK_BACKEND_DNS_FORWARDER_H_
#define NETSTACK_BACKEND_DNS_FORWARDER_H_

#include <cstdint>
#include <list>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "netstack/backend/udp_host_socket.h"
#include "netstack/base/time.h"
#include "netstack/buffer/chunk.h"
#include "netstack/eventloop/event_loop.h"
#include "netstack/tcp/tcp_layer.h"
#include "netstack/tcp/tcp_socket.h"
#include "netstack/transport/address.h"
#include "netstack/udp/udp_layer.h"
#include "netstack/udp/udp_socket.h"

namespace netstack::backend {

struct DnsForwarderOptions {
  // The DNS addresses and ports the guest sends to (10.0.2.3:53,
  // [fd00::3]:53): each must be one of the stack's addresses.
  std::vector<transport::SocketAddress> listen;
  // --dns-upstream; empty: ReadResolvConf() (dns_config.h).
  std::vector<transport::SocketAddress> upstreams;
  OutboundBind bind;
  size_t max_pending = 512;
  Duration timeout = absl::Seconds(5);
  size_t max_tcp_clients = 64;
  bool tcp = true;  // listen on TCP too (needs a TcpLayer)
  uint64_t seed = 0;  // the query id generator's
};

// X(field, "name")
#define NETSTACK_DNS_COUNTERS(X)                                          \
  X(queries_udp, "queries.udp")                                           \
  X(queries_tcp, "queries.tcp")                                           \
  X(answers_udp, "answers.udp")                                           \
  X(answers_tcp, "answers.tcp")                                           \
  X(timeouts, "timeouts")                                                 \
  X(tcp_connections, "tcp_connections")                                   \
  X(dropped_short, "dropped.short")                                       \
  X(dropped_not_query, "dropped.not_query")                               \
  X(dropped_table_full, "dropped.table_full")                             \
  X(dropped_upstream_send, "dropped.upstream_send")                       \
  X(dropped_reply_short, "dropped.reply_short")                           \
  X(dropped_reply_not_response, "dropped.reply_not_response")             \
  X(dropped_reply_unknown_id, "dropped.reply_unknown_id")                 \
  X(dropped_reply_no_buffer, "dropped.reply_no_buffer")                   \
  X(dropped_reply_send, "dropped.reply_send")                             \
  X(dropped_reply_client_gone, "dropped.reply_client_gone")               \
  X(dropped_tcp_clients_full, "dropped.tcp_clients_full")                 \
  X(dropped_tcp_malformed, "dropped.tcp_malformed")

struct DnsCounters {
#define NETSTACK_DNS_FIELD(f, name) uint64_t f = 0;
  NETSTACK_DNS_COUNTERS(NETSTACK_DNS_FIELD)
#undef NETSTACK_DNS_FIELD
  // "backend.dns.<name> value" lines, every counter.
  std::string Format() const;
};

class DnsForwarder final : public eventloop::Poller {
 public:
  static constexpr size_t kHeaderLen = 12;

  // Binds the guest-side sockets and opens the upstream sockets; `tcp`
  // may be null when options.tcp is false. Registers with `loop` as a
  // poller (timeouts). Errors: the bind's, a socket's, or no upstream.
  static absl::StatusOr<std::unique_ptr<DnsForwarder>> Create(
      udp::UdpLayer& udp, tcp::TcpLayer* tcp, buffer::ChunkPool& chunks,
      eventloop::EventLoop& loop, DnsForwarderOptions options);
  DnsForwarder(const DnsForwarder&) = delete;
  DnsForwarder& operator=(const DnsForwarder&) = delete;
  ~DnsForwarder() override;

  Instant NextDeadline() const override;
  void Poll(Instant now) override;

  const DnsCounters& counters() const { return counters_; }
  size_t pending() const { return pending_.size(); }
  size_t tcp_clients() const { return clients_.size(); }

 private:
  struct Upstream;
  struct Pending;
  struct TcpClient;
  class UpstreamHandler;

  DnsForwarder(udp::UdpLayer& udp, tcp::TcpLayer* tcp,
               buffer::ChunkPool& chunks, eventloop::EventLoop& loop,
               DnsForwarderOptions options);
  absl::Status Start();

  void ReadGuestUdp(size_t listener);
  void AcceptTcp(size_t listener);
  void ReadTcpClient(uint64_t id);
  void CloseTcpClient(uint64_t id);
  // Forwards one query (`head` = its first two bytes, the guest's id,
  // already checked: at least kHeaderLen bytes, QR=0).
  void Forward(std::span<const uint8_t> query_after_id, uint16_t guest_id,
               const transport::SocketAddress& guest, size_t listener,
               uint64_t tcp_client, Instant now);
  void ReadUpstream(Upstream& u, Instant now);
  void DeliverAnswer(Pending p, buffer::PayloadView answer, Instant now);

  udp::UdpLayer& udp_;
  tcp::TcpLayer* tcp_;
  buffer::ChunkPool& chunks_;
  eventloop::EventLoop& loop_;
  const DnsForwarderOptions options_;
  std::mt19937_64 rng_;
  std::vector<std::unique_ptr<udp::UdpSocket>> udp_listeners_;
  std::vector<std::unique_ptr<tcp::TcpSocket>> tcp_listeners_;
  std::vector<std::unique_ptr<Upstream>> upstreams_;
  size_t current_upstream_ = 0;
  // Pending queries by their upstream id; `order_` is oldest first (all
  // share one timeout, so that is deadline order).
  absl::flat_hash_map<uint16_t, std::list<Pending>::iterator> pending_;
  std::list<Pending> order_;
  absl::flat_hash_map<uint64_t, std::unique_ptr<TcpClient>> clients_;
  uint64_t next_client_id_ = 1;
  // Sockets closed from inside their own callbacks, freed by Poll.
  std::vector<std::unique_ptr<tcp::TcpSocket>> graveyard_;
  DnsCounters counters_;
};

}  // namespace netstack::backend

#endif  // NETSTACK_BACKEND_DNS_FORWARDER_H_
