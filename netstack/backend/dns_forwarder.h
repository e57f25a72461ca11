// The DNS forwarder (issue 13, "Guest configuration", DNS): queries to the
// plan's DNS address (10.0.2.3 / fd00::3, port 53), over UDP and TCP, go
// to the upstream resolvers and their answers come back.
//
// Guest side: a netstack UdpSocket bound to each DNS address and port 53,
// and a TcpSocket listening there. A TCP connection carries messages with
// a 2-byte length prefix (RFC 1035 4.2.2, RFC 7766); each is forwarded
// like a UDP query, and its answer is written back with its prefix.
//
// What is forwarded: opcode QUERY with exactly one well-formed question
// (RFC 1035 4.1.2). Any other opcode (UPDATE, NOTIFY...) is answered
// NOTIMP here and never reaches the host's resolver, which may trust
// 127.0.0.1 for updates; a query without one question is answered
// FORMERR. (Review 2026-12-06, finding 10.)
//
// Upstream side: each query gets a host socket of its own, connected to
// the upstream, and closed with the query (RFC 5452 9.2, 10): so each
// query leaves from a port the kernel picks at random, and the kernel
// drops datagrams from anyone but the upstream. A query the guest sent
// over UDP goes over UDP, one sent over TCP over TCP (one connection per
// query, so a large answer, TC=1 over UDP, comes back whole). The socket
// is bound to OutboundBind unless the upstream is on the host's loopback
// (127.0.0.53 must work); an AF_INET6 one has IPV6_V6ONLY, so a
// v4-mapped upstream address does not reach IPv4.
//
// Which upstream: the current one; a timeout or a refusal moves the
// current one to the next (failover; the guest's resolver retries). A
// connect that fails at once (no route: an offline laptop, a VPN not up
// yet) tries the next one, and when none can be reached the guest gets
// SERVFAIL at once (issue 30, item 18). That is said once on stderr, and
// once again when an upstream can be reached. Nothing is connected at
// Create, so an unreachable upstream is no error there.
//
// Query ids: each forwarded query gets a random id from getrandom(2)
// (drawn 128 at a time), and the guest's id is put back in the answer.
// An answer counts only if it came on the query's socket, carries its id
// and repeats its question (the name compared without regard to ASCII
// case, RFC 4343; type and class exactly): RFC 5452 3. The id is
// replaced without a copy of a UDP query: sendmsg with an iovec for the
// new id and one for the rest of the received view. The answer is
// received into a pooled chunk, its id rewritten in place and sent as a
// view.
//
// Bounded: max_pending queries wait at once (past it, a query is dropped
// and counted: the guest retries), each for at most `timeout`. Each holds
// one host fd, so the forwarder holds at most max_pending fds (none when
// idle); at most max_tcp_clients of them are TCP connections upstream
// (past that a TCP query gets SERVFAIL). max_tcp_clients guest
// connections, each with one partial message buffered (at most 2 + 65535
// bytes).
//
// The egress policy (issue #33, netstack/policy/dns_policy.h), when
// `policy` gives one: a query for a name it denies is answered NXDOMAIN
// here, over UDP or TCP, and never goes upstream; an answer is filtered
// before the guest sees it (the addresses of an allowed name pinned,
// rebinding records removed), and one that cannot be filtered becomes
// SERVFAIL. The policy is asked again for each query and each answer, so
// a replaced policy applies at once.
//
// Malformed input is dropped with a counted reason, never answered:
// shorter than the 12-byte header, a response (QR=1) where a query
// belongs, a TCP message shorter than a header (the connection is
// closed). An upstream's datagram that is not the answer (short, QR=0,
// another id, another question) is dropped and counted and the query
// waits on; over TCP it ends the query with SERVFAIL.
#ifndef NETSTACK_BACKEND_DNS_FORWARDER_H_
#define NETSTACK_BACKEND_DNS_FORWARDER_H_

#include <array>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "netstack/backend/udp_host_socket.h"
#include "netstack/base/time.h"
#include "netstack/buffer/chunk.h"
#include "netstack/eventloop/event_loop.h"
#include "netstack/policy/dns_policy.h"
#include "netstack/policy/policy.h"
#include "netstack/tcp/tcp_layer.h"
#include "netstack/tcp/tcp_socket.h"
#include "netstack/transport/address.h"
#include "netstack/udp/udp_layer.h"
#include "netstack/udp/udp_socket.h"

namespace netstack::backend {

// A query the egress policy denied (answered NXDOMAIN), as the flow log
// records it. `qname` lives until the callback returns.
struct DnsDenial {
  std::string_view qname;  // QuestionNameText: lower case, no final dot
  policy::Verdict verdict;
  transport::SocketAddress guest;   // the guest's address and port
  transport::SocketAddress server;  // the forwarder's address it asked
  bool over_tcp = false;
};

struct DnsForwarderOptions {
  // The DNS addresses and ports the guest sends to (10.0.2.3:53,
  // [fd00::3]:53): each must be one of the stack's addresses.
  std::vector<transport::SocketAddress> listen;
  // --dns-upstream; empty: ReadResolvConf() (dns_config.h).
  std::vector<transport::SocketAddress> upstreams;
  OutboundBind bind;
  // Queries waiting upstream at once; also the forwarder's fds at most
  // (one socket per query).
  size_t max_pending = 512;
  Duration timeout = absl::Seconds(5);
  // Guest TCP connections at once; also TCP connections upstream at once.
  size_t max_tcp_clients = 64;
  bool tcp = true;  // listen on TCP too (needs a TcpLayer)
  // Query ids come from getrandom, never from a seed (review 2026-12-06,
  // finding 10).

  // The egress policy now (it may be replaced while running). Unset, or
  // returning null: no policy, every query forwarded as it is.
  std::function<const policy::Policy*()> policy;
  // Where an allowed name's addresses are pinned; null: nowhere.
  policy::PinTable* pins = nullptr;
  // A query the policy denied (answered NXDOMAIN), for the flow log.
  std::function<void(const DnsDenial&)> on_denied;
};

// X(field, "name")
#define NETSTACK_DNS_COUNTERS(X)                                     \
  X(queries_udp, "queries.udp")                                      \
  X(queries_tcp, "queries.tcp")                                      \
  X(answers_udp, "answers.udp")                                      \
  X(answers_tcp, "answers.tcp")                                      \
  /* answers made here: no upstream could be asked, or it failed */  \
  X(answers_servfail, "answers.servfail")                            \
  /* made here: an opcode other than QUERY, never forwarded */       \
  X(answers_notimp, "answers.notimp")                                \
  /* made here: not exactly one well-formed question */              \
  X(answers_formerr, "answers.formerr")                              \
  X(timeouts, "timeouts")                                            \
  X(tcp_connections, "tcp_connections")                              \
  /* no route (connect, or ICMP later): the next upstream tried */   \
  X(upstream_unreachable, "upstream.unreachable")                    \
  /* ICMP port unreachable, or a TCP RST to the connect: SERVFAIL */ \
  X(upstream_refused, "upstream.refused")                            \
  /* the TCP connection upstream failed or ended before an answer */ \
  X(upstream_tcp_failed, "upstream.tcp_failed")                      \
  /* max_tcp_clients TCP connections upstream already: SERVFAIL */   \
  X(upstream_tcp_full, "upstream.tcp_full")                          \
  /* socket() or the loop refused (fds, memory): SERVFAIL */         \
  X(upstream_socket_failed, "upstream.socket_failed")                \
  /* sending the query failed: SERVFAIL */                           \
  X(upstream_send_failed, "upstream.send_failed")                    \
  /* getrandom failed: SERVFAIL */                                   \
  X(upstream_no_random_id, "upstream.no_random_id")                  \
  X(dropped_short, "dropped.short")                                  \
  X(dropped_not_query, "dropped.not_query")                          \
  X(dropped_table_full, "dropped.table_full")                        \
  X(dropped_reply_short, "dropped.reply_short")                      \
  X(dropped_reply_not_response, "dropped.reply_not_response")        \
  X(dropped_reply_unknown_id, "dropped.reply_unknown_id")            \
  X(dropped_reply_question, "dropped.reply_question")                \
  X(dropped_reply_no_buffer, "dropped.reply_no_buffer")              \
  X(dropped_reply_send, "dropped.reply_send")                        \
  X(dropped_reply_client_gone, "dropped.reply_client_gone")          \
  X(dropped_tcp_clients_full, "dropped.tcp_clients_full")            \
  X(dropped_tcp_malformed, "dropped.tcp_malformed")

struct DnsCounters {
#define NETSTACK_DNS_FIELD(f, name) uint64_t f = 0;
  NETSTACK_DNS_COUNTERS(NETSTACK_DNS_FIELD)
#undef NETSTACK_DNS_FIELD
  // The egress policy's ("backend.dns.policy.<name>").
  policy::DnsPolicyCounters policy;
  // "backend.dns.<name> value" lines, every counter.
  std::string Format() const;
};

class DnsForwarder final : public eventloop::Poller {
 public:
  static constexpr size_t kHeaderLen = 12;

  // Binds the guest-side sockets; `tcp` may be null when options.tcp is
  // false. Registers with `loop` as a poller (timeouts). Errors: the
  // bind's, no upstream, no getrandom. Upstreams are not contacted here:
  // one that cannot be reached now is no error.
  static absl::StatusOr<std::unique_ptr<DnsForwarder>> Create(
      udp::UdpLayer& udp, tcp::TcpLayer* tcp, buffer::ChunkPool& chunks,
      eventloop::EventLoop& loop, DnsForwarderOptions options);
  DnsForwarder(const DnsForwarder&) = delete;
  DnsForwarder& operator=(const DnsForwarder&) = delete;
  ~DnsForwarder() override;

  Instant NextDeadline() const override;
  void Poll(Instant now) override;

  const DnsCounters& counters() const { return counters_; }
  // Queries waiting upstream; each holds one host fd.
  size_t pending() const { return order_.size(); }
  size_t tcp_clients() const { return clients_.size(); }

 private:
  struct Origin;
  struct Pending;
  struct TcpLeg;
  struct TcpClient;
  struct Opened;

  DnsForwarder(udp::UdpLayer& udp, tcp::TcpLayer* tcp,
               buffer::ChunkPool& chunks, eventloop::EventLoop& loop,
               DnsForwarderOptions options);
  absl::Status Start();

  void ReadGuestUdp(size_t listener);
  void AcceptTcp(size_t listener);
  void ReadTcpClient(uint64_t id);
  void CloseTcpClient(uint64_t id);
  // Forwards one query (the whole message, checked: at least kHeaderLen
  // bytes, QR=0), or answers it here.
  void Forward(std::span<const uint8_t> query, const Origin& origin,
               bool over_tcp, Instant now);
  // A socket of `type` connected (or connecting) to an upstream: the
  // current one, else the next that can be reached.
  Opened ConnectUpstream(int type);
  // A non-blocking socket of `type` (SOCK_DGRAM, SOCK_STREAM) to
  // `upstream`, its connect started; or -errno, with `local_failure` when
  // socket() itself failed (fds, memory: every upstream alike) rather
  // than this upstream (no route, no IPv6, the outbound address gone).
  int OpenUpstream(const transport::SocketAddress& upstream, int type,
                   bool* local_failure) const;
  // Where a socket to `upstream` binds (--outbound-bind), if anywhere.
  std::optional<transport::SocketAddress> OutboundSource(
      const transport::IpAddress& upstream) const;
  std::optional<uint16_t> NextId();
  // Sends `query` with p's id on p's socket (SERVFAIL if it cannot).
  void SendUdp(Pending& p, std::span<const uint8_t> query, Instant now);

  void ReadUpstream(Pending& p, Instant now);
  void ReadUpstreamUdp(Pending& p, Instant now);
  void ReadUpstreamTcp(Pending& p, Instant now);
  void WriteUpstream(Pending& p, Instant now);
  // Whether `answer` is `p`'s: a response with its id and question; else
  // the reason is counted.
  bool IsAnswer(const Pending& p, std::span<const uint8_t> answer);
  // Unregisters and closes p's socket and forgets it.
  void Finish(Pending& p);
  // `reason` counted, the guest answered SERVFAIL, then Finish.
  void Fail(Pending& p, uint64_t& reason, Instant now);
  // The guest answered SERVFAIL (counted), then Finish.
  void Servfail(Pending& p, Instant now);
  void FailOver(size_t from);
  // An answer made here: the guest's id, the query's opcode and RD
  // (`flags`, its byte 2), `rcode`, and `question` repeated (or none).
  void Reply(const Origin& o, uint8_t flags, uint8_t rcode,
             std::span<const uint8_t> question, Instant now);
  // The policy's NXDOMAIN to `query` (policy::WriteNxdomain).
  void ReplyNxdomain(const Origin& o, std::span<const uint8_t> query,
                     Instant now);
  // The policy's part of an upstream answer (`a`: the chunk's room,
  // `len` octets of it the answer): its new length, or 0 for SERVFAIL.
  // `len` unchanged without a policy.
  size_t FilterAnswer(const Pending& p, std::span<uint8_t> a, size_t len,
                      Instant now);
  // Sends an answer to the guest who asked; false (counted) if it could
  // not.
  bool DeliverAnswer(const Origin& o, buffer::PayloadView answer, Instant now);

  udp::UdpLayer& udp_;
  tcp::TcpLayer* tcp_;
  buffer::ChunkPool& chunks_;
  eventloop::EventLoop& loop_;
  const DnsForwarderOptions options_;
  std::vector<std::unique_ptr<udp::UdpSocket>> udp_listeners_;
  std::vector<std::unique_ptr<tcp::TcpSocket>> tcp_listeners_;
  size_t current_upstream_ = 0;
  // No upstream could be reached by the last attempt (said on stderr).
  bool unreachable_ = false;
  // Query ids from getrandom, used from next_id_ on.
  std::array<uint16_t, 128> ids_{};
  size_t next_id_ = ids_.size();
  // Pending queries, oldest first (all share one timeout, so that is
  // deadline order). A node's address is its loop handler's.
  std::list<Pending> order_;
  size_t tcp_upstreams_ = 0;  // pending queries with a TCP leg
  absl::flat_hash_map<uint64_t, std::unique_ptr<TcpClient>> clients_;
  uint64_t next_client_id_ = 1;
  // Sockets closed from inside their own callbacks, freed by Poll.
  std::vector<std::unique_ptr<tcp::TcpSocket>> graveyard_;
  DnsCounters counters_;
};

}  // namespace netstack::backend

#endif  // NETSTACK_BACKEND_DNS_FORWARDER_H_
