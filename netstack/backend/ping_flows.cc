#include "netstack/backend/ping_flows.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "netstack/wire/bytes.h"
#include "netstack/wire/checksum.h"

namespace netstack::backend {

using transport::IpAddress;
using transport::SocketAddress;

namespace {
constexpr uint8_t kIcmp = 1;
constexpr uint8_t kIcmpv6 = 58;
constexpr uint8_t kEchoRequest4 = 8, kEchoReply4 = 0;
constexpr uint8_t kEchoRequest6 = 128, kEchoReply6 = 129;
constexpr size_t kEchoHeaderLen = 8;
}  // namespace

std::string PingCounters::Format() const {
  std::string out;
#define NETSTACK_PING_LINE(f, name) \
  absl::StrAppend(&out, "backend.ping." name " ", f, "\n");
  NETSTACK_PING_COUNTERS(NETSTACK_PING_LINE)
#undef NETSTACK_PING_LINE
  return out;
}

class PingForwarder::FlowHandler final : public eventloop::Handler {
 public:
  FlowHandler(PingForwarder& f, Flow& flow) : f_(f), flow_(flow) {}
  void OnReadable(Instant now) override { f_.ReadHost(flow_, now); }
  void OnError(Instant now, uint32_t) override { f_.ReadHost(flow_, now); }

 private:
  PingForwarder& f_;
  Flow& flow_;
};

struct PingForwarder::Flow {
  Key key;
  int fd = -1;
  Instant last_active;
  std::list<Flow*>::iterator lru;
  std::unique_ptr<FlowHandler> handler;
  Instant opened;
  uint64_t bytes_out = 0;  // echo data, guest to host
  uint64_t bytes_in = 0;   // and back
};

PingForwarder::PingForwarder(stack::Stack& stack, buffer::ChunkPool& chunks,
                             buffer::PacketPool& packets,
                             eventloop::EventLoop& loop, PingOptions options)
    : stack_(stack),
      chunks_(chunks),
      packets_(packets),
      loop_(loop),
      options_(std::move(options)) {
  stack_.SetEchoHandler(this);
  loop_.AddPoller(this);
}

PingForwarder::~PingForwarder() {
  stack_.SetEchoHandler(nullptr);
  loop_.RemovePoller(this);
  while (!lru_.empty()) {
    ++counters_.closed_shutdown;
    Close(lru_.front());
  }
}

bool PingForwarder::OnEchoRequest(const stack::EchoRequest& r, Instant now) {
  const IpAddress dst = r.v6 ? IpAddress(r.dst6) : IpAddress(r.dst4);
  if (std::find(options_.self_addresses.begin(), options_.self_addresses.end(),
                dst) != options_.self_addresses.end()) {
    return false;  // the stack answers for itself
  }
  ++counters_.requests;
  const Key key{r.v6 ? IpAddress(r.src6) : IpAddress(r.src4), dst, r.id};
  Flow* flow = nullptr;
  if (auto it = flows_.find(key); it != flows_.end()) {
    flow = it->second.get();
  } else {
    if (options_.admit) {
      const Admission a =
          options_.admit(SocketAddress{key.guest, 0}, SocketAddress{dst, 0},
                         now);
      if (a.kind == Admission::Kind::kDrop) return true;  // counted there
      if (a.kind == Admission::Kind::kRefuse) {
        ++counters_.refused_policy;
        Refuse(r, now);
        return true;
      }
    }
    flow = Open(key, now);
    if (flow == nullptr) {
      // Admitted, so its opening was logged: its end is too.
      if (options_.closed) {
        options_.closed(SocketAddress{key.guest, 0}, SocketAddress{dst, 0}, 0,
                        0, now);
      }
      return true;  // dropped, counted: no forged reply
    }
  }
  flow->last_active = std::max(flow->last_active, now);
  lru_.splice(lru_.end(), lru_, flow->lru);
  if (options_.egress_limit != nullptr &&
      !options_.egress_limit->TakeDatagram(kEchoHeaderLen + r.data.size(),
                                           now)) {
    return true;  // over the egress rate: lost, counted there
  }

  uint8_t hdr[kEchoHeaderLen] = {};
  hdr[0] = r.v6 ? kEchoRequest6 : kEchoRequest4;
  // The id is the kernel's to fill (the socket's); the checksum too.
  wire::StoreBe16(hdr + 6, r.seq);
  iovec iov[2] = {{hdr, sizeof(hdr)},
                  {const_cast<uint8_t*>(r.data.bytes().data()), r.data.size()}};
  msghdr msg{};
  msg.msg_iov = iov;
  msg.msg_iovlen = r.data.empty() ? 1 : 2;
  ssize_t n;
  do {
    n = sendmsg(flow->fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  if (n < 0) {
    ++counters_.send_failed;
  } else {
    flow->bytes_out += r.data.size();
  }
  return true;
}

void PingForwarder::Refuse(const stack::EchoRequest& r, Instant now) {
  // The quote is the request's first 8 bytes as the guest sent them,
  // checksum included (rebuilt: the stack hands over the parsed request).
  uint8_t hdr[kEchoHeaderLen] = {};
  hdr[0] = r.v6 ? kEchoRequest6 : kEchoRequest4;
  wire::StoreBe16(hdr + 4, r.id);
  wire::StoreBe16(hdr + 6, r.seq);
  wire::ChecksumAccumulator sum;
  if (r.v6) {
    sum.AddFolded(wire::Ipv6PseudoHeaderSum(
        r.src6, r.dst6, kIcmpv6,
        static_cast<uint32_t>(kEchoHeaderLen + r.data.size())));
  }
  sum.Add(std::span<const uint8_t>(hdr, kEchoHeaderLen));
  sum.Add(r.data.bytes());
  wire::StoreBe16(hdr + 2, sum.Checksum());
  if (r.v6) {
    (void)stack_.SendDestUnreachable(r.src6, r.dst6, kIcmpv6, hdr,
                                     stack::IcmpErrorKind::kAdminProhibited,
                                     now);
  } else {
    (void)stack_.SendDestUnreachable(r.src4, r.dst4, kIcmp, hdr,
                                     stack::IcmpErrorKind::kAdminProhibited,
                                     now);
  }
}

size_t PingForwarder::CloseIf(
    const std::function<bool(const SocketAddress& guest,
                             const SocketAddress& peer)>& doomed) {
  std::vector<Flow*> gone;
  for (Flow* f : lru_) {
    if (doomed(SocketAddress{f->key.guest, 0}, SocketAddress{f->key.peer, 0})) {
      gone.push_back(f);
    }
  }
  for (Flow* f : gone) {
    ++counters_.closed_policy;
    Close(f);
  }
  return gone.size();
}

PingForwarder::Flow* PingForwarder::Open(const Key& key, Instant now) {
  if (flows_.size() >= options_.max_flows) {
    ++counters_.refused_limit;
    return nullptr;
  }
  if (now < forbidden_until_) {
    ++counters_.refused_forbidden;
    return nullptr;
  }
  const bool v4 = key.peer.is_v4();
  absl::StatusOr<int> fd = OpenHostDatagramSocket(
      key.peer.family(), v4 ? int{IPPROTO_ICMP} : int{IPPROTO_ICMPV6},
      options_.bind);
  if (!fd.ok()) {
    if (absl::IsPermissionDenied(fd.status())) {
      ++counters_.refused_forbidden;
      forbidden_until_ = now + absl::Minutes(1);
      if (!forbidden_logged_) {
        forbidden_logged_ = true;
        std::fprintf(stderr,
                     "netstack backend: the kernel refuses ping sockets "
                     "(net.ipv4.ping_group_range excludes our group); the "
                     "guest's pings go unanswered\n");
      }
    } else {
      ++counters_.refused_socket;
    }
    return nullptr;
  }
  sockaddr_storage ss;
  const socklen_t len = ToSockaddr(SocketAddress{key.peer, 0}, ss);
  if (connect(*fd, reinterpret_cast<const sockaddr*>(&ss), len) != 0) {
    close(*fd);
    ++counters_.refused_connect;
    return nullptr;
  }
  auto flow = std::make_unique<Flow>();
  Flow* f = flow.get();
  f->key = key;
  f->fd = *fd;
  f->last_active = now;
  f->opened = now;
  f->handler = std::make_unique<FlowHandler>(*this, *f);
  if (!loop_.Add(f->fd, eventloop::EventLoop::kReadable, f->handler.get())
           .ok()) {
    close(f->fd);
    ++counters_.refused_socket;
    return nullptr;
  }
  f->lru = lru_.insert(lru_.end(), f);
  flows_.emplace(key, std::move(flow));
  ++counters_.opened;
  return f;
}

void PingForwarder::Close(Flow* flow) {
  (void)loop_.Remove(flow->fd);
  close(flow->fd);
  if (options_.closed) {
    options_.closed(SocketAddress{flow->key.guest, 0},
                    SocketAddress{flow->key.peer, 0}, flow->bytes_out,
                    flow->bytes_in, flow->opened);
  }
  lru_.erase(flow->lru);
  flows_.erase(Key(flow->key));
}

void PingForwarder::ReadHost(Flow& flow, Instant now) {
  const bool v4 = flow.key.peer.is_v4();
  for (int i = 0; i < kReadBatch; ++i) {
    buffer::ChunkRef chunk = chunks_.Allocate();
    uint8_t scratch[kEchoHeaderLen];
    std::span<uint8_t> room =
        chunk ? chunk->unshared_tail(0) : std::span<uint8_t>(scratch);
    const ssize_t n = recv(flow.fd, room.data(), room.size(), MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) return;
      // A host ICMP error (unreachable...): the guest hears nothing, as
      // it would not from a silent peer; recv has cleared it.
      ++counters_.host_errors;
      continue;
    }
    if (!chunk) {
      ++counters_.reply_no_buffer;
      continue;
    }
    uint8_t* m = room.data();
    const size_t len = static_cast<size_t>(n);
    if (len < kEchoHeaderLen || m[0] != (v4 ? kEchoReply4 : kEchoReply6) ||
        m[1] != 0 ||
        len > (v4 ? 65535u - 20 : 65535u)) {
      ++counters_.reply_malformed;
      continue;
    }
    flow.last_active = std::max(flow.last_active, now);
    lru_.splice(lru_.end(), lru_, flow.lru);
    wire::StoreBe16(m + 4, flow.key.id);
    wire::StoreBe16(m + 2, 0);
    const std::span<const uint8_t> msg(m, len);
    if (v4) {
      wire::StoreBe16(m + 2, wire::InternetChecksum(msg));
    } else {
      wire::ChecksumAccumulator sum;
      sum.AddFolded(wire::Ipv6PseudoHeaderSum(
          flow.key.peer.v6(), flow.key.guest.v6(), kIcmpv6,
          static_cast<uint32_t>(len)));
      sum.Add(msg);
      wire::StoreBe16(m + 2, sum.Checksum());
    }
    buffer::PacketPtr packet = packets_.Allocate();
    if (packet == nullptr ||
        !packet->AppendPayload(buffer::PayloadView(
            std::move(chunk), 0, static_cast<uint32_t>(len)))) {
      ++counters_.reply_no_buffer;
      continue;
    }
    bool sent;
    if (v4) {
      wire::Ipv4Repr ip;
      ip.src = flow.key.peer.v4();
      ip.dst = flow.key.guest.v4();
      ip.protocol = kIcmp;
      sent = stack_.SendIpv4(ip, std::move(packet), now);
    } else {
      wire::Ipv6Repr ip;
      ip.src = flow.key.peer.v6();
      ip.dst = flow.key.guest.v6();
      ip.next_header = kIcmpv6;
      sent = stack_.SendIpv6(ip, std::move(packet), now);
    }
    if (sent) {
      ++counters_.replies;
      flow.bytes_in += len - kEchoHeaderLen;
    } else {
      ++counters_.reply_send_failed;
    }
  }
}

Instant PingForwarder::NextDeadline() const {
  if (lru_.empty()) return kNever;
  return lru_.front()->last_active + options_.idle_timeout;
}

void PingForwarder::Poll(Instant now) {
  while (!lru_.empty() &&
         lru_.front()->last_active + options_.idle_timeout <= now) {
    ++counters_.closed_idle;
    Close(lru_.front());
  }
}

}  // namespace netstack::backend
