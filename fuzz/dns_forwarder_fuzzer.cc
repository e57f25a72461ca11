// The backend's DNS forwarder (netstack/backend/dns_forwarder.h) between
// a guest and fake upstream resolvers. The guest is a second Stack (with
// its own TCP and UDP) on a FakeLink, joined to the forwarder's Stack by
// an in-memory wire; the upstreams are real sockets of this process on
// 127.0.0.1 and ::1 (loopback only), a UDP socket and a TCP listener on
// the same port each, which the harness reads and answers by hand. The
// forwarder's event loop runs on the harness's fake clock
// (EventLoop::Create's clock), so the forwarder's timeouts, the stacks
// and the script share one time; the loop is turned with RunOnce(0), or
// waits for the kernel (never sleeps) when a datagram or a connection is
// on its way over loopback.
//
// An input is four bytes of options (upstreams: one or two, v4 or v6
// first; max_pending 1..16; max_tcp_clients 1..4; timeout 1..4.5 s), then
// a script of steps, each one of:
//   UDP query     a length-prefixed payload (any bytes) from one of four
//                 guest ports of either family to the DNS address, port 53;
//   connect       a guest TCP connection to port 53, v4 or v6;
//   TCP bytes     a length-prefixed byte stream written to one connection
//                 (the script supplies the 2-byte length prefixes, so
//                 messages may be split anywhere or run together);
//   TCP message   a length-prefixed body written with its prefix;
//   answer        an upstream message to a pending query's socket (a
//                 datagram, or a message on its TCP connection): an id
//                 (raw, the query's, or one answered or timed out before)
//                 and any bytes;
//   good answer   a pending query's own bytes with QR set, plus any bytes;
//   time step     the clock moves on;
//   close         the guest closes, aborts or half-closes a connection.
// After each step the wire runs until it is quiet (jumping to the stacks'
// own deadlines, delayed ACKs, up to 200 ms at a time).
//
// The harness keeps a model of what the forwarder must do, and checks it
// after every round of the wire (FUZZ_CHECK):
//   - every query is counted once, in the round it reaches the forwarder:
//     queries.udp / queries.tcp, dropped.short, dropped.not_query or
//     dropped.tcp_malformed, as the header says (12 bytes, QR = 0); after a
//     malformed TCP message the connection is closed and nothing after it
//     counted (the header file's "Malformed input");
//   - a counted query is answered NOTIMP here if its opcode is not QUERY,
//     FORMERR if it has not exactly one well-formed question, dropped
//     (dropped.table_full) past max_pending, answered SERVFAIL
//     (upstream.tcp_full) for a TCP query past max_tcp_clients TCP
//     connections upstream, and otherwise forwarded: over UDP as a
//     datagram from a socket of its own, over TCP on a connection of its
//     own, to the current upstream (failover moves on after a round with
//     a timeout), in order, byte for byte but the id;
//   - pending() is the model's (<= max_pending); tcp_clients() <=
//     max_tcp_clients, and equal to the connections served and not closed;
//     each connect is counted once, tcp_connections or
//     dropped.tcp_clients_full (then the guest sees a reset);
//   - every upstream message is counted once: dropped.reply_short,
//     dropped.reply_not_response, dropped.reply_unknown_id (not the query's
//     id), dropped.reply_question (not its question), else one of
//     answers.udp/tcp, dropped.reply_send, dropped.reply_client_gone
//     (exactly when the model's connection is gone); over TCP a message
//     that is not the answer ends the query with SERVFAIL;
//   - the guest receives nothing but answers: each one exactly the
//     upstream's bytes with the guest's id restored, or the forwarder's
//     own NOTIMP, FORMERR or SERVFAIL (the id, opcode and RD, the
//     question repeated), on the socket or connection that asked, from the
//     DNS address and port 53, in order; every counted answer arrives
//     within the step; nothing arrives for a query that timed out;
//   - timeouts are counted when the model says (deadline = the round's
//     time + timeout), and the forwarder closes what it says it closes
//     (the guest sees the end of the stream; the upstream's TCP
//     connection of a query that ended sees its end too);
//   - both stacks account for every frame;
// and after teardown every chunk and packet is back in its pool and the
// process has as many fds open as before the input.
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "absl/time/time.h"
#include "fuzz/fuzz_check.h"
#include "fuzz/loopback_udp.h"
#include "netstack/backend/dns_forwarder.h"
#include "netstack/backend/udp_host_socket.h"
#include "netstack/base/time.h"
#include "netstack/buffer/chunk.h"
#include "netstack/buffer/packet.h"
#include "netstack/eventloop/event_loop.h"
#include "netstack/runtime/runtime.h"
#include "netstack/stack/fake_link.h"
#include "netstack/stack/stack.h"
#include "netstack/tcp/tcp_layer.h"
#include "netstack/tcp/tcp_socket.h"
#include "netstack/transport/address.h"
#include "netstack/transport/errors.h"
#include "netstack/transport/notifier.h"
#include "netstack/udp/udp_layer.h"
#include "netstack/udp/udp_socket.h"
#include "netstack/wire/bytes.h"

namespace netstack::backend {
namespace {

using transport::Family;
using transport::IpAddress;
using transport::SocketAddress;

constexpr int kMaxSteps = 64;
constexpr size_t kMaxConns = 6;
constexpr size_t kGuestPorts = 4;  // per family
constexpr uint16_t kDnsPort = 53;
constexpr size_t kMaxUdpQuery = 4096;
constexpr size_t kMaxTcpWrite = 16384;
constexpr size_t kRetired = 16;
constexpr uint8_t kQrBit = 0x80;  // byte 2 of the header (RFC 1035 4.1.1)

bool Verbose() { return std::getenv("FUZZ_VERBOSE") != nullptr; }

IpAddress Ip(const char* s) { return *IpAddress::Parse(s); }

// A non-blocking TCP listener on `a` (port 0: the kernel's pick), or -1.
int ListenTcp(const SocketAddress& a) {
  const int fd = socket(a.ip.is_v4() ? AF_INET : AF_INET6,
                        SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  FUZZ_CHECK(fd >= 0);
  sockaddr_storage ss;
  const socklen_t len = ToSockaddr(a, ss);
  if (bind(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0 ||
      listen(fd, 64) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// A fake upstream resolver: a UDP socket and a TCP listener on the same
// loopback address and port. The TCP port is taken first and the UDP one
// then: a TCP port in the ephemeral range may be any local connection's.
struct FakeResolver {
  fuzz::LoopbackUdp udp;
  int tcp = -1;
};

FakeResolver MakeResolver(const IpAddress& ip) {
  for (int attempt = 0; attempt < 100; ++attempt) {
    FakeResolver r;
    r.tcp = ListenTcp({ip, 0});
    FUZZ_CHECK(r.tcp >= 0);
    sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    FUZZ_CHECK(getsockname(r.tcp, reinterpret_cast<sockaddr*>(&ss), &len) == 0);
    r.udp.addr = *FromSockaddr(ss, len);
    r.udp.fd = socket(ip.is_v4() ? AF_INET : AF_INET6,
                      SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    FUZZ_CHECK(r.udp.fd >= 0);
    // Room for a step's forwarded queries (a 16 KiB write completes at
    // most ~80 KiB of messages, at most 16 of them pending) many times
    // over.
    const int rcvbuf = 4 << 20;
    (void)setsockopt(r.udp.fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
    len = ToSockaddr(r.udp.addr, ss);
    if (bind(r.udp.fd, reinterpret_cast<sockaddr*>(&ss), len) == 0) return r;
    close(r.udp.fd);
    close(r.tcp);
  }
  FUZZ_CHECK(false);  // no port free for both in 100 tries
  return {};
}

// The two fake upstreams, made once for the process (the forwarder opens
// a socket of its own per query).
FakeResolver& Resolver(size_t family_v6) {
  static FakeResolver r[2] = {MakeResolver(Ip("127.0.0.1")),
                              MakeResolver(Ip("::1"))};
  return r[family_v6];
}
fuzz::LoopbackUdp& Upstream(size_t family_v6) {
  return Resolver(family_v6).udp;
}
int TcpUpstream(size_t family_v6) { return Resolver(family_v6).tcp; }

// A connection waiting on `listener`, if any (never blocks).
int AcceptUpstream(int listener) {
  return accept4(listener, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
}

// The forwarder's rules, written again for the model (dns_forwarder.h,
// "What is forwarded"; RFC 1035 4.1.2): the length of the question entry
// after the header (name, type, class), 0 if it does not parse. No
// compression (no earlier name to point to), labels up to 63, names up to
// 255 octets.
size_t QuestionLength(std::span<const uint8_t> m) {
  size_t at = 12;
  size_t name = 0;
  for (;;) {
    if (at >= m.size() || m[at] >= 64) return 0;
    const size_t label = m[at];
    name += 1 + label;
    at += 1 + label;
    if (label == 0) break;
    if (name >= 255) return 0;  // no room left for the root
  }
  return m.size() - at >= 4 ? name + 4 : 0;
}

// Whether `a` repeats `question` as its only question: the name without
// regard to ASCII case, the type and class exactly.
bool SameQuestion(std::span<const uint8_t> a,
                  std::span<const uint8_t> question) {
  if (a.size() < 12 + question.size() || wire::LoadBe16(&a[4]) != 1) {
    return false;
  }
  const auto lower = [](uint8_t c) {
    return c >= 'A' && c <= 'Z' ? static_cast<uint8_t>(c | 0x20) : c;
  };
  const size_t name = question.size() - 4;
  for (size_t i = 0; i < question.size(); ++i) {
    const bool same = i < name ? lower(a[12 + i]) == lower(question[i])
                               : a[12 + i] == question[i];
    if (!same) return false;
  }
  return true;
}

using fuzz::Datagram;
using fuzz::OpenFdCount;
using fuzz::RecvDatagram;

// One end of the wire: a runtime (a Stack on a FakeLink with TCP and
// UDP) on the harness's pools and clock. The harness dispatches and polls
// its parts at the model's checkpoints; only the server's loop turns.
struct Host {
  Host(buffer::ChunkPool& chunks, buffer::PacketPool& packets, uint8_t mac,
       const char* v4, const char* v6, const Instant* now, bool loop_timers)
      : rt(Make(chunks, packets, mac, v4, v6, now, loop_timers, &fake)),
        link(*fake),
        stack(rt->stack()),
        notifier(rt->notifier()),
        tcp(&rt->tcp()),
        udp(&rt->udp()) {}
  static std::unique_ptr<runtime::Runtime> Make(
      buffer::ChunkPool& chunks, buffer::PacketPool& packets, uint8_t mac,
      const char* v4, const char* v6, const Instant* now, bool loop_timers,
      stack::FakeLink** fake) {
    runtime::RuntimeOptions o;
    o.chunk_pool = &chunks;
    o.packet_pool = &packets;
    o.open_link = [mac, fake](buffer::ChunkPool& c, buffer::PacketPool&)
        -> absl::StatusOr<std::unique_ptr<link::LinkEndpoint>> {
      auto l = std::make_unique<stack::FakeLink>(c, Caps(mac));
      *fake = l.get();
      return std::unique_ptr<link::LinkEndpoint>(std::move(l));
    };
    o.nic_name = "fuzz0";
    o.addrs4 = {stack::Ipv4Cidr{*wire::Ipv4Address::Parse(v4), 24}};
    o.addrs6 = {stack::Ipv6Cidr{*wire::Ipv6Address::Parse(v6), 64}};
    o.stack = Options();
    o.tcp.seed = mac;
    o.udp_seed = mac;
    o.clock = [now] { return *now; };
    if (!loop_timers) o.timers.slots = 16;
    auto rt = runtime::Runtime::Create(std::move(o));
    FUZZ_CHECK(rt.ok());
    return *std::move(rt);
  }
  static link::LinkCapabilities Caps(uint8_t mac) {
    link::LinkCapabilities caps;
    caps.mtu = 1500;
    caps.mac.bytes = {0x02, 0, 0, 0, 0, mac};
    return caps;
  }
  static stack::StackOptions Options() {
    stack::StackOptions o;
    o.neighbor.capacity = 16;  // one peer (see stack_fuzzer.cc)
    return o;
  }
  void Poll(Instant now) {
    stack.Poll(now);
    tcp->Poll(now);
  }
  Instant NextDeadline() const {
    return std::min(stack.NextDeadline(), tcp->NextDeadline());
  }
  void CheckFrames() const {
    const stack::StackCounters& c = stack.counters();
    FUZZ_CHECK(c.rx_frames == c.rx_consumed + c.rx_dropped_frames);
    FUZZ_CHECK(c.RxDrops() == c.rx_dropped_frames);
  }

  stack::FakeLink* fake = nullptr;  // the runtime's link, once made
  std::unique_ptr<runtime::Runtime> rt;
  // Parts of the runtime.
  stack::FakeLink& link;
  stack::Stack& stack;
  transport::Notifier& notifier;
  tcp::TcpLayer* tcp;
  udp::UdpLayer* udp;
};

enum class Via { kUdp, kTcp };

// A query the guest sent that the forwarder has not counted yet.
struct Sent {
  Via via = Via::kUdp;
  size_t socket = 0;  // guest UDP socket or connection index
  uint16_t guest_id = 0;
  std::vector<uint8_t> rest;  // the bytes after the id
  size_t size = 0;            // the whole message's
  bool Valid() const { return size >= DnsForwarder::kHeaderLen && !(rest[0] & kQrBit); }
  std::vector<uint8_t> Whole() const {
    std::vector<uint8_t> m(2);
    wire::StoreBe16(m.data(), guest_id);
    m.insert(m.end(), rest.begin(), rest.end());
    return m;
  }
  // The answer the forwarder makes itself: the id, QR with the query's
  // opcode and RD, RA and `rcode`, and the first `question` bytes of the
  // question section repeated (QDCOUNT 1) or none.
  std::vector<uint8_t> Made(uint8_t rcode, size_t question) const {
    std::vector<uint8_t> a(12, 0);
    wire::StoreBe16(a.data(), guest_id);
    a[2] = static_cast<uint8_t>(kQrBit | (rest[0] & 0x79));
    a[3] = static_cast<uint8_t>(0x80 | rcode);
    if (question != 0) {
      a[5] = 1;
      a.insert(a.end(), rest.begin() + 10, rest.begin() + 10 + question);
    }
    return a;
  }
};

// A query the upstream received, waiting for its answer.
struct Pending {
  Via via;
  size_t socket;
  uint16_t guest_id;
  size_t upstream;
  Instant deadline;
  std::vector<uint8_t> query;  // as the upstream received it
  uint16_t id = 0;             // the forwarder's
  SocketAddress from;          // UDP: the query's socket
  int tcp = -1;                // TCP: the upstream's end of its connection
  std::span<const uint8_t> question() const {
    return std::span<const uint8_t>(query).subspan(12, QuestionLength(query));
  }
};

struct GuestUdp {
  std::unique_ptr<udp::UdpSocket> socket;
  SocketAddress dns;  // where it sends, and where answers must come from
  std::deque<std::vector<uint8_t>> expect;
};

struct Conn {
  std::unique_ptr<tcp::TcpSocket> socket;
  bool connecting = true;  // not read until the forwarder took it or not
  bool served = false;     // the forwarder took it
  bool fwd_closed = false;  // the forwarder closed it, or will within the step
  bool guest_closed = false;  // Close or Abort: not read any more
  bool ended = false;      // the guest saw EOF or an error
  bool malformed = false;  // a malformed message went: nothing after counts
  std::vector<uint8_t> out;  // written, not yet a whole message
  std::vector<uint8_t> in;   // read, not yet a whole answer
  std::deque<std::vector<uint8_t>> expect;
};

struct Fuzz {
  Fuzz(buffer::ChunkPool& guest_chunks, buffer::PacketPool& guest_packets,
       buffer::ChunkPool& fwd_chunks, buffer::PacketPool& fwd_packets)
      : guest(guest_chunks, guest_packets, 0x15, "10.0.2.15", "fd00::15",
              &now, /*loop_timers=*/false),
        server(fwd_chunks, fwd_packets, 0x03, "10.0.2.3", "fd00::3", &now,
               /*loop_timers=*/true),
        loop(&server.rt->loop()) {}

  // --- the wire ---------------------------------------------------------

  // The forwarder's loop, one turn; the model expires what the
  // forwarder's Poll expires in it (deadline <= now), and fails over.
  void Turn(Duration wait) {
    FUZZ_CHECK(loop->RunOnce(wait).ok());
    uint64_t expired = 0;
    for (auto it = pending.begin(); it != pending.end();) {
      if (it->second.deadline <= now) {
        Retire(it->second);
        it = pending.erase(it);
        ++expired;
      } else {
        ++it;
      }
    }
    FUZZ_CHECK(fwd->counters().timeouts - timeouts_seen == expired);
    timeouts_seen = fwd->counters().timeouts;
    if (expired > 0) current = (current + 1) % upstreams.size();
  }

  // One round: frames cross, everything is polled and dispatched, the
  // loop turns, then the checks. True when anything moved.
  bool Round() {
    bool moved = false;
    std::vector<std::vector<uint8_t>> to_server = std::move(guest.link.sent);
    std::vector<std::vector<uint8_t>> to_guest = std::move(server.link.sent);
    guest.link.sent.clear();
    server.link.sent.clear();
    if (!to_server.empty()) server.link.Inject(to_server, now);
    if (!to_guest.empty()) guest.link.Inject(to_guest, now);
    moved = !to_server.empty() || !to_guest.empty();
    const size_t current_at_dispatch = current;
    for (int i = 0; i < 8; ++i) {
      guest.notifier.Dispatch();
      server.notifier.Dispatch();
      guest.Poll(now);
      server.Poll(now);
      if (guest.notifier.empty() && server.notifier.empty()) break;
    }
    AccountQueries(current_at_dispatch);
    Turn(absl::ZeroDuration());
    server.Poll(now);  // what the turn closed or wrote
    ReadGuest();
    CheckRound();
    return moved || !guest.link.sent.empty() || !server.link.sent.empty();
  }

  void Settle() {
    for (int round = 0; round < 512; ++round) {
      if (Round()) continue;
      const Instant next = std::min(guest.NextDeadline(), server.NextDeadline());
      if (next <= now || next > now + absl::Milliseconds(200)) break;
      now = next;
    }
  }

  // --- queries ----------------------------------------------------------

  static uint64_t Counted(const DnsCounters& c) {
    return c.queries_udp + c.queries_tcp + c.dropped_short +
           c.dropped_not_query + c.dropped_tcp_malformed;
  }

  // What the forwarder counted in this round's dispatch: the oldest
  // `sent` queries, each in the counter its header says; those it answered
  // itself are expected by the guest; those it forwarded reached the
  // upstream of `upstream_now`, in order.
  void AccountQueries(size_t upstream_now) {
    const DnsCounters& c = fwd->counters();
    const uint64_t n = Counted(c) - Counted(last);
    FUZZ_CHECK(n <= sent.size());
    uint64_t udp = 0, tcp = 0, shrt = 0, not_query = 0, malformed = 0;
    uint64_t notimp = 0, formerr = 0, table_full = 0, tcp_full = 0;
    size_t tcp_pending = 0;
    for (const auto& [key, p] : pending) tcp_pending += p.via == Via::kTcp;
    std::vector<Sent> by_udp, by_tcp;  // forwarded, in order
    for (uint64_t i = 0; i < n; ++i) {
      Sent s = std::move(sent.front());
      sent.pop_front();
      if (!s.Valid()) {
        if (s.via == Via::kTcp) {
          ++malformed;
        } else {
          ++(s.size < DnsForwarder::kHeaderLen ? shrt : not_query);
        }
        continue;
      }
      ++(s.via == Via::kUdp ? udp : tcp);
      const std::vector<uint8_t> whole = s.Whole();
      const size_t question = QuestionLength(whole);
      const bool one_question = wire::LoadBe16(&whole[4]) == 1 && question != 0;
      const size_t forwarded = by_udp.size() + by_tcp.size();
      if (whole[2] & 0x78) {
        ++notimp;
        Expect(s, s.Made(4, one_question ? question : 0));
      } else if (!one_question) {
        ++formerr;
        Expect(s, s.Made(1, 0));
      } else if (pending.size() + forwarded >= options.max_pending) {
        ++table_full;  // within one dispatch nothing expires
      } else if (s.via == Via::kTcp &&
                 tcp_pending + by_tcp.size() >= options.max_tcp_clients) {
        ++tcp_full;
        Expect(s, s.Made(2, question));
      } else {
        (s.via == Via::kUdp ? by_udp : by_tcp).push_back(std::move(s));
      }
    }
    FUZZ_CHECK(c.queries_udp - last.queries_udp == udp);
    FUZZ_CHECK(c.queries_tcp - last.queries_tcp == tcp);
    FUZZ_CHECK(c.dropped_short - last.dropped_short == shrt);
    FUZZ_CHECK(c.dropped_not_query - last.dropped_not_query == not_query);
    FUZZ_CHECK(c.dropped_tcp_malformed - last.dropped_tcp_malformed ==
               malformed);
    FUZZ_CHECK(c.answers_notimp - last.answers_notimp == notimp);
    FUZZ_CHECK(c.answers_formerr - last.answers_formerr == formerr);
    FUZZ_CHECK(c.dropped_table_full - last.dropped_table_full == table_full);
    FUZZ_CHECK(c.upstream_tcp_full - last.upstream_tcp_full == tcp_full);
    FUZZ_CHECK(c.answers_servfail - last.answers_servfail == tcp_full);
    // The UDP ones reach the upstream over loopback: wait for the kernel
    // (never long: it is queued by the time sendmsg returns).
    std::vector<Datagram> got;
    // Nothing forwarded: no syscall (one sent but not counted is caught
    // at the end of the step, CheckStep).
    fuzz::KernelWait wait;
    while (!by_udp.empty()) {
      for (size_t u = 0; u < upstreams.size(); ++u) {
        while (auto d = RecvDatagram(Upstream(upstreams[u]).fd)) {
          FUZZ_CHECK(u == upstream_now);
          got.push_back(*std::move(d));
        }
      }
      if (got.size() >= by_udp.size()) break;
      FUZZ_CHECK(wait.Another());
      pollfd p{Upstream(upstreams[upstream_now]).fd, POLLIN, 0};
      (void)poll(&p, 1, 100);
    }
    FUZZ_CHECK(got.size() == by_udp.size());
    for (size_t i = 0; i < got.size(); ++i) {
      Datagram& d = got[i];
      const Sent& s = by_udp[i];
      FUZZ_CHECK(d.bytes.size() == s.rest.size() + 2);
      FUZZ_CHECK(std::equal(s.rest.begin(), s.rest.end(), d.bytes.begin() + 2));
      Pending p = NewPending(s, upstream_now, std::move(d.bytes));
      p.from = d.from;
      Add(std::move(p));
    }
    // The TCP ones: a connection each to the upstream's listener, in
    // order; the forwarder writes the query once its connect completes,
    // in a turn of its loop.
    std::vector<int> conns_up;
    std::vector<std::vector<uint8_t>> msgs(by_tcp.size());
    fuzz::KernelWait tcp_wait;
    for (;;) {
      for (size_t u = 0; u < upstreams.size(); ++u) {
        for (int fd; (fd = AcceptUpstream(TcpUpstream(upstreams[u]))) >= 0;) {
          FUZZ_CHECK(u == upstream_now);
          conns_up.push_back(fd);
        }
      }
      FUZZ_CHECK(conns_up.size() <= by_tcp.size());
      bool whole = conns_up.size() == by_tcp.size();
      for (size_t i = 0; i < conns_up.size(); ++i) {
        std::vector<uint8_t>& m = msgs[i];
        uint8_t buf[4096];
        ssize_t r;
        while ((r = recv(conns_up[i], buf, sizeof(buf), MSG_DONTWAIT)) > 0) {
          m.insert(m.end(), buf, buf + r);
        }
        if (m.size() < 2 || m.size() < 2u + wire::LoadBe16(m.data())) {
          whole = false;
        }
      }
      if (whole) break;
      FUZZ_CHECK(tcp_wait.Another());
      Turn(absl::Milliseconds(100));
    }
    for (size_t i = 0; i < by_tcp.size(); ++i) {
      const Sent& s = by_tcp[i];
      std::vector<uint8_t>& m = msgs[i];
      // One message, nothing after it.
      FUZZ_CHECK(m.size() == 2 + wire::LoadBe16(m.data()));
      FUZZ_CHECK(m.size() == s.rest.size() + 4);
      FUZZ_CHECK(std::equal(s.rest.begin(), s.rest.end(), m.begin() + 4));
      Pending p = NewPending(s, upstream_now,
                             std::vector<uint8_t>(m.begin() + 2, m.end()));
      p.tcp = conns_up[i];
      Add(std::move(p));
    }
    last = fwd->counters();
  }

  Pending NewPending(const Sent& s, size_t upstream,
                     std::vector<uint8_t> query) {
    Pending p;
    p.via = s.via;
    p.socket = s.socket;
    p.guest_id = s.guest_id;
    p.upstream = upstream;
    p.deadline = now + options.timeout;
    p.query = std::move(query);
    p.id = wire::LoadBe16(p.query.data());
    return p;
  }

  void Add(Pending p) {
    newest = next_key;
    pending.emplace(next_key++, std::move(p));
  }

  // An answer the forwarder made itself, for the guest that asked.
  void Expect(const Sent& s, std::vector<uint8_t> answer) {
    if (s.via == Via::kUdp) {
      udp_sockets[s.socket].expect.push_back(std::move(answer));
    } else {
      conns[s.socket].expect.push_back(std::move(answer));
    }
  }

  // A query that ended: its id may come back late; its TCP connection
  // upstream is closed by the forwarder, and here.
  void Retire(Pending& p) {
    retired.push_back(p.id);
    if (retired.size() > kRetired) retired.pop_front();
    if (p.tcp >= 0) {
      close(p.tcp);
      p.tcp = -1;
    }
  }

  // --- what the guest receives ------------------------------------------

  void ReadGuest() {
    for (GuestUdp& g : udp_sockets) {
      if (!g.socket) continue;
      for (;;) {
        absl::StatusOr<udp::ReceivedDatagram> d = g.socket->RecvDatagram();
        if (!d.ok()) {
          FUZZ_CHECK(transport::IsWouldBlock(d.status()));
          break;
        }
        FUZZ_CHECK(d->from == g.dns);
        FUZZ_CHECK(!g.expect.empty());
        const auto b = d->payload.bytes();
        FUZZ_CHECK(std::equal(b.begin(), b.end(), g.expect.front().begin(),
                              g.expect.front().end()));
        g.expect.pop_front();
      }
    }
    static std::vector<uint8_t> buf(1 << 17);
    for (Conn& c : conns) {
      if (c.connecting || c.guest_closed || c.ended) continue;
      for (;;) {
        absl::StatusOr<size_t> n = c.socket->Read(buf);
        if (!n.ok() && transport::IsWouldBlock(n.status())) break;
        if (!n.ok() || *n == 0) {
          // The forwarder closed it (or never took it): the model knows.
          FUZZ_CHECK(c.fwd_closed);
          c.ended = true;
          break;
        }
        c.in.insert(c.in.end(), buf.begin(), buf.begin() + *n);
        while (c.in.size() >= 2 && c.in.size() >= 2u + wire::LoadBe16(c.in.data())) {
          const size_t len = wire::LoadBe16(c.in.data());
          FUZZ_CHECK(!c.expect.empty());
          FUZZ_CHECK(c.expect.front().size() == len);
          FUZZ_CHECK(std::equal(c.in.begin() + 2, c.in.begin() + 2 + len,
                                c.expect.front().begin()));
          c.expect.pop_front();
          c.in.erase(c.in.begin(), c.in.begin() + 2 + len);
        }
      }
    }
  }

  void CheckRound() {
    guest.CheckFrames();
    server.CheckFrames();
    FUZZ_CHECK(fwd->pending() == pending.size());
    FUZZ_CHECK(fwd->pending() <= options.max_pending);
    FUZZ_CHECK(fwd->tcp_clients() <= options.max_tcp_clients);
  }

  // After a step has settled: everything sent was counted, everything
  // answered arrived, the forwarder serves exactly the live connections.
  void CheckStep() {
    FUZZ_CHECK(sent.empty());
    // The upstreams got nothing the forwarder did not count.
    for (size_t u = 0; u < upstreams.size(); ++u) {
      FUZZ_CHECK(!RecvDatagram(Upstream(upstreams[u]).fd));
      FUZZ_CHECK(AcceptUpstream(TcpUpstream(upstreams[u])) < 0);
    }
    // The upstreams are there all along: no query fails on their account.
    const DnsCounters& c = fwd->counters();
    FUZZ_CHECK(c.upstream_unreachable == 0 && c.upstream_refused == 0 &&
               c.upstream_tcp_failed == 0 && c.upstream_socket_failed == 0 &&
               c.upstream_send_failed == 0 && c.upstream_no_random_id == 0);
    for (const GuestUdp& g : udp_sockets) FUZZ_CHECK(g.expect.empty());
    size_t live = 0;
    for (const Conn& c : conns) {
      if (c.served && !c.fwd_closed) ++live;
      if (!c.guest_closed) {
        FUZZ_CHECK(c.expect.empty() || c.ended);
        // What the forwarder closes, the guest sees closed.
        FUZZ_CHECK(c.ended == c.fwd_closed);
      }
    }
    FUZZ_CHECK(fwd->tcp_clients() == live);
  }

  // --- the script's steps -----------------------------------------------

  GuestUdp& UdpSocket(bool v6, size_t port) {
    GuestUdp& g = udp_sockets[(v6 ? kGuestPorts : 0) + port];
    if (!g.socket) {
      g.socket = guest.udp->Open(v6 ? Family::kIpv6 : Family::kIpv4);
      FUZZ_CHECK(g.socket
                     ->Bind({v6 ? Ip("fd00::15") : Ip("10.0.2.15"),
                             static_cast<uint16_t>(5300 + port)})
                     .ok());
      g.dns = {v6 ? Ip("fd00::3") : Ip("10.0.2.3"), kDnsPort};
    }
    return g;
  }

  void UdpQuery(bool v6, size_t port, std::span<const uint8_t> q) {
    GuestUdp& g = UdpSocket(v6, port);
    if (!g.socket->SendTo(q, g.dns, now).ok()) return;
    Sent s;
    s.via = Via::kUdp;
    s.socket = (v6 ? kGuestPorts : 0) + port;
    s.size = q.size();
    if (q.size() >= 2) {
      s.guest_id = wire::LoadBe16(q.data());
      s.rest.assign(q.begin() + 2, q.end());
    }
    sent.push_back(std::move(s));
  }

  void Connect(bool v6) {
    if (conns.size() >= kMaxConns) return;
    Conn c;
    c.socket = guest.tcp->Open(v6 ? Family::kIpv6 : Family::kIpv4);
    FUZZ_CHECK(
        c.socket->Connect({v6 ? Ip("fd00::3") : Ip("10.0.2.3"), kDnsPort}).ok());
    conns.push_back(std::move(c));
    const uint64_t accepted = fwd->counters().tcp_connections;
    const uint64_t refused = fwd->counters().dropped_tcp_clients_full;
    Settle();
    Conn& n = conns.back();
    const uint64_t a = fwd->counters().tcp_connections - accepted;
    const uint64_t r = fwd->counters().dropped_tcp_clients_full - refused;
    FUZZ_CHECK(a + r == 1);
    n.served = a == 1;
    // Past max_tcp_clients the forwarder aborts it: a reset.
    n.fwd_closed = !n.served;
    n.connecting = false;
  }

  // Bytes of the guest's stream: whole messages become queries, as the
  // forwarder frames them (RFC 1035 4.2.2: a 2-byte length, then that many).
  void Write(size_t index, std::span<const uint8_t> bytes) {
    Conn& c = conns[index];
    if (c.guest_closed || c.ended) return;
    absl::StatusOr<size_t> n = c.socket->Write(bytes);
    if (!n.ok() || *n == 0) return;
    if (!c.served || c.fwd_closed || c.malformed) return;
    c.out.insert(c.out.end(), bytes.begin(), bytes.begin() + *n);
    size_t at = 0;
    while (c.out.size() - at >= 2 &&
           c.out.size() - at >= 2u + wire::LoadBe16(&c.out[at])) {
      const size_t len = wire::LoadBe16(&c.out[at]);
      Sent s;
      s.via = Via::kTcp;
      s.socket = index;
      s.size = len;
      if (len >= 2) {
        s.guest_id = wire::LoadBe16(&c.out[at + 2]);
        s.rest.assign(c.out.begin() + at + 4, c.out.begin() + at + 2 + len);
      }
      const bool valid = s.Valid();
      sent.push_back(std::move(s));
      at += 2 + len;
      if (!valid) {
        // Documented: a TCP message shorter than a header, or a response,
        // closes the connection; nothing after it is read.
        c.malformed = true;
        c.fwd_closed = true;
        break;
      }
    }
    c.out.erase(c.out.begin(), c.out.begin() + at);
  }

  void Close(size_t index, int how) {
    Conn& c = conns[index];
    if (c.guest_closed) return;
    switch (how) {
      case 0:
        c.socket->Close();
        c.guest_closed = true;
        break;
      case 1:
        c.socket->Abort();
        c.guest_closed = true;
        break;
      default:
        // Half-close: the forwarder reads the end and closes its side.
        if (!c.socket->Shutdown(false, true).ok()) return;
        break;
    }
    // The forwarder closes its side when it reads the FIN or the reset
    // (if it still had one).
    c.fwd_closed = true;
  }

  // An upstream message to pending query `key`'s socket (a datagram, or a
  // message on its TCP connection), and what the model says becomes of it.
  void Answer(uint64_t key, std::vector<uint8_t> msg) {
    auto it = pending.find(key);
    FUZZ_CHECK(it != pending.end());
    Pending& p = it->second;
    const DnsCounters before = fwd->counters();
    const auto replies = [](const DnsCounters& c) {
      return c.dropped_reply_short + c.dropped_reply_not_response +
             c.dropped_reply_unknown_id + c.dropped_reply_question +
             c.dropped_reply_no_buffer + c.dropped_reply_send +
             c.dropped_reply_client_gone + c.answers_udp + c.answers_tcp;
    };
    fuzz::KernelWait wait;
    if (p.via == Via::kUdp) {
      sockaddr_storage ss;
      const socklen_t len = ToSockaddr(p.from, ss);
      if (sendto(Upstream(upstreams[p.upstream]).fd, msg.data(), msg.size(), 0,
                 reinterpret_cast<sockaddr*>(&ss),
                 len) != static_cast<ssize_t>(msg.size())) {
        return;  // too large for the family (EMSGSIZE): nothing sent
      }
    } else {
      // Its length first (RFC 1035 4.2.2); written as the forwarder reads,
      // a turn of its loop at a time.
      if (msg.size() > 65535) msg.resize(65535);
      std::vector<uint8_t> out(2);
      wire::StoreBe16(out.data(), static_cast<uint16_t>(msg.size()));
      out.insert(out.end(), msg.begin(), msg.end());
      for (size_t done = 0; done < out.size();) {
        const ssize_t w = send(p.tcp, out.data() + done, out.size() - done,
                               MSG_DONTWAIT | MSG_NOSIGNAL);
        if (w > 0) {
          done += static_cast<size_t>(w);
          continue;
        }
        FUZZ_CHECK(w < 0 && errno == EAGAIN);
        FUZZ_CHECK(wait.Another());
        Turn(absl::Milliseconds(100));
      }
    }
    // Turns until the forwarder has read it: the kernel has it queued for
    // the forwarder's socket (loopback), so a turn that waits for it wakes
    // at once.
    while (replies(fwd->counters()) == replies(before)) {
      FUZZ_CHECK(wait.Another());
      Turn(absl::Milliseconds(100));
    }
    const DnsCounters& c = fwd->counters();
    FUZZ_CHECK(
        replies(c) == replies(before) + 1 ||
        (p.via == Via::kTcp && replies(c) == replies(before) + 2 &&
         c.dropped_reply_client_gone == before.dropped_reply_client_gone + 1));
    const Via via = p.via;
    const size_t socket = p.socket;
    // Whether it is the answer, or why not (IsAnswer in the forwarder).
    uint64_t DnsCounters::*reason = nullptr;
    if (msg.size() < DnsForwarder::kHeaderLen) {
      reason = &DnsCounters::dropped_reply_short;
    } else if (!(msg[2] & kQrBit)) {
      reason = &DnsCounters::dropped_reply_not_response;
    } else if (wire::LoadBe16(msg.data()) != p.id) {
      reason = &DnsCounters::dropped_reply_unknown_id;
    } else if (!SameQuestion(msg, p.question())) {
      reason = &DnsCounters::dropped_reply_question;
    }
    if (reason != nullptr) {
      FUZZ_CHECK(c.*reason == before.*reason + 1);
      if (via == Via::kUdp) return;  // the query waits on
      // Over TCP nothing else will come: SERVFAIL, the query ends.
      FUZZ_CHECK(c.answers_servfail == before.answers_servfail + 1);
      last.answers_servfail = c.answers_servfail;  // accounted here
      Sent s;
      s.guest_id = p.guest_id;
      s.rest.assign(p.query.begin() + 2, p.query.end());
      const std::vector<uint8_t> servfail = s.Made(2, QuestionLength(p.query));
      Retire(p);
      pending.erase(it);
      Conn& conn = conns[socket];
      if (conn.fwd_closed) {
        FUZZ_CHECK(c.dropped_reply_client_gone ==
                   before.dropped_reply_client_gone + 1);
      } else {
        conn.expect.push_back(servfail);
      }
      return;
    }
    std::vector<uint8_t> want = std::move(msg);
    wire::StoreBe16(want.data(), p.guest_id);
    Retire(p);
    pending.erase(it);
    if (c.dropped_reply_no_buffer != before.dropped_reply_no_buffer) return;
    if (via == Via::kUdp) {
      FUZZ_CHECK(c.dropped_reply_client_gone == before.dropped_reply_client_gone);
      if (c.answers_udp == before.answers_udp + 1) {
        udp_sockets[socket].expect.push_back(std::move(want));
      } else {
        FUZZ_CHECK(c.dropped_reply_send == before.dropped_reply_send + 1);
        // Only what cannot go as one small datagram: larger than an IPv4
        // UDP payload (the forwarder's limit for both families), or a
        // large one the stack could not fragment (a pool exhausted).
        FUZZ_CHECK(want.size() > 1200);
      }
      return;
    }
    Conn& conn = conns[socket];
    if (conn.fwd_closed) {
      FUZZ_CHECK(c.dropped_reply_client_gone ==
                 before.dropped_reply_client_gone + 1);
      return;
    }
    FUZZ_CHECK(c.dropped_reply_client_gone == before.dropped_reply_client_gone);
    if (c.answers_tcp == before.answers_tcp + 1) {
      conn.expect.push_back(std::move(want));
    } else {
      // A send buffer too full for the answer: the forwarder gives up on
      // the connection.
      FUZZ_CHECK(c.dropped_reply_send == before.dropped_reply_send + 1);
      conn.fwd_closed = true;
    }
  }

  DnsForwarderOptions options;
  Instant now = absl::FromUnixSeconds(1'700'000'000);
  Host guest;
  Host server;
  eventloop::EventLoop* loop;  // the server runtime's: the forwarder's
  std::unique_ptr<DnsForwarder> fwd;
  std::vector<size_t> upstreams;  // 0: 127.0.0.1, 1: ::1
  size_t current = 0;

  std::deque<Sent> sent;
  // By arrival (ids may repeat: each query has a socket of its own).
  // Ordered: the script picks the n-th, the same one in every run.
  std::map<uint64_t, Pending> pending;
  uint64_t next_key = 0;
  std::deque<uint16_t> retired;
  std::optional<uint64_t> newest;
  DnsCounters last;
  uint64_t timeouts_seen = 0;
  GuestUdp udp_sockets[2 * kGuestPorts];
  std::vector<Conn> conns;
};

std::span<const uint8_t> Capped(fuzz::FuzzInput& in, size_t cap) {
  const auto r = in.Record();
  return r.first(std::min(r.size(), cap));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::FuzzInput in(data, size);
  // The upstreams first: they are the process's, not the input's.
  for (size_t u = 0; u < 2; ++u) {
    while (RecvDatagram(Upstream(u).fd)) {
    }
    for (int fd; (fd = AcceptUpstream(TcpUpstream(u))) >= 0;) close(fd);
  }
  const size_t fds = OpenFdCount();
  buffer::ChunkPool guest_chunks(512), fwd_chunks(512);
  buffer::PacketPool guest_packets(1024), fwd_packets(1024);
  {
    Fuzz f(guest_chunks, guest_packets, fwd_chunks, fwd_packets);
    const uint8_t ups = in.U8();
    f.upstreams = {static_cast<size_t>((ups >> 1) & 1)};
    if (ups & 1) f.upstreams.push_back(1 - f.upstreams[0]);
    f.options.listen = {{Ip("10.0.2.3"), kDnsPort}, {Ip("fd00::3"), kDnsPort}};
    for (size_t u : f.upstreams) f.options.upstreams.push_back(Upstream(u).addr);
    f.options.max_pending = 1 + in.U8() % 16;
    f.options.max_tcp_clients = 1 + in.U8() % 4;
    f.options.timeout =
        absl::Seconds(1) + absl::Milliseconds(500) * (in.U8() % 8);
    auto fwd = DnsForwarder::Create(*f.server.udp, f.server.tcp,
                                    fwd_chunks, *f.loop, f.options);
    FUZZ_CHECK(fwd.ok());
    f.fwd = *std::move(fwd);

    for (int step = 0; step < kMaxSteps && !in.done(); ++step) {
      const uint8_t op = in.U8();
      const bool v6 = (op >> 3) & 1;
      switch (op & 7) {
        case 0:  // UDP query
          f.UdpQuery(v6, (op >> 4) & 3, Capped(in, kMaxUdpQuery));
          break;
        case 1:  // connect
          f.Connect(v6);
          break;
        case 2:  // TCP bytes
        case 3: {  // one TCP message, prefixed
          const uint8_t which = in.U8();
          const auto body = Capped(in, kMaxTcpWrite);
          if (f.conns.empty()) break;
          const size_t c = which % f.conns.size();
          if ((op & 7) == 2) {
            f.Write(c, body);
          } else {
            std::vector<uint8_t> m(2);
            wire::StoreBe16(m.data(), static_cast<uint16_t>(body.size()));
            m.insert(m.end(), body.begin(), body.end());
            f.Write(c, m);
          }
          break;
        }
        case 4: {  // an upstream message to a pending query's socket
          const uint8_t choice = in.U8();
          std::vector<uint8_t> msg(2);
          const uint16_t raw = ((op >> 4) & 3) == 0 ? in.U16() : 0;
          const auto body = in.Record();
          if (f.pending.empty()) break;
          auto it = f.pending.begin();
          std::advance(it, choice % f.pending.size());
          switch ((op >> 4) & 3) {
            case 0:
              wire::StoreBe16(msg.data(), raw);
              break;
            case 1:
            case 3:
              wire::StoreBe16(msg.data(), it->second.id);
              break;
            default:
              if (f.retired.empty()) break;
              wire::StoreBe16(msg.data(), f.retired[choice % f.retired.size()]);
              break;
          }
          msg.insert(msg.end(), body.begin(), body.end());
          if ((op & 0x80) && msg.size() > 2) msg[2] |= kQrBit;
          f.Answer(it->first, std::move(msg));
          break;
        }
        case 5: {  // a well-formed answer to a pending query
          const uint8_t choice = in.U8();
          const auto extra = Capped(in, 2048);
          if (f.pending.empty()) break;
          auto it = f.pending.begin();
          if (op & 0x80 && f.newest && f.pending.contains(*f.newest)) {
            it = f.pending.find(*f.newest);
          } else {
            std::advance(it, choice % f.pending.size());
          }
          std::vector<uint8_t> msg = it->second.query;
          msg[2] |= kQrBit;
          msg.insert(msg.end(), extra.begin(), extra.end());
          f.Answer(it->first, std::move(msg));
          break;
        }
        case 6:  // time passes
          f.now += absl::Milliseconds(in.U16());
          if (op & 0x80) f.now += absl::Seconds(in.U8() % 16);
          break;
        default: {  // close
          const uint8_t which = in.U8();
          if (f.conns.empty()) break;
          f.Close(which % f.conns.size(), (op >> 4) & 3);
          break;
        }
      }
      f.Settle();
      if (Verbose()) {
        std::fprintf(stderr, "step %d op %u: pending %zu clients %zu\n%s",
                     step, op, f.fwd->pending(), f.fwd->tcp_clients(),
                     f.fwd->counters().Format().c_str());
      }
      f.CheckStep();
    }
    f.fwd.reset();
    for (auto& [key, p] : f.pending) f.Retire(p);
    for (GuestUdp& g : f.udp_sockets) g.socket.reset();
    f.conns.clear();
    f.guest.rt.reset();
    f.server.rt.reset();
  }
  FUZZ_CHECK(guest_chunks.stats().in_use == 0);
  FUZZ_CHECK(fwd_chunks.stats().in_use == 0);
  FUZZ_CHECK(guest_packets.stats().in_use == 0);
  FUZZ_CHECK(fwd_packets.stats().in_use == 0);
  FUZZ_CHECK(OpenFdCount() == fds);
  return 0;
}

}  // namespace netstack::backend
