#include "netstack/backend/udp_flows.h"

#include <linux/errqueue.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "netstack/backend/udp_icmp.h"

namespace netstack::backend {

using transport::IpAddress;
using transport::SocketAddress;

std::string UdpFlowCounters::Format() const {
  std::string out;
#define NETSTACK_UDP_FLOW_LINE(f, name) \
  absl::StrAppend(&out, "backend.udp." name " ", f, "\n");
  NETSTACK_UDP_FLOW_COUNTERS(NETSTACK_UDP_FLOW_LINE)
#undef NETSTACK_UDP_FLOW_LINE
  return out;
}

class UdpFlowTable::FlowHandler final : public eventloop::Handler {
 public:
  FlowHandler(UdpFlowTable& table, Flow& flow) : table_(table), flow_(flow) {}
  void OnReadable(Instant now) override;
  void OnError(Instant now, uint32_t) override;

 private:
  UdpFlowTable& table_;
  Flow& flow_;
};

struct UdpFlowTable::Flow {
  Key key;
  int fd = -1;
  Instant last_active;
  std::list<Flow*>::iterator lru;
  std::unique_ptr<FlowHandler> handler;
  // The UDP length of the last datagram sent, for the quote of an ICMP
  // error about it (the error queue gives back a truncated copy only).
  uint16_t last_udp_len = 8;
};

void UdpFlowTable::FlowHandler::OnReadable(Instant now) {
  table_.ReadHost(flow_, now);
}

void UdpFlowTable::FlowHandler::OnError(Instant now, uint32_t) {
  // EPOLLERR: the error queue holds an ICMP error. ReadHost reads it.
  table_.ReadHost(flow_, now);
}

UdpFlowTable::UdpFlowTable(stack::Stack& stack, udp::UdpLayer& udp,
                           buffer::ChunkPool& chunks,
                           buffer::PacketPool& packets,
                           eventloop::EventLoop& loop, UdpFlowOptions options)
    : stack_(stack),
      udp_(udp),
      chunks_(chunks),
      packets_(packets),
      loop_(loop),
      options_(std::move(options)) {
  udp_.SetUnmatchedHandler(this);
  loop_.AddPoller(this);
}

UdpFlowTable::~UdpFlowTable() {
  udp_.SetUnmatchedHandler(nullptr);
  loop_.RemovePoller(this);
  while (!lru_.empty()) {
    ++counters_.closed_shutdown;
    Close(lru_.front());
  }
}

bool UdpFlowTable::IsSelf(const IpAddress& ip) const {
  return std::find(options_.self_addresses.begin(),
                   options_.self_addresses.end(),
                   ip) != options_.self_addresses.end();
}

int UdpFlowTable::HostFd(const SocketAddress& src,
                         const SocketAddress& dst) const {
  auto it = flows_.find(Key{src, dst});
  return it == flows_.end() ? -1 : it->second->fd;
}

bool UdpFlowTable::OnUnmatchedDatagram(const SocketAddress& src,
                                       const SocketAddress& dst,
                                       const buffer::PayloadView& payload,
                                       Instant now) {
  if (IsSelf(dst.ip)) {
    ++counters_.refused_self;
    return false;  // the stack's own port unreachable
  }
  if (dst.port == 0 || dst.ip.IsUnspecified() || src.port == 0) {
    ++counters_.refused_bad_address;
    return false;
  }
  const Key key{src, dst};
  Flow* flow = nullptr;
  if (auto it = flows_.find(key); it != flows_.end()) {
    flow = it->second.get();
  } else {
    flow = Open(key, now);
    if (flow == nullptr) return true;  // answered (ICMP) and counted
  }
  Touch(*flow, now);
  SendToHost(*flow, payload, now);
  return true;
}

UdpFlowTable::Flow* UdpFlowTable::Open(const Key& key, Instant now) {
  const uint16_t udp_len = 8;
  if (flows_.size() >= options_.max_flows) {
    ++counters_.refused_limit;
    (void)SendUdpUnreachable(stack_, packets_, Unreachable::kAdminProhibited,
                             key.local, key.remote, udp_len, now);
    return nullptr;
  }
  absl::StatusOr<int> fd =
      OpenHostDatagramSocket(key.remote.ip.family(), 0, options_.bind);
  if (!fd.ok()) {
    ++counters_.refused_socket;
    return nullptr;  // EMFILE and the like: the guest sees a lost datagram
  }
  const bool v4 = key.remote.ip.is_v4();
  const int on = 1;
  (void)setsockopt(*fd, v4 ? SOL_IP : SOL_IPV6, v4 ? IP_RECVERR : IPV6_RECVERR,
                   &on, sizeof(on));
  sockaddr_storage ss;
  const socklen_t len = ToSockaddr(key.remote, ss);
  if (connect(*fd, reinterpret_cast<const sockaddr*>(&ss), len) != 0) {
    const int err = errno;
    close(*fd);
    ++counters_.refused_connect;
    (void)SendUdpUnreachable(stack_, packets_,
                             err == EHOSTUNREACH ? Unreachable::kHost
                             : err == EACCES || err == EPERM
                                 ? Unreachable::kAdminProhibited
                                 : Unreachable::kNet,
                             key.local, key.remote, udp_len, now);
    return nullptr;
  }
  auto flow = std::make_unique<Flow>();
  Flow* f = flow.get();
  f->key = key;
  f->fd = *fd;
  f->last_active = now;
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

void UdpFlowTable::Close(Flow* flow) {
  (void)loop_.Remove(flow->fd);
  close(flow->fd);
  lru_.erase(flow->lru);
  // Last: the key lives in the flow.
  flows_.erase(Key(flow->key));
}

void UdpFlowTable::Touch(Flow& flow, Instant now) {
  flow.last_active = std::max(flow.last_active, now);
  lru_.splice(lru_.end(), lru_, flow.lru);
}

void UdpFlowTable::SendToHost(Flow& flow, const buffer::PayloadView& payload,
                              Instant now) {
  // One payload view here (the stack hands over one view per datagram,
  // reassembled or not); the iovec points into the received chunk.
  iovec iov;
  iov.iov_base = const_cast<uint8_t*>(payload.bytes().data());
  iov.iov_len = payload.size();
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  flow.last_udp_len = static_cast<uint16_t>(
      std::min<size_t>(payload.size() + 8, 65535));
  for (int attempt = 0; attempt < 2; ++attempt) {
    const ssize_t n = sendmsg(flow.fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n >= 0) {
      ++counters_.datagrams_to_host;
      counters_.bytes_to_host += payload.size();
      return;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == ENOBUFS) {
      ++counters_.to_host_dropped_full;
    } else if (errno == EMSGSIZE) {
      ++counters_.to_host_dropped_too_big;
    } else if (errno == ECONNREFUSED || errno == EHOSTUNREACH ||
               errno == ENETUNREACH) {
      // A pending error from an earlier ICMP error: the error queue says
      // what it was. This datagram went nowhere, like the kernel's.
      ++counters_.to_host_dropped_error;
      (void)ReadErrors(flow, now);
    } else {
      ++counters_.to_host_dropped_error;
    }
    return;
  }
}

void UdpFlowTable::ReadHost(Flow& flow, Instant now) {
  for (int i = 0; i < kReadBatch; ++i) {
    buffer::ChunkRef chunk = chunks_.Allocate();
    uint8_t scratch[1];
    const bool have_chunk = static_cast<bool>(chunk);
    std::span<uint8_t> room =
        have_chunk ? chunk->unshared_tail(0) : std::span<uint8_t>(scratch);
    const ssize_t n = recv(flow.fd, room.data(), room.size(), MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) {
        // EPOLLERR without data: the error queue.
        (void)ReadErrors(flow, now);
        return;
      }
      // ECONNREFUSED and friends: the ICMP error is on the error queue.
      if (!ReadErrors(flow, now)) return;
      continue;
    }
    if (!have_chunk) {
      ++counters_.to_guest_dropped_no_buffer;
      continue;
    }
    const size_t max = flow.key.local.ip.is_v4() ? udp::UdpLayer::kMaxIpv4Payload
                                                 : udp::UdpLayer::kMaxIpv6Payload;
    if (static_cast<size_t>(n) > max) {
      ++counters_.to_guest_dropped_too_big;
      continue;
    }
    Touch(flow, now);
    const buffer::PayloadView view(std::move(chunk), 0,
                                   static_cast<uint32_t>(n));
    if (!udp_.SendFrom(flow.key.remote, flow.key.local,
                       std::span<const buffer::PayloadView>(&view, 1), now)
             .ok()) {
      ++counters_.to_guest_dropped_send;
      continue;
    }
    ++counters_.datagrams_to_guest;
    counters_.bytes_to_guest += static_cast<uint64_t>(n);
  }
}

bool UdpFlowTable::ReadErrors(Flow& flow, Instant now) {
  for (int i = 0; i < kReadBatch; ++i) {
    uint8_t data[1];
    iovec iov{data, sizeof(data)};
    alignas(cmsghdr) uint8_t control[256];
    sockaddr_storage from;
    msghdr msg{};
    msg.msg_name = &from;
    msg.msg_namelen = sizeof(from);
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    const ssize_t n = recvmsg(flow.fd, &msg, MSG_ERRQUEUE | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) return true;
      ++counters_.closed_socket_error;
      Close(&flow);
      return false;
    }
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr;
         c = CMSG_NXTHDR(&msg, c)) {
      const bool is_err = (c->cmsg_level == SOL_IP && c->cmsg_type == IP_RECVERR) ||
                          (c->cmsg_level == SOL_IPV6 &&
                           c->cmsg_type == IPV6_RECVERR);
      if (!is_err || c->cmsg_len < CMSG_LEN(sizeof(sock_extended_err))) {
        continue;
      }
      sock_extended_err ee;
      std::memcpy(&ee, CMSG_DATA(c), sizeof(ee));
      std::optional<Unreachable> what;
      if (ee.ee_origin == SO_EE_ORIGIN_ICMP && ee.ee_type == 3) {
        what = ee.ee_code == 3   ? Unreachable::kPort
               : ee.ee_code == 0 ? Unreachable::kNet
               : ee.ee_code == 1 ? Unreachable::kHost
               : (ee.ee_code == 9 || ee.ee_code == 10 || ee.ee_code == 13)
                   ? std::optional(Unreachable::kAdminProhibited)
                   : std::nullopt;
      } else if (ee.ee_origin == SO_EE_ORIGIN_ICMP6 && ee.ee_type == 1) {
        what = ee.ee_code == 4   ? Unreachable::kPort
               : ee.ee_code == 0 ? Unreachable::kNet
               : ee.ee_code == 3 ? Unreachable::kHost
               : ee.ee_code == 1 ? std::optional(Unreachable::kAdminProhibited)
                                 : std::nullopt;
      } else if (ee.ee_origin == SO_EE_ORIGIN_LOCAL &&
                 (ee.ee_errno == EHOSTUNREACH || ee.ee_errno == ENETUNREACH)) {
        what = ee.ee_errno == EHOSTUNREACH ? Unreachable::kHost
                                           : Unreachable::kNet;
      }
      if (!what) {
        ++counters_.host_icmp_other;
        continue;
      }
      if (*what == Unreachable::kPort) {
        ++counters_.host_icmp_port_unreachable;
      } else {
        ++counters_.host_icmp_unreachable;
      }
      (void)SendUdpUnreachable(stack_, packets_, *what, flow.key.local,
                               flow.key.remote, flow.last_udp_len, now);
    }
  }
  return true;
}

Instant UdpFlowTable::NextDeadline() const {
  if (lru_.empty()) return kNever;
  return lru_.front()->last_active + options_.idle_timeout;
}

void UdpFlowTable::Poll(Instant now) {
  while (!lru_.empty() &&
         lru_.front()->last_active + options_.idle_timeout <= now) {
    ++counters_.closed_idle;
    Close(lru_.front());
  }
}

}  // namespace netstack::backend
