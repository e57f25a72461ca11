#include "netstack/backend/dns_forwarder.h"

#include <netinet/in.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "netstack/backend/dns_config.h"
#include "netstack/wire/bytes.h"

namespace netstack::backend {

using transport::IpAddress;
using transport::SocketAddress;

namespace {

// The header (RFC 1035 4.1.1):
//                                 1  1  1  1  1  1
//   0  1  2  3  4  5  6  7  8  9  0  1  2  3  4  5
// +--+--+--+--+--+--+--+--+--+--+--+--+--+--+--+--+
// |                      ID                       |
// |QR|   Opcode  |AA|TC|RD|RA|   Z    |   RCODE   |
// |                    QDCOUNT                    |
// |            ANCOUNT, NSCOUNT, ARCOUNT          |
constexpr size_t kFlagsOffset = 2;
constexpr size_t kRcodeOffset = 3;
constexpr size_t kQdcountOffset = 4;
constexpr uint8_t kQrBit = 0x80;       // byte 2
constexpr uint8_t kOpcodeMask = 0x78;  // byte 2; QUERY is 0
constexpr uint8_t kRdBit = 0x01;       // byte 2
constexpr uint8_t kRaBit = 0x80;       // byte 3
constexpr uint8_t kRcodeFormErr = 1;
constexpr uint8_t kRcodeServFail = 2;
constexpr uint8_t kRcodeNotImp = 4;
// A name is at most 255 octets, labels at most 63 (RFC 1035 2.3.4).
constexpr size_t kMaxName = 255;
constexpr uint8_t kMaxLabel = 63;
// Datagrams read from one query's socket per wake-up: what is not its
// answer is dropped, and a flood of those waits for the next turn.
constexpr int kReadsPerWake = 16;

bool IsLoopback(const IpAddress& ip) {
  if (ip.is_v4()) return ip.v4().bytes[0] == 127;
  static const IpAddress kLo6 = *IpAddress::Parse("::1");
  return ip == kLo6;
}

// The length of the question entry at the header's end (QNAME, QTYPE,
// QCLASS: RFC 1035 4.1.2), or 0 if it does not parse. Its name is never
// compressed: no name precedes it that a pointer could name (4.1.4), so
// a pointer (and an extended label type, RFC 6891 5) is malformed.
size_t QuestionLength(std::span<const uint8_t> m) {
  size_t at = DnsForwarder::kHeaderLen;
  for (;;) {
    if (at >= m.size()) return 0;
    const uint8_t label = m[at];
    if (label > kMaxLabel) return 0;
    ++at;
    if (label == 0) break;
    at += label;
    if (at - DnsForwarder::kHeaderLen >= kMaxName) return 0;  // + the root
  }
  if (m.size() - at < 4) return 0;
  return at + 4 - DnsForwarder::kHeaderLen;
}

uint8_t AsciiLower(uint8_t c) {
  return c >= 'A' && c <= 'Z' ? static_cast<uint8_t>(c + ('a' - 'A')) : c;
}

// Whether `answer`'s question section is `question` (one entry, as
// QuestionLength measured it): the name without regard to ASCII case
// (RFC 4343; its length octets, at most 63, are never letters), the type
// and class exactly.
bool SameQuestion(std::span<const uint8_t> answer,
                  std::span<const uint8_t> question) {
  if (wire::LoadBe16(&answer[kQdcountOffset]) != 1 ||
      answer.size() < DnsForwarder::kHeaderLen + question.size()) {
    return false;
  }
  const uint8_t* a = answer.data() + DnsForwarder::kHeaderLen;
  const size_t name = question.size() - 4;
  for (size_t i = 0; i < name; ++i) {
    if (AsciiLower(a[i]) != AsciiLower(question[i])) return false;
  }
  return std::memcmp(a + name, question.data() + name, 4) == 0;
}

}  // namespace

std::string DnsCounters::Format() const {
  std::string out;
#define NETSTACK_DNS_LINE(f, name) \
  absl::StrAppend(&out, "backend.dns." name " ", f, "\n");
  NETSTACK_DNS_COUNTERS(NETSTACK_DNS_LINE)
#undef NETSTACK_DNS_LINE
  absl::StrAppend(
      &out, "backend.dns.policy.queries_denied ", policy.queries_denied,
      "\nbackend.dns.policy.answers_pinned ", policy.answers_pinned,
      "\nbackend.dns.policy.addresses_pinned ", policy.addresses_pinned,
      "\nbackend.dns.policy.records_stripped ", policy.records_stripped,
      "\nbackend.dns.policy.answers_malformed ", policy.answers_malformed,
      "\n");
  return out;
}

// Who asked, and where the answer goes.
struct DnsForwarder::Origin {
  uint16_t guest_id = 0;
  SocketAddress guest;
  size_t listener = 0;
  uint64_t tcp_client = 0;  // 0: UDP
};

// A query's TCP connection upstream: the message with its length prefix
// until it is written, then the answer as it arrives.
struct DnsForwarder::TcpLeg {
  bool connected = false;
  std::vector<uint8_t> out;
  size_t written = 0;
  uint8_t length[2] = {0, 0};
  size_t length_read = 0;
  buffer::ChunkRef answer;
  size_t answer_read = 0;
};

// A query waiting upstream: its socket's loop handler.
struct DnsForwarder::Pending final : public eventloop::Handler {
  explicit Pending(DnsForwarder& f) : forwarder(f) {}
  void OnReadable(Instant now) override { forwarder.ReadUpstream(*this, now); }
  void OnWritable(Instant now) override { forwarder.WriteUpstream(*this, now); }
  // Errors come to OnReadable/OnWritable, for the interest registered;
  // here only when neither took the fd away.
  void OnError(Instant now, uint32_t) override {
    if (tcp && tcp->written < tcp->out.size()) {
      forwarder.WriteUpstream(*this, now);
    } else {
      forwarder.ReadUpstream(*this, now);
    }
  }
  std::span<const uint8_t> question_bytes() const {
    return std::span<const uint8_t>(question.data(), question_length);
  }

  DnsForwarder& forwarder;
  std::list<Pending>::iterator self;
  Origin origin;
  uint16_t upstream_id = 0;
  uint8_t flags = 0;  // the query's byte 2: opcode and RD, for a SERVFAIL
  size_t upstream = 0;
  Instant deadline;
  int fd = -1;
  uint16_t question_length = 0;
  std::array<uint8_t, kMaxName + 4> question;
  std::unique_ptr<TcpLeg> tcp;  // a TCP query's; null for UDP
};

struct DnsForwarder::TcpClient {
  std::unique_ptr<tcp::TcpSocket> socket;
  // The message being assembled: its 2-byte length, then its bytes.
  std::vector<uint8_t> buffer;
};

// ConnectUpstream's result: fd < 0 with `unreachable` when every
// upstream's connect failed at once, else a local failure (errno `err`).
struct DnsForwarder::Opened {
  int fd = -1;
  size_t upstream = 0;
  bool unreachable = false;
  int err = 0;
};

absl::StatusOr<std::unique_ptr<DnsForwarder>> DnsForwarder::Create(
    udp::UdpLayer& udp, tcp::TcpLayer* tcp, buffer::ChunkPool& chunks,
    eventloop::EventLoop& loop, DnsForwarderOptions options) {
  if (options.upstreams.empty()) {
    absl::StatusOr<std::vector<SocketAddress>> r = ReadResolvConf();
    if (!r.ok()) return r.status();
    options.upstreams = *std::move(r);
  }
  if (options.upstreams.empty()) {
    return absl::InvalidArgumentError("no DNS upstream");
  }
  if (options.tcp && tcp == nullptr) {
    return absl::InvalidArgumentError("dns over tcp needs a TcpLayer");
  }
  if (options.max_pending == 0 || options.max_pending > 32768) {
    return absl::InvalidArgumentError("dns max_pending must be 1..32768");
  }
  std::unique_ptr<DnsForwarder> f(
      new DnsForwarder(udp, tcp, chunks, loop, std::move(options)));
  if (absl::Status s = f->Start(); !s.ok()) return s;
  return f;
}

DnsForwarder::DnsForwarder(udp::UdpLayer& udp, tcp::TcpLayer* tcp,
                           buffer::ChunkPool& chunks,
                           eventloop::EventLoop& loop,
                           DnsForwarderOptions options)
    : udp_(udp),
      tcp_(tcp),
      chunks_(chunks),
      loop_(loop),
      options_(std::move(options)) {}

absl::Status DnsForwarder::Start() {
  // The first batch of ids now: a system without getrandom fails here
  // rather than at the first query.
  if (!NextId().has_value()) {
    return absl::ErrnoToStatus(errno, "getrandom (DNS query ids)");
  }
  for (size_t i = 0; i < options_.listen.size(); ++i) {
    const SocketAddress& a = options_.listen[i];
    std::unique_ptr<udp::UdpSocket> s = udp_.Open(a.ip.family());
    if (absl::Status st = s->Bind(a); !st.ok()) return st;
    s->set_callback([this, i](uint32_t) { ReadGuestUdp(i); });
    udp_listeners_.push_back(std::move(s));
    if (options_.tcp) {
      std::unique_ptr<tcp::TcpSocket> l = tcp_->Open(a.ip.family());
      if (absl::Status st = l->Bind(a); !st.ok()) return st;
      if (absl::Status st = l->Listen(16); !st.ok()) return st;
      l->set_callback([this, i](uint32_t) { AcceptTcp(i); });
      tcp_listeners_.push_back(std::move(l));
    }
  }
  loop_.AddPoller(this);
  return absl::OkStatus();
}

DnsForwarder::~DnsForwarder() {
  loop_.RemovePoller(this);
  for (Pending& p : order_) {
    (void)loop_.Remove(p.fd);
    close(p.fd);
  }
  order_.clear();
  for (auto& [id, c] : clients_) c->socket->Close();
  for (auto& l : tcp_listeners_) l->Close();
  for (auto& s : udp_listeners_) s->Close();
}

std::optional<uint16_t> DnsForwarder::NextId() {
  if (next_id_ == ids_.size()) {
    // At most 256 bytes: once the kernel's pool is initialized, never
    // short and never interrupted (getrandom(2)).
    const ssize_t n = getrandom(ids_.data(), sizeof(ids_), 0);
    if (n != static_cast<ssize_t>(sizeof(ids_))) return std::nullopt;
    next_id_ = 0;
  }
  return ids_[next_id_++];
}

// ---------------------------------------------------------------------------
// Guest side

void DnsForwarder::ReadGuestUdp(size_t listener) {
  udp::UdpSocket& s = *udp_listeners_[listener];
  const Instant now = loop_.Now();
  for (int i = 0; i < 64; ++i) {
    absl::StatusOr<udp::ReceivedDatagram> d = s.RecvDatagram();
    if (!d.ok()) {
      if (transport::IsWouldBlock(d.status())) return;
      continue;  // a pending error, reported once
    }
    const std::span<const uint8_t> q = d->payload.bytes();
    if (q.size() < kHeaderLen) {
      ++counters_.dropped_short;
      continue;
    }
    if (q[kFlagsOffset] & kQrBit) {
      ++counters_.dropped_not_query;
      continue;
    }
    ++counters_.queries_udp;
    Forward(q,
            Origin{.guest_id = wire::LoadBe16(q.data()),
                   .guest = d->from,
                   .listener = listener},
            /*over_tcp=*/false, now);
  }
}

void DnsForwarder::AcceptTcp(size_t listener) {
  for (;;) {
    absl::StatusOr<std::unique_ptr<tcp::TcpSocket>> c =
        tcp_listeners_[listener]->Accept();
    if (!c.ok()) return;
    if (clients_.size() >= options_.max_tcp_clients) {
      ++counters_.dropped_tcp_clients_full;
      (*c)->Abort();
      graveyard_.push_back(*std::move(c));
      continue;
    }
    ++counters_.tcp_connections;
    const uint64_t id = next_client_id_++;
    auto client = std::make_unique<TcpClient>();
    client->socket = *std::move(c);
    client->socket->set_callback([this, id](uint32_t) { ReadTcpClient(id); });
    clients_.emplace(id, std::move(client));
  }
}

void DnsForwarder::ReadTcpClient(uint64_t id) {
  auto it = clients_.find(id);
  if (it == clients_.end()) return;
  TcpClient& c = *it->second;
  const Instant now = loop_.Now();
  for (;;) {
    // Read the length first, then exactly the message: one message at a
    // time is buffered. A zero length is a whole (malformed) message as
    // soon as it is read: reading its empty body would return 0, which
    // looks like the guest's FIN.
    const bool have_length = c.buffer.size() >= 2;
    const size_t want =
        have_length ? 2 + wire::LoadBe16(c.buffer.data()) : size_t{2};
    if (c.buffer.size() < want) {
      const size_t have = c.buffer.size();
      c.buffer.resize(want);
      absl::StatusOr<size_t> n =
          c.socket->Read(std::span<uint8_t>(c.buffer).subspan(have));
      if (!n.ok()) {
        c.buffer.resize(have);
        if (transport::IsWouldBlock(n.status())) return;
        return CloseTcpClient(id);  // reset or error
      }
      if (*n == 0) {
        c.buffer.resize(have);
        return CloseTcpClient(id);  // the guest's FIN
      }
      c.buffer.resize(have + *n);
      if (c.buffer.size() < want || !have_length) continue;
    }
    // A whole message.
    const std::span<const uint8_t> q = std::span(c.buffer).subspan(2);
    if (q.size() < kHeaderLen || (q[kFlagsOffset] & kQrBit)) {
      ++counters_.dropped_tcp_malformed;
      return CloseTcpClient(id);
    }
    ++counters_.queries_tcp;
    Forward(q,
            Origin{.guest_id = wire::LoadBe16(q.data()),
                   .guest = c.socket->remote_address(),
                   .tcp_client = id},
            /*over_tcp=*/true, now);
    // Forward may have closed this client (an answer of ours that its
    // send buffer did not take).
    if (!clients_.contains(id)) return;
    c.buffer.clear();
  }
}

void DnsForwarder::CloseTcpClient(uint64_t id) {
  auto it = clients_.find(id);
  if (it == clients_.end()) return;
  it->second->socket->Close();
  graveyard_.push_back(std::move(it->second->socket));
  clients_.erase(it);
}

void DnsForwarder::Forward(std::span<const uint8_t> query, const Origin& origin,
                           bool over_tcp, Instant now) {
  const uint8_t flags = query[kFlagsOffset];
  const size_t question_length = QuestionLength(query);
  const bool one_question =
      wire::LoadBe16(&query[kQdcountOffset]) == 1 && question_length != 0;
  const std::span<const uint8_t> question =
      one_question ? query.subspan(kHeaderLen, question_length)
                   : std::span<const uint8_t>();
  if ((flags & kOpcodeMask) != 0) {
    ++counters_.answers_notimp;
    return Reply(origin, flags, kRcodeNotImp, question, now);
  }
  if (!one_question) {
    ++counters_.answers_formerr;
    return Reply(origin, flags, kRcodeFormErr, {}, now);
  }
  if (const policy::Policy* pol = options_.policy ? options_.policy() : nullptr;
      pol != nullptr) {
    std::array<char, policy::kNameTextMax> text;
    const std::string_view qname = policy::QuestionNameText(question, text);
    policy::Verdict verdict;
    if (policy::DecideQuery(*pol, qname, counters_.policy, &verdict) ==
        policy::QueryAction::kNxdomain) {
      ReplyNxdomain(origin, query, now);
      if (options_.on_denied) {
        DnsDenial d{.qname = qname,
                    .verdict = verdict,
                    .guest = origin.guest,
                    .over_tcp = over_tcp};
        if (!over_tcp) {
          d.server = options_.listen[origin.listener];
        } else if (auto it = clients_.find(origin.tcp_client);
                   it != clients_.end()) {
          d.server = it->second->socket->local_address();
        }
        options_.on_denied(d);
      }
      return;
    }
  }
  if (order_.size() >= options_.max_pending) {
    ++counters_.dropped_table_full;
    return;
  }
  const auto servfail = [&](uint64_t* reason) {
    if (reason != nullptr) ++*reason;
    ++counters_.answers_servfail;
    Reply(origin, flags, kRcodeServFail, question, now);
  };
  if (over_tcp && tcp_upstreams_ >= options_.max_tcp_clients) {
    return servfail(&counters_.upstream_tcp_full);
  }
  const std::optional<uint16_t> id = NextId();
  if (!id) return servfail(&counters_.upstream_no_random_id);
  const Opened o = ConnectUpstream(over_tcp ? SOCK_STREAM : SOCK_DGRAM);
  if (o.fd < 0) {
    // ConnectUpstream counted each upstream it could not reach.
    return servfail(o.unreachable ? nullptr
                                  : &counters_.upstream_socket_failed);
  }
  Pending& p = order_.emplace_back(*this);
  p.self = std::prev(order_.end());
  p.origin = origin;
  p.upstream_id = *id;
  p.flags = flags;
  p.upstream = o.upstream;
  p.deadline = now + options_.timeout;
  p.question_length = static_cast<uint16_t>(question.size());
  std::copy(question.begin(), question.end(), p.question.begin());
  if (over_tcp) {
    ++tcp_upstreams_;
    p.tcp = std::make_unique<TcpLeg>();
    std::vector<uint8_t>& out = p.tcp->out;
    out.resize(2 + query.size());
    wire::StoreBe16(out.data(), static_cast<uint16_t>(query.size()));
    wire::StoreBe16(out.data() + 2, *id);
    std::copy(query.begin() + 2, query.end(), out.begin() + 4);
  }
  // A TCP query waits for its connect (writable, or an error).
  if (!loop_
           .Add(o.fd,
                over_tcp ? eventloop::EventLoop::kWritable
                         : eventloop::EventLoop::kReadable,
                &p)
           .ok()) {
    close(o.fd);  // p.fd stays -1: Finish has nothing to remove
    return Fail(p, counters_.upstream_socket_failed, now);
  }
  p.fd = o.fd;
  if (!over_tcp) SendUdp(p, query, now);
}

void DnsForwarder::SendUdp(Pending& p, std::span<const uint8_t> query,
                           Instant now) {
  uint8_t id_bytes[2];
  wire::StoreBe16(id_bytes, p.upstream_id);
  iovec iov[2] = {{id_bytes, 2},
                  {const_cast<uint8_t*>(query.data() + 2), query.size() - 2}};
  msghdr msg{};
  msg.msg_iov = iov;
  msg.msg_iovlen = 2;
  ssize_t n;
  do {
    n = sendmsg(p.fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  if (n < 0) Fail(p, counters_.upstream_send_failed, now);
}

std::optional<SocketAddress> DnsForwarder::OutboundSource(
    const IpAddress& upstream) const {
  // The host's own resolver on loopback takes queries from loopback
  // only: no outbound bind for it.
  if (IsLoopback(upstream)) return std::nullopt;
  if (upstream.is_v4() && options_.bind.v4) {
    return SocketAddress{IpAddress(*options_.bind.v4), 0};
  }
  if (upstream.is_v6() && options_.bind.v6) {
    return SocketAddress{IpAddress(*options_.bind.v6), 0};
  }
  return std::nullopt;
}

int DnsForwarder::OpenUpstream(const SocketAddress& a, int type,
                               bool* local_failure) const {
  *local_failure = false;
  const bool v4 = a.ip.is_v4();
  const int fd =
      socket(v4 ? AF_INET : AF_INET6, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    // No IPv6 here concerns this upstream only; fds or memory, all alike.
    *local_failure = errno != EAFNOSUPPORT;
    return -errno;
  }
  int err = 0;
  const int one = 1;
  // A v4-mapped upstream must not reach IPv4 through an AF_INET6 socket
  // (review 2026-12-06, finding 3): with V6ONLY its connect fails.
  if (!v4 &&
      setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one)) != 0) {
    err = errno;
  }
  sockaddr_storage ss;
  const std::optional<SocketAddress> local = OutboundSource(a.ip);
  if (err == 0 && local) {
    const socklen_t len = ToSockaddr(*local, ss);
    if (bind(fd, reinterpret_cast<const sockaddr*>(&ss), len) != 0) {
      err = errno;
    }
  }
  if (err == 0) {
    // The port is the kernel's random pick, here or at bind: a fresh one
    // per query (RFC 5452 10).
    const socklen_t len = ToSockaddr(a, ss);
    int rc;
    do {
      rc = connect(fd, reinterpret_cast<const sockaddr*>(&ss), len);
    } while (rc != 0 && errno == EINTR);
    if (rc != 0 && errno != EINPROGRESS) err = errno;
  }
  if (err != 0) {
    close(fd);
    return -err;
  }
  return fd;
}

DnsForwarder::Opened DnsForwarder::ConnectUpstream(int type) {
  const size_t count = options_.upstreams.size();
  int last_err = 0;
  size_t last = current_upstream_;
  for (size_t k = 0; k < count; ++k) {
    const size_t i = (current_upstream_ + k) % count;
    bool local_failure = false;
    const int fd = OpenUpstream(options_.upstreams[i], type, &local_failure);
    if (local_failure) return Opened{.err = -fd};
    if (fd >= 0) {
      if (k != 0) current_upstream_ = i;
      if (unreachable_) {
        unreachable_ = false;
        std::fprintf(stderr,
                     "netstack backend: DNS upstream %s reachable again\n",
                     options_.upstreams[i].ToString().c_str());
      }
      return Opened{.fd = fd, .upstream = i};
    }
    ++counters_.upstream_unreachable;
    last_err = -fd;
    last = i;
  }
  // Said once, until an upstream can be reached again.
  if (!unreachable_) {
    unreachable_ = true;
    std::fprintf(stderr,
                 "netstack backend: no DNS upstream can be reached (%s: %s); "
                 "the guest's queries get SERVFAIL until one can\n",
                 options_.upstreams[last].ToString().c_str(),
                 std::strerror(last_err));
  }
  return Opened{.unreachable = true, .err = last_err};
}

// ---------------------------------------------------------------------------
// Upstream side

void DnsForwarder::ReadUpstream(Pending& p, Instant now) {
  if (p.tcp) {
    ReadUpstreamTcp(p, now);
  } else {
    ReadUpstreamUdp(p, now);
  }
}

bool DnsForwarder::IsAnswer(const Pending& p, std::span<const uint8_t> a) {
  if (a.size() < kHeaderLen) {
    ++counters_.dropped_reply_short;
    return false;
  }
  if (!(a[kFlagsOffset] & kQrBit)) {
    ++counters_.dropped_reply_not_response;
    return false;
  }
  if (wire::LoadBe16(a.data()) != p.upstream_id) {
    ++counters_.dropped_reply_unknown_id;
    return false;
  }
  if (!SameQuestion(a, p.question_bytes())) {
    ++counters_.dropped_reply_question;
    return false;
  }
  return true;
}

void DnsForwarder::ReadUpstreamUdp(Pending& p, Instant now) {
  for (int i = 0; i < kReadsPerWake; ++i) {
    buffer::ChunkRef chunk = chunks_.Allocate();
    uint8_t scratch[1];
    std::span<uint8_t> room =
        chunk ? chunk->unshared_tail(0) : std::span<uint8_t>(scratch);
    const ssize_t n = recv(p.fd, room.data(), room.size(), MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) return;
      // ECONNREFUSED: nobody at the upstream's port (ICMP); others: ICMP
      // unreachable. Either way this upstream will not answer.
      const size_t upstream = p.upstream;
      Fail(p,
           errno == ECONNREFUSED ? counters_.upstream_refused
                                 : counters_.upstream_unreachable,
           now);
      return FailOver(upstream);
    }
    if (!chunk) {
      ++counters_.dropped_reply_no_buffer;
      continue;
    }
    const std::span<uint8_t> a = room.first(static_cast<size_t>(n));
    if (!IsAnswer(p, a)) continue;
    wire::StoreBe16(a.data(), p.origin.guest_id);
    const size_t length = FilterAnswer(p, room, a.size(), now);
    if (length == 0) return Servfail(p, now);
    const Origin origin = p.origin;
    Finish(p);
    if (DeliverAnswer(origin,
                      buffer::PayloadView(std::move(chunk), 0,
                                          static_cast<uint32_t>(length)),
                      now)) {
      ++counters_.answers_udp;
    }
    return;
  }
}

void DnsForwarder::WriteUpstream(Pending& p, Instant now) {
  if (!p.tcp) return;
  TcpLeg& t = *p.tcp;
  if (!t.connected) {
    int err = 0;
    socklen_t len = sizeof(err);
    if (getsockopt(p.fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
    if (err != 0) {
      const size_t upstream = p.upstream;
      Fail(p,
           err == ECONNREFUSED ? counters_.upstream_refused
                               : counters_.upstream_tcp_failed,
           now);
      return FailOver(upstream);
    }
    t.connected = true;
  }
  while (t.written < t.out.size()) {
    const ssize_t n =
        send(p.fd, t.out.data() + t.written, t.out.size() - t.written,
             MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) return;  // writable again later
      return Fail(p, counters_.upstream_tcp_failed, now);
    }
    t.written += static_cast<size_t>(n);
  }
  std::vector<uint8_t>().swap(t.out);
  t.written = 0;
  if (!loop_.Modify(p.fd, eventloop::EventLoop::kReadable).ok()) {
    Fail(p, counters_.upstream_socket_failed, now);
  }
}

void DnsForwarder::ReadUpstreamTcp(Pending& p, Instant now) {
  TcpLeg& t = *p.tcp;
  if (!t.out.empty()) return;  // still writing the query
  // One answer per connection: its length, then exactly that many bytes.
  for (;;) {
    const size_t want = wire::LoadBe16(t.length);
    std::span<uint8_t> room;
    if (t.length_read < 2) {
      room = std::span<uint8_t>(t.length).subspan(t.length_read);
    } else if (t.answer_read < want) {
      if (!t.answer) {
        t.answer = chunks_.Allocate();
        if (!t.answer) return Fail(p, counters_.dropped_reply_no_buffer, now);
      }
      room = t.answer->unshared_tail(0).subspan(t.answer_read,
                                                want - t.answer_read);
    } else {
      break;  // whole
    }
    const ssize_t n = recv(p.fd, room.data(), room.size(), MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) return;
      return Fail(p, counters_.upstream_tcp_failed, now);
    }
    if (n == 0) return Fail(p, counters_.upstream_tcp_failed, now);  // EOF
    if (t.length_read < 2) {
      t.length_read += static_cast<size_t>(n);
    } else {
      t.answer_read += static_cast<size_t>(n);
    }
  }
  const size_t length = wire::LoadBe16(t.length);
  const std::span<uint8_t> a = t.answer
                                   ? t.answer->unshared_tail(0).first(length)
                                   : std::span<uint8_t>();
  if (!IsAnswer(p, a)) {
    // IsAnswer counted why; over TCP nothing else will come.
    ++counters_.answers_servfail;
    Reply(p.origin, p.flags, kRcodeServFail, p.question_bytes(), now);
    return Finish(p);
  }
  wire::StoreBe16(a.data(), p.origin.guest_id);
  const size_t filtered =
      FilterAnswer(p, t.answer->unshared_tail(0), length, now);
  if (filtered == 0) return Servfail(p, now);
  const Origin origin = p.origin;
  buffer::ChunkRef chunk = std::move(t.answer);
  Finish(p);
  if (DeliverAnswer(origin,
                    buffer::PayloadView(std::move(chunk), 0,
                                        static_cast<uint32_t>(filtered)),
                    now)) {
    ++counters_.answers_tcp;
  }
}

void DnsForwarder::Finish(Pending& p) {
  if (p.fd >= 0) {
    (void)loop_.Remove(p.fd);
    close(p.fd);
  }
  if (p.tcp) --tcp_upstreams_;
  order_.erase(p.self);
}

void DnsForwarder::Fail(Pending& p, uint64_t& reason, Instant now) {
  ++reason;
  Servfail(p, now);
}

void DnsForwarder::Servfail(Pending& p, Instant now) {
  ++counters_.answers_servfail;
  Reply(p.origin, p.flags, kRcodeServFail, p.question_bytes(), now);
  Finish(p);
}

size_t DnsForwarder::FilterAnswer(const Pending& p, std::span<uint8_t> a,
                                  size_t len, Instant now) {
  const policy::Policy* pol = options_.policy ? options_.policy() : nullptr;
  if (pol == nullptr) return len;
  std::array<char, policy::kNameTextMax> text;
  const std::string_view qname =
      policy::QuestionNameText(p.question_bytes(), text);
  // FilterAnswer counts why it answers 0 (policy.answers_malformed).
  return policy::FilterAnswer(*pol, options_.pins, now, qname, a, len,
                              counters_.policy);
}

void DnsForwarder::ReplyNxdomain(const Origin& o,
                                 std::span<const uint8_t> query, Instant now) {
  buffer::ChunkRef chunk = chunks_.Allocate();
  if (!chunk) {
    ++counters_.dropped_reply_no_buffer;
    return;
  }
  // Forward has checked the question, so this cannot be 0.
  const size_t n = policy::WriteNxdomain(query, chunk->unshared_tail(0));
  if (n == 0) return;
  (void)DeliverAnswer(
      o, buffer::PayloadView(std::move(chunk), 0, static_cast<uint32_t>(n)),
      now);
}

void DnsForwarder::FailOver(size_t from) {
  if (from == current_upstream_) {
    current_upstream_ = (current_upstream_ + 1) % options_.upstreams.size();
  }
}

void DnsForwarder::Reply(const Origin& o, uint8_t flags, uint8_t rcode,
                         std::span<const uint8_t> question, Instant now) {
  buffer::ChunkRef chunk = chunks_.Allocate();
  if (!chunk) {
    ++counters_.dropped_reply_no_buffer;
    return;
  }
  const std::span<uint8_t> m = chunk->unshared_tail(0);
  std::fill_n(m.begin(), kHeaderLen, 0);
  wire::StoreBe16(m.data(), o.guest_id);
  m[kFlagsOffset] = kQrBit | (flags & (kOpcodeMask | kRdBit));
  m[kRcodeOffset] = kRaBit | rcode;
  if (!question.empty()) {
    wire::StoreBe16(&m[kQdcountOffset], 1);
    std::copy(question.begin(), question.end(), m.begin() + kHeaderLen);
  }
  (void)DeliverAnswer(
      o,
      buffer::PayloadView(std::move(chunk), 0,
                          static_cast<uint32_t>(kHeaderLen + question.size())),
      now);
}

bool DnsForwarder::DeliverAnswer(const Origin& o, buffer::PayloadView answer,
                                 Instant now) {
  if (o.tcp_client == 0) {
    if (answer.size() > udp::UdpLayer::kMaxIpv4Payload) {
      ++counters_.dropped_reply_send;
      return false;
    }
    if (!udp_listeners_[o.listener]
             ->SendViewsTo(std::span<const buffer::PayloadView>(&answer, 1),
                           o.guest, now)
             .ok()) {
      ++counters_.dropped_reply_send;
      return false;
    }
    return true;
  }
  auto it = clients_.find(o.tcp_client);
  if (it == clients_.end()) {
    ++counters_.dropped_reply_client_gone;
    return false;
  }
  tcp::TcpSocket& s = *it->second->socket;
  uint8_t len[2];
  wire::StoreBe16(len, static_cast<uint16_t>(std::min<size_t>(answer.size(), 65535)));
  // Small messages; a send buffer too full for one answer means a guest
  // that does not read: give up on it rather than buffer without bound.
  absl::StatusOr<size_t> w1 = s.Write(len);
  if (!w1.ok() || *w1 != 2 || !s.WriteView(std::move(answer)).ok()) {
    ++counters_.dropped_reply_send;
    CloseTcpClient(o.tcp_client);
    return false;
  }
  return true;
}

Instant DnsForwarder::NextDeadline() const {
  if (!graveyard_.empty()) return absl::InfinitePast();
  return order_.empty() ? kNever : order_.front().deadline;
}

void DnsForwarder::Poll(Instant now) {
  graveyard_.clear();
  bool timed_out = false;
  while (!order_.empty() && order_.front().deadline <= now) {
    Finish(order_.front());
    ++counters_.timeouts;
    timed_out = true;
  }
  // Fail over: the next query goes to the next upstream.
  if (timed_out) {
    current_upstream_ = (current_upstream_ + 1) % options_.upstreams.size();
  }
}

}  // namespace netstack::backend
