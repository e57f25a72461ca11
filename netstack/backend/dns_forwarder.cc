#include "netstack/backend/dns_forwarder.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "netstack/backend/dns_config.h"
#include "netstack/wire/bytes.h"

namespace netstack::backend {

using transport::IpAddress;
using transport::SocketAddress;

namespace {

constexpr uint8_t kQrBit = 0x80;  // byte 2 of the header (RFC 1035 4.1.1)

bool IsLoopback(const IpAddress& ip) {
  if (ip.is_v4()) return ip.v4().bytes[0] == 127;
  static const IpAddress kLo6 = *IpAddress::Parse("::1");
  return ip == kLo6;
}

}  // namespace

std::string DnsCounters::Format() const {
  std::string out;
#define NETSTACK_DNS_LINE(f, name) \
  absl::StrAppend(&out, "backend.dns." name " ", f, "\n");
  NETSTACK_DNS_COUNTERS(NETSTACK_DNS_LINE)
#undef NETSTACK_DNS_LINE
  return out;
}

struct DnsForwarder::Upstream {
  SocketAddress addr;
  int fd = -1;
  std::unique_ptr<UpstreamHandler> handler;
};

struct DnsForwarder::Pending {
  uint16_t upstream_id = 0;
  uint16_t guest_id = 0;
  SocketAddress guest;
  size_t listener = 0;
  uint64_t tcp_client = 0;  // 0: UDP
  size_t upstream = 0;
  Instant deadline;
};

struct DnsForwarder::TcpClient {
  std::unique_ptr<tcp::TcpSocket> socket;
  // The message being assembled: its 2-byte length, then its bytes.
  std::vector<uint8_t> buffer;
};

class DnsForwarder::UpstreamHandler final : public eventloop::Handler {
 public:
  UpstreamHandler(DnsForwarder& f, Upstream& u) : f_(f), u_(u) {}
  void OnReadable(Instant now) override { f_.ReadUpstream(u_, now); }
  void OnError(Instant now, uint32_t) override { f_.ReadUpstream(u_, now); }

 private:
  DnsForwarder& f_;
  Upstream& u_;
};

absl::StatusOr<std::unique_ptr<DnsForwarder>> DnsForwarder::Create(
    udp::UdpLayer& udp, tcp::TcpLayer* tcp, buffer::ChunkPool& chunks,
    eventloop::EventLoop& loop, DnsForwarderOptions options) {
  if (options.upstreams.empty()) {
    absl::StatusOr<std::vector<SocketAddress>> r = ReadResolvConf();
    if (!r.ok()) return r.status();
    options.upstreams = *std::move(r);
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
      options_(std::move(options)),
      rng_(options_.seed) {}

absl::Status DnsForwarder::Start() {
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
  for (const SocketAddress& a : options_.upstreams) {
    // The host's own resolver on loopback takes queries from loopback
    // only: no outbound bind for it.
    OutboundBind bind = IsLoopback(a.ip) ? OutboundBind{} : options_.bind;
    absl::StatusOr<int> fd = OpenHostDatagramSocket(a.ip.family(), 0, bind);
    if (!fd.ok()) return fd.status();
    auto u = std::make_unique<Upstream>();
    u->addr = a;
    u->fd = *fd;
    sockaddr_storage ss;
    const socklen_t len = ToSockaddr(a, ss);
    if (connect(u->fd, reinterpret_cast<const sockaddr*>(&ss), len) != 0) {
      const int err = errno;
      close(u->fd);
      return absl::ErrnoToStatus(err, absl::StrCat("connect ", a.ToString()));
    }
    u->handler = std::make_unique<UpstreamHandler>(*this, *u);
    if (absl::Status st =
            loop_.Add(u->fd, eventloop::EventLoop::kReadable, u->handler.get());
        !st.ok()) {
      close(u->fd);
      return st;
    }
    upstreams_.push_back(std::move(u));
  }
  loop_.AddPoller(this);
  return absl::OkStatus();
}

DnsForwarder::~DnsForwarder() {
  loop_.RemovePoller(this);
  for (auto& u : upstreams_) {
    (void)loop_.Remove(u->fd);
    close(u->fd);
  }
  for (auto& [id, c] : clients_) c->socket->Close();
  for (auto& l : tcp_listeners_) l->Close();
  for (auto& s : udp_listeners_) s->Close();
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
    if (q[2] & kQrBit) {
      ++counters_.dropped_not_query;
      continue;
    }
    ++counters_.queries_udp;
    Forward(q.subspan(2), wire::LoadBe16(q.data()), d->from, listener, 0, now);
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
    if (q.size() < kHeaderLen || (q[2] & kQrBit)) {
      ++counters_.dropped_tcp_malformed;
      return CloseTcpClient(id);
    }
    ++counters_.queries_tcp;
    Forward(q.subspan(2), wire::LoadBe16(q.data()),
            c.socket->remote_address(), 0, id, now);
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

void DnsForwarder::Forward(std::span<const uint8_t> query_after_id,
                           uint16_t guest_id, const SocketAddress& guest,
                           size_t listener, uint64_t tcp_client, Instant now) {
  if (pending_.size() >= options_.max_pending) {
    ++counters_.dropped_table_full;
    return;
  }
  uint16_t id = 0;
  do {
    id = static_cast<uint16_t>(rng_());
  } while (pending_.contains(id));
  Upstream& u = *upstreams_[current_upstream_];
  uint8_t id_bytes[2];
  wire::StoreBe16(id_bytes, id);
  iovec iov[2] = {{id_bytes, 2},
                  {const_cast<uint8_t*>(query_after_id.data()),
                   query_after_id.size()}};
  msghdr msg{};
  msg.msg_iov = iov;
  msg.msg_iovlen = 2;
  ssize_t n;
  do {
    n = sendmsg(u.fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  if (n < 0) {
    ++counters_.dropped_upstream_send;
    return;
  }
  order_.push_back(Pending{.upstream_id = id,
                           .guest_id = guest_id,
                           .guest = guest,
                           .listener = listener,
                           .tcp_client = tcp_client,
                           .upstream = current_upstream_,
                           .deadline = now + options_.timeout});
  pending_.emplace(id, std::prev(order_.end()));
}

// ---------------------------------------------------------------------------
// Upstream side

void DnsForwarder::ReadUpstream(Upstream& u, Instant now) {
  for (int i = 0; i < 64; ++i) {
    buffer::ChunkRef chunk = chunks_.Allocate();
    uint8_t scratch[1];
    std::span<uint8_t> room =
        chunk ? chunk->unshared_tail(0) : std::span<uint8_t>(scratch);
    const ssize_t n = recv(u.fd, room.data(), room.size(), MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) return;
      continue;  // ECONNREFUSED (nobody at the upstream): its timeout
    }
    if (!chunk) {
      ++counters_.dropped_reply_no_buffer;
      continue;
    }
    if (static_cast<size_t>(n) < kHeaderLen) {
      ++counters_.dropped_reply_short;
      continue;
    }
    uint8_t* a = room.data();
    if (!(a[2] & kQrBit)) {
      ++counters_.dropped_reply_not_response;
      continue;
    }
    auto it = pending_.find(wire::LoadBe16(a));
    if (it == pending_.end() ||
        upstreams_[it->second->upstream].get() != &u) {
      ++counters_.dropped_reply_unknown_id;
      continue;
    }
    Pending p = *it->second;
    order_.erase(it->second);
    pending_.erase(it);
    wire::StoreBe16(a, p.guest_id);
    DeliverAnswer(std::move(p),
                  buffer::PayloadView(std::move(chunk), 0,
                                      static_cast<uint32_t>(n)),
                  now);
  }
}

void DnsForwarder::DeliverAnswer(Pending p, buffer::PayloadView answer,
                                 Instant now) {
  if (p.tcp_client == 0) {
    if (answer.size() > udp::UdpLayer::kMaxIpv4Payload) {
      ++counters_.dropped_reply_send;
      return;
    }
    if (!udp_listeners_[p.listener]
             ->SendViewsTo(std::span<const buffer::PayloadView>(&answer, 1),
                           p.guest, now)
             .ok()) {
      ++counters_.dropped_reply_send;
      return;
    }
    ++counters_.answers_udp;
    return;
  }
  auto it = clients_.find(p.tcp_client);
  if (it == clients_.end()) {
    ++counters_.dropped_reply_client_gone;
    return;
  }
  tcp::TcpSocket& s = *it->second->socket;
  uint8_t len[2];
  wire::StoreBe16(len, static_cast<uint16_t>(std::min<size_t>(answer.size(), 65535)));
  // Small messages; a send buffer too full for one answer means a guest
  // that does not read: give up on it rather than buffer without bound.
  absl::StatusOr<size_t> w1 = s.Write(len);
  if (!w1.ok() || *w1 != 2 || !s.WriteView(std::move(answer)).ok()) {
    ++counters_.dropped_reply_send;
    CloseTcpClient(p.tcp_client);
    return;
  }
  ++counters_.answers_tcp;
}

Instant DnsForwarder::NextDeadline() const {
  if (!graveyard_.empty()) return absl::InfinitePast();
  return order_.empty() ? kNever : order_.front().deadline;
}

void DnsForwarder::Poll(Instant now) {
  graveyard_.clear();
  bool timed_out = false;
  while (!order_.empty() && order_.front().deadline <= now) {
    pending_.erase(order_.front().upstream_id);
    order_.pop_front();
    ++counters_.timeouts;
    timed_out = true;
  }
  // Fail over: the next query goes to the next upstream.
  if (timed_out && !upstreams_.empty()) {
    current_upstream_ = (current_upstream_ + 1) % upstreams_.size();
  }
}

}  // namespace netstack::backend
