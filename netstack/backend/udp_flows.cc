#include "netstack/backend/udp_flows.h"

#include <linux/errqueue.h>
#include <netinet/in.h>
#include <netinet/udp.h>
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

namespace {
// Datagrams in a backlog entry.
template <typename P>
uint64_t Datagrams(const P& p) {
  if (p.segment_size == 0) return 1;
  return (p.payload.size() + p.segment_size - 1) / p.segment_size;
}
}  // namespace

class UdpFlowTable::FlowHandler final : public eventloop::Handler {
 public:
  FlowHandler(UdpFlowTable& table, Flow& flow) : table_(table), flow_(flow) {}
  void OnReadable(Instant now) override;
  void OnWritable(Instant now) override;
  void OnError(Instant now, uint32_t) override;

 private:
  UdpFlowTable& table_;
  Flow& flow_;
};

struct UdpFlowTable::Flow {
  Key key;
  int fd = -1;
  Instant last_active;
  std::list<Flow*>* list = nullptr;  // the LRU list it is on
  std::list<Flow*>::iterator lru;
  std::unique_ptr<FlowHandler> handler;
  // The UDP length of the last datagram sent, for the quote of an ICMP
  // error about it (the error queue gives back a truncated copy only).
  uint16_t last_udp_len = 8;
  // Inbound (ReadInbound): `fd` is the forward's socket, not ours; the
  // guest's datagrams go to `client` from it.
  bool inbound = false;
  SocketAddress client;
  sockaddr_storage client_name;
  socklen_t client_name_len = 0;
  InboundUdpCounts* counts = nullptr;
  // Outbound: when it opened and its payload bytes each way, for
  // UdpFlowOptions::closed (the flow log).
  Instant opened;
  uint64_t bytes_out = 0;
  uint64_t bytes_in = 0;
  // The socket refused UDP_SEGMENT once: super-datagrams are split here.
  bool no_segment = false;
  // The guest's link takes USO (UdpLayer::SuperDatagramLimit), asked at
  // the flow's first read: without it ReadHost looks for no runs.
  bool uso_known = false;
  bool uso = false;
  // EPOLLOUT is armed: the socket's buffer was full (EAGAIN).
  bool blocked = false;
  // On the table's dirty_ list: its backlog leaves at the turn's end.
  bool dirty = false;
  // Datagrams waiting for room in the socket's buffer, in order:
  // backlog[head, tail) of kBacklog slots, made at the first EAGAIN.
  // The first one's bytes before backlog_offset have left already.
  std::unique_ptr<Pending[]> backlog;
  size_t head = 0;
  size_t tail = 0;
  uint32_t backlog_offset = 0;
};

// One sendmmsg's arrays. A message is a datagram, a whole super-datagram
// with its UDP_SEGMENT control message, or one piece of a split one.
struct UdpFlowTable::TxScratch {
  struct Piece {
    size_t entry;   // index in the entries being sent (the last one)
    uint32_t end;   // the entry's bytes sent once this message has left
    uint32_t datagrams;
    uint32_t bytes;
  };
  mmsghdr msgs[kSendBatch];
  iovec iov[kSendBatch];
  alignas(cmsghdr) uint8_t control[kSendBatch][CMSG_SPACE(sizeof(uint16_t))];
  Piece pieces[kSendBatch];
};

// One recvmmsg's arrays; the chunks are taken before and given back (or
// handed on) after each call.
struct UdpFlowTable::RxScratch {
  mmsghdr msgs[kRecvBatch];
  iovec iov[kRecvBatch];
  alignas(cmsghdr) uint8_t control[kRecvBatch][CMSG_SPACE(sizeof(int))];
  buffer::ChunkRef chunks[kRecvBatch];
  uint16_t segment[kRecvBatch];  // UDP_GRO's segment size, 0: one datagram
  sockaddr_storage names[kRecvBatch];  // ReadInbound: each sender's
  // SuperDatagramLimit for datagrams of limit_size bytes, this batch's.
  uint16_t limit_size = 0;
  size_t limit = 0;
};

void UdpFlowTable::FlowHandler::OnReadable(Instant now) {
  table_.ReadHost(flow_, now);
}

void UdpFlowTable::FlowHandler::OnWritable(Instant now) {
  (void)table_.FlushBacklog(flow_, now);
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
      options_(std::move(options)),
      tx_(std::make_unique<TxScratch>()),
      rx_(std::make_unique<RxScratch>()) {
  udp_.SetUnmatchedHandler(this);
  loop_.AddPoller(this);
  if (options_.coalesce) {
    turn_hook_ = loop_.AddTurnEndHook([this](Instant now) { FlushDirty(now); });
  }
}

UdpFlowTable::~UdpFlowTable() {
  udp_.SetUnmatchedHandler(nullptr);
  loop_.RemovePoller(this);
  if (options_.coalesce) loop_.RemoveTurnEndHook(turn_hook_);
  for (std::list<Flow*>* list :
       {&outbound_lru_, &inbound_replied_lru_, &inbound_unreplied_lru_}) {
    while (!list->empty()) {
      ++counters_.closed_shutdown;
      Close(list->front());
    }
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
  return Relay(src, dst, payload, 0, now);
}

bool UdpFlowTable::OnUnmatchedSuperDatagram(const SocketAddress& src,
                                            const SocketAddress& dst,
                                            const buffer::PayloadView& payload,
                                            uint16_t segment_size,
                                            Instant now) {
  return Relay(src, dst, payload, segment_size, now);
}

bool UdpFlowTable::Relay(const SocketAddress& src, const SocketAddress& dst,
                         const buffer::PayloadView& payload,
                         uint16_t segment_size, Instant now) {
  // An inbound flow's replies may go to the gateway (its source for
  // clients on the host's loopback): look the pair up first.
  if (auto it = flows_.find(Key{src, dst}); it != flows_.end()) {
    Flow& flow = *it->second;
    if (flow.inbound) MarkReplied(flow);
    Touch(flow, now);
    SendToHost(flow, payload, segment_size, now);
    return true;
  }
  if (IsSelf(dst.ip)) {
    ++counters_.refused_self;
    return false;  // the stack's own port unreachable
  }
  // EmbedsIpv4: the gateway drops these before UDP sees them; checked here
  // too, as a host socket would reach the host's IPv4 loopback with them.
  if (dst.port == 0 || dst.ip.IsUnspecified() || src.port == 0 ||
      EmbedsIpv4(dst.ip)) {
    ++counters_.refused_bad_address;
    return false;
  }
  const size_t first = segment_size != 0
                           ? std::min<size_t>(payload.size(), segment_size)
                           : payload.size();
  const uint16_t udp_len =
      static_cast<uint16_t>(std::min<size_t>(first + 8, 65535));
  Flow* flow = Open(Key{src, dst}, udp_len, now);
  if (flow == nullptr) return true;  // answered (ICMP) and counted
  Touch(*flow, now);
  SendToHost(*flow, payload, segment_size, now);
  return true;
}

UdpFlowTable::Flow* UdpFlowTable::Open(const Key& key, uint16_t udp_len,
                                       Instant now) {
  // The guest's own share: inbound flows never count against it.
  if (outbound_lru_.size() >= options_.max_flows) {
    ++counters_.refused_limit;
    (void)SendUdpUnreachable(stack_, packets_, Unreachable::kAdminProhibited,
                             key.local, key.remote, udp_len, now);
    return nullptr;
  }
  // Refused at once and visibly: a datagram dropped in silence would
  // leave the guest's client waiting for its own timeout.
  const Admission admitted =
      options_.admit ? options_.admit(key.local, key.remote, now)
                     : Admission(true);
  // Over the new-flow rate: dropped in silence, counted by the Backend.
  if (admitted.kind == Admission::Kind::kDrop) return nullptr;
  if (admitted.kind == Admission::Kind::kRefuse) {
    ++counters_.refused_policy;
    (void)SendUdpUnreachable(stack_, packets_, Unreachable::kAdminProhibited,
                             key.local, key.remote, udp_len, now);
    return nullptr;
  }
  // Admitted: from here every way out tells `closed`, so each opened
  // flow the policy logged is closed in the log too.
  auto never_opened = [&] {
    if (options_.closed) options_.closed(key.local, key.remote, 0, 0, now);
  };
  absl::StatusOr<int> fd =
      OpenHostDatagramSocket(key.remote.ip.family(), 0, options_.bind);
  if (!fd.ok()) {
    ++counters_.refused_socket;
    never_opened();
    return nullptr;  // EMFILE and the like: the guest sees a lost datagram
  }
  const bool v4 = key.remote.ip.is_v4();
  const int on = 1;
  (void)setsockopt(*fd, v4 ? SOL_IP : SOL_IPV6, v4 ? IP_RECVERR : IPV6_RECVERR,
                   &on, sizeof(on));
  // A peer's UDP_SEGMENT burst (or a GRO'd one) arrives whole, with its
  // segment size; without it the kernel cuts it up before our reads.
  (void)setsockopt(*fd, SOL_UDP, UDP_GRO, &on, sizeof(on));
  // A host peer's burst waits here until our next read: room for one as
  // large as a guest's own socket would take (kernel to kernel, nothing
  // in between). SO_RCVBUFFORCE passes net.core.rmem_max where we may
  // (CAP_NET_ADMIN); else SO_RCVBUF, which that caps.
  const int rcvbuf = kHostReceiveBuffer;
  if (setsockopt(*fd, SOL_SOCKET, SO_RCVBUFFORCE, &rcvbuf, sizeof(rcvbuf)) !=
      0) {
    (void)setsockopt(*fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
  }
  sockaddr_storage ss;
  const socklen_t len = ToSockaddr(key.remote, ss);
  if (connect(*fd, reinterpret_cast<const sockaddr*>(&ss), len) != 0) {
    const int err = errno;
    close(*fd);
    ++counters_.refused_connect;
    never_opened();
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
  f->opened = now;
  f->handler = std::make_unique<FlowHandler>(*this, *f);
  if (!loop_.Add(f->fd, eventloop::EventLoop::kReadable, f->handler.get())
           .ok()) {
    close(f->fd);
    ++counters_.refused_socket;
    never_opened();
    return nullptr;
  }
  Link(*f, outbound_lru_);
  flows_.emplace(key, std::move(flow));
  ++counters_.opened;
  return f;
}

void UdpFlowTable::Close(Flow* flow) {
  if (flow->dirty) {
    *std::find(dirty_.begin(), dirty_.end(), flow) = nullptr;
  }
  if (flow->inbound) {
    inbound_.erase(InboundKey{flow->fd, flow->client});
    --flow->counts->flows_open;
  } else {
    (void)loop_.Remove(flow->fd);
    close(flow->fd);
    if (options_.closed) {
      options_.closed(flow->key.local, flow->key.remote, flow->bytes_out,
                      flow->bytes_in, flow->opened);
    }
  }
  flow->list->erase(flow->lru);
  // Last: the key lives in the flow.
  flows_.erase(Key(flow->key));
}

void UdpFlowTable::Link(Flow& flow, std::list<Flow*>& list) {
  flow.list = &list;
  flow.lru = list.insert(list.end(), &flow);
}

void UdpFlowTable::Touch(Flow& flow, Instant now) {
  flow.last_active = std::max(flow.last_active, now);
  flow.list->splice(flow.list->end(), *flow.list, flow.lru);
}

void UdpFlowTable::MarkReplied(Flow& flow) {
  if (flow.list != &inbound_unreplied_lru_) return;
  // A splice keeps the iterator; Touch then puts it in its place.
  inbound_replied_lru_.splice(inbound_replied_lru_.end(),
                              inbound_unreplied_lru_, flow.lru);
  flow.list = &inbound_replied_lru_;
}

void UdpFlowTable::SendToHost(Flow& flow, const buffer::PayloadView& payload,
                              uint16_t segment_size, Instant now) {
  // The guest's egress byte rate (the Backend's, rate_limit.h): its own
  // flows only; a datagram over it is dropped whole.
  if (options_.egress_limit != nullptr && !flow.inbound &&
      !options_.egress_limit->TakeDatagram(payload.size(), now)) {
    return;
  }
  if (segment_size != 0 && payload.size() <= segment_size) segment_size = 0;
  // The quote of an ICMP error about it: the (first) datagram's length.
  flow.last_udp_len = static_cast<uint16_t>(std::min<size_t>(
      (segment_size != 0 ? segment_size : payload.size()) + 8, 65535));
  const Pending entry{payload, segment_size};
  if (options_.coalesce && !flow.inbound) {
    // Sent at the turn's end with the rest of the turn's datagrams.
    Queue(flow, entry, now);
    return;
  }
  if (flow.head != flow.tail) {
    // Behind the datagrams already waiting: order within a flow holds.
    Backlog(flow, std::span<const Pending>(&entry, 1), SendProgress{});
    return;
  }
  const SendProgress done =
      SendNow(flow, std::span<const Pending>(&entry, 1), 0, now);
  if (done.closed) return;
  Backlog(flow, std::span<const Pending>(&entry, 1), done);
}

int UdpFlowTable::SendBatch(Flow& flow, mmsghdr* msgs, unsigned n) {
  ++counters_.to_host_batches;
  if (options_.send_batch && !flow.inbound) {
    return options_.send_batch(flow.fd, msgs, n);
  }
  return sendmmsg(flow.fd, msgs, n, MSG_DONTWAIT | MSG_NOSIGNAL);
}

UdpFlowTable::SendProgress UdpFlowTable::SendNow(
    Flow& flow, std::span<const Pending> entries, uint32_t first_offset,
    Instant now) {
  TxScratch& tx = *tx_;
  SendProgress done{0, first_offset, false};
  while (done.entries < entries.size()) {
    // Build up to kSendBatch messages from where the last call stopped.
    unsigned m = 0;
    unsigned iovs = 0;
    size_t e = done.entries;
    uint32_t off = done.offset;
    while (m < kSendBatch && iovs < kSendBatch && e < entries.size()) {
      const Pending& p = entries[e];
      const uint32_t size = p.payload.size();
      const bool super = p.segment_size != 0 && size > p.segment_size;
      mmsghdr& msg = tx.msgs[m];
      msg = mmsghdr{};
      if (flow.inbound) {
        msg.msg_hdr.msg_name = &flow.client_name;
        msg.msg_hdr.msg_namelen = flow.client_name_len;
      }
      uint32_t end = size;
      uint32_t datagrams = 1;
      uint16_t segment = 0;
      if (super && !flow.no_segment && off == 0) {
        // The whole super-datagram: the host kernel cuts it (UDP GSO).
        segment = p.segment_size;
        datagrams = (size + p.segment_size - 1) / p.segment_size;
      } else if (super) {
        end = std::min<uint32_t>(off + p.segment_size, size);
      }
      msg.msg_hdr.msg_iov = &tx.iov[iovs];
      tx.iov[iovs++] = iovec{
          const_cast<uint8_t*>(p.payload.bytes().data()) + off, end - off};
      if (super) {
        // Sent whole above, or one piece of it.
      } else if (!flow.no_segment && size > 0 && off == 0) {
        // Datagrams of one size in a row (a turn's worth, coalesced):
        // one message, one iovec each, cut again by the host kernel. A
        // shorter one may close it, as UDP_SEGMENT allows.
        uint32_t total = size;
        while (e + 1 < entries.size() && iovs < kSendBatch &&
               datagrams < kMaxSegments) {
          const Pending& q = entries[e + 1];
          const uint32_t qsize = q.payload.size();
          if (q.segment_size != 0 || qsize == 0 || qsize > size ||
              total + qsize > kMaxSegmentedPayload) {
            break;
          }
          tx.iov[iovs++] =
              iovec{const_cast<uint8_t*>(q.payload.bytes().data()), qsize};
          total += qsize;
          ++datagrams;
          ++e;
          if (qsize < size) break;
        }
        if (datagrams > 1) segment = static_cast<uint16_t>(size);
        end = entries[e].payload.size();
      }
      msg.msg_hdr.msg_iovlen = static_cast<size_t>(
          &tx.iov[iovs] - msg.msg_hdr.msg_iov);
      if (segment != 0) {
        msg.msg_hdr.msg_control = tx.control[m];
        msg.msg_hdr.msg_controllen = CMSG_SPACE(sizeof(uint16_t));
        cmsghdr* c = CMSG_FIRSTHDR(&msg.msg_hdr);
        c->cmsg_level = SOL_UDP;
        c->cmsg_type = UDP_SEGMENT;
        c->cmsg_len = CMSG_LEN(sizeof(uint16_t));
        std::memcpy(CMSG_DATA(c), &segment, sizeof(uint16_t));
      }
      uint32_t bytes = 0;
      for (size_t k = 0; k < msg.msg_hdr.msg_iovlen; ++k) {
        bytes += static_cast<uint32_t>(msg.msg_hdr.msg_iov[k].iov_len);
      }
      tx.pieces[m] = TxScratch::Piece{e, end, datagrams, bytes};
      ++m;
      if (end == entries[e].payload.size()) {
        ++e;
        off = 0;
      } else {
        off = end;
      }
    }
    int sent = SendBatch(flow, tx.msgs, m);
    const int err = sent < 0 ? errno : 0;
    if (sent < 0) sent = 0;
    for (int i = 0; i < sent; ++i) {
      const TxScratch::Piece& piece = tx.pieces[i];
      const uint32_t bytes = piece.bytes;
      counters_.datagrams_to_host += piece.datagrams;
      counters_.bytes_to_host += bytes;
      flow.bytes_out += bytes;
      if (piece.datagrams > 1) {
        ++(entries[piece.entry].segment_size != 0
               ? counters_.to_host_segmented
               : counters_.to_host_coalesced);
      }
      if (flow.counts != nullptr) {
        flow.counts->datagrams_from_guest += piece.datagrams;
        flow.counts->bytes_from_guest += bytes;
      }
    }
    auto advance_past = [&](int i) {
      const TxScratch::Piece& piece = tx.pieces[i];
      if (piece.end == entries[piece.entry].payload.size()) {
        done.entries = piece.entry + 1;
        done.offset = 0;
      } else {
        done.entries = piece.entry;
        done.offset = piece.end;
      }
    };
    if (sent > 0) advance_past(sent - 1);
    if (static_cast<unsigned>(sent) == m) continue;
    if (sent > 0) continue;  // the next call says why it stopped there
    // The first message failed with `err`.
    if (err == EINTR) continue;
    if (err == EAGAIN || err == EWOULDBLOCK) {
      if (flow.inbound) {
        // The forward's socket: no backlog of ours on it; dropped.
        ++counters_.to_host_dropped_full;
        if (flow.counts != nullptr) ++flow.counts->dropped;
        advance_past(0);
        continue;
      }
      return done;
    }
    const TxScratch::Piece& piece = tx.pieces[0];
    if ((err == EINVAL || err == EIO) && piece.datagrams > 1) {
      // UDP_SEGMENT refused: a segment above the path's MTU (EINVAL), or
      // a route without checksum offload (EIO). Split here from now on.
      flow.no_segment = true;
      ++counters_.to_host_split;
      continue;
    }
    if (flow.counts != nullptr) ++flow.counts->dropped;
    advance_past(0);
    if (err == ENOBUFS) {
      ++counters_.to_host_dropped_full;
    } else if (err == EMSGSIZE) {
      ++counters_.to_host_dropped_too_big;
    } else if (err == ECONNREFUSED || err == EHOSTUNREACH ||
               err == ENETUNREACH) {
      // A pending error from an earlier ICMP error: the error queue says
      // what it was. This datagram went nowhere, like the kernel's.
      ++counters_.to_host_dropped_error;
      if (!ReadErrors(flow, now)) {
        done.closed = true;
        return done;
      }
    } else {
      ++counters_.to_host_dropped_error;
    }
  }
  return done;
}

void UdpFlowTable::Backlog(Flow& flow, std::span<const Pending> entries,
                           const SendProgress& done) {
  if (done.entries == entries.size()) return;
  if (!flow.backlog) flow.backlog = std::make_unique<Pending[]>(kBacklog);
  const bool was_empty = flow.head == flow.tail;
  if (was_empty) flow.backlog_offset = 0;
  for (size_t i = done.entries; i < entries.size(); ++i) {
    const Pending& p = entries[i];
    const uint32_t skip = i == done.entries ? done.offset : 0;
    const uint32_t datagrams =
        p.segment_size == 0
            ? 1
            : (p.payload.size() - skip + p.segment_size - 1) / p.segment_size;
    if (flow.tail == kBacklog && flow.head > 0) {
      // Slide the waiting ones to the front (moves of views, no copy).
      std::move(&flow.backlog[flow.head], &flow.backlog[flow.tail],
                &flow.backlog[0]);
      flow.tail -= flow.head;
      flow.head = 0;
    }
    if (flow.tail == kBacklog) {
      counters_.to_host_dropped_full += datagrams;
      continue;
    }
    counters_.to_host_waited += datagrams;
    // What has left already is cut off here: the backlog starts whole.
    flow.backlog[flow.tail++] = Pending{
        skip == 0 ? p.payload
                  : p.payload.Subview(skip, p.payload.size() - skip),
        p.segment_size};
  }
  if (flow.head != flow.tail && !flow.blocked) {
    flow.blocked = true;
    (void)loop_.Modify(flow.fd, eventloop::EventLoop::kReadable |
                                    eventloop::EventLoop::kWritable);
  }
}

void UdpFlowTable::Queue(Flow& flow, const Pending& entry, Instant now) {
  if (!flow.backlog) flow.backlog = std::make_unique<Pending[]>(kBacklog);
  for (int attempt = 0; flow.tail == kBacklog && attempt < 2; ++attempt) {
    if (flow.head > 0) {
      std::move(&flow.backlog[flow.head], &flow.backlog[flow.tail],
                &flow.backlog[0]);
      flow.tail -= flow.head;
      flow.head = 0;
      continue;
    }
    // A turn with more than kBacklog datagrams for one flow: send what is
    // there now, unless the socket is full (then the newest is dropped).
    if (flow.blocked || !FlushBacklog(flow, now)) break;
  }
  if (flow.tail == kBacklog) {
    counters_.to_host_dropped_full += Datagrams(entry);
    return;
  }
  if (flow.blocked) counters_.to_host_waited += Datagrams(entry);
  if (flow.head == flow.tail) flow.backlog_offset = 0;
  flow.backlog[flow.tail++] = entry;
  if (!flow.dirty && !flow.blocked) {
    flow.dirty = true;
    dirty_.push_back(&flow);
  }
}

void UdpFlowTable::FlushDirty(Instant now) {
  // A flow may close while its backlog leaves (an error queue that fails):
  // Close clears its slot here.
  for (size_t i = 0; i < dirty_.size(); ++i) {
    Flow* f = dirty_[i];
    if (f == nullptr) continue;
    f->dirty = false;
    (void)FlushBacklog(*f, now);
  }
  dirty_.clear();
}

bool UdpFlowTable::FlushBacklog(Flow& flow, Instant now) {
  if (flow.head == flow.tail) return true;
  const SendProgress done = SendNow(
      flow,
      std::span<const Pending>(&flow.backlog[flow.head], flow.tail - flow.head),
      flow.backlog_offset, now);
  if (done.closed) return false;
  for (size_t i = 0; i < done.entries; ++i) {
    flow.backlog[flow.head + i] = Pending{};  // the chunks go back
  }
  flow.head += done.entries;
  flow.backlog_offset = done.offset;
  if (flow.head == flow.tail) {
    flow.head = flow.tail = 0;
    flow.backlog_offset = 0;
    if (flow.blocked) {
      flow.blocked = false;
      (void)loop_.Modify(flow.fd, eventloop::EventLoop::kReadable);
    }
  } else if (!flow.blocked) {
    // Stopped at EAGAIN: the rest leaves on EPOLLOUT.
    for (size_t i = flow.head; i < flow.tail; ++i) {
      counters_.to_host_waited += Datagrams(flow.backlog[i]);
    }
    flow.blocked = true;
    (void)loop_.Modify(flow.fd, eventloop::EventLoop::kReadable |
                                    eventloop::EventLoop::kWritable);
  }
  return true;
}

void UdpFlowTable::ReadHost(Flow& flow, Instant now) {
  RxScratch& rx = *rx_;
  int budget = kReadBatch;
  while (budget > 0) {
    const unsigned want =
        std::min<unsigned>(kRecvBatch, static_cast<unsigned>(budget));
    unsigned m = 0;
    for (; m < want; ++m) {
      if (!rx.chunks[m]) rx.chunks[m] = chunks_.Allocate();
      if (!rx.chunks[m]) break;
      std::span<uint8_t> room = rx.chunks[m]->unshared_tail(0);
      rx.iov[m] = iovec{room.data(), room.size()};
      msghdr& h = rx.msgs[m].msg_hdr;
      h = msghdr{};
      h.msg_iov = &rx.iov[m];
      h.msg_iovlen = 1;
      h.msg_control = rx.control[m];
      h.msg_controllen = sizeof(rx.control[m]);
      rx.msgs[m].msg_len = 0;
    }
    int n;
    uint8_t scratch[1];
    if (m == 0) {
      // No chunk: the datagram is read away and counted, as before.
      n = static_cast<int>(recv(flow.fd, scratch, sizeof(scratch), MSG_DONTWAIT));
      if (n >= 0) {
        ++counters_.to_guest_dropped_no_buffer;
        --budget;
        continue;
      }
    } else {
      ++counters_.to_guest_batches;
      n = recvmmsg(flow.fd, rx.msgs, m, MSG_DONTWAIT, nullptr);
    }
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) {
        // EPOLLERR without data: the error queue.
        (void)ReadErrors(flow, now);
        break;
      }
      // ECONNREFUSED and friends: the ICMP error is on the error queue.
      if (!ReadErrors(flow, now)) {
        for (buffer::ChunkRef& c : rx.chunks) c.Reset();
        return;
      }
      --budget;
      continue;
    }
    if (!flow.uso_known) {
      flow.uso_known = true;
      flow.uso = udp_.SuperDatagramLimit(flow.key.local.ip, 1) > 0;
    }
    for (int i = 0; i < n; ++i) {
      rx.segment[i] = 0;
      msghdr& h = rx.msgs[i].msg_hdr;
      for (cmsghdr* c = CMSG_FIRSTHDR(&h); c != nullptr;
           c = CMSG_NXTHDR(&h, c)) {
        if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_GRO &&
            c->cmsg_len >= CMSG_LEN(sizeof(int))) {
          int size = 0;
          std::memcpy(&size, CMSG_DATA(c), sizeof(size));
          if (size > 0 && size <= 0xffff) {
            rx.segment[i] = static_cast<uint16_t>(size);
          }
        }
      }
      // Without USO there are no runs to look for: each goes now.
      if (!flow.uso) {
        (void)SendToGuest(flow, std::move(rx.chunks[i]), rx.msgs[i].msg_len,
                          rx.segment[i], now);
      }
    }
    rx.limit_size = 0;
    for (int i = 0; flow.uso && i < n;) {
      const int run = SendRunToGuest(flow, i, n, now);
      if (run > 0) {
        i += run;
        continue;
      }
      (void)SendToGuest(flow, std::move(rx.chunks[i]), rx.msgs[i].msg_len,
                        rx.segment[i], now);
      ++i;
    }
    budget -= n;
    if (static_cast<unsigned>(n) < m) break;  // drained
  }
  // Unused chunks go back: nothing is held between readiness calls.
  for (buffer::ChunkRef& c : rx.chunks) c.Reset();
}

int UdpFlowTable::SendRunToGuest(Flow& flow, int first, int n, Instant now) {
  RxScratch& rx = *rx_;
  const size_t size = rx.msgs[first].msg_len;
  if (rx.segment[first] != 0 || size == 0 || size > 0xffff || first + 1 >= n ||
      rx.segment[first + 1] != 0 || rx.msgs[first + 1].msg_len == 0 ||
      rx.msgs[first + 1].msg_len > size) {
    return 0;
  }
  const uint16_t segment = static_cast<uint16_t>(size);
  if (rx.limit_size != segment) {
    rx.limit_size = segment;
    rx.limit = udp_.SuperDatagramLimit(flow.key.local.ip, segment);
  }
  const size_t limit = rx.limit;
  // Datagrams of `size` bytes, the last one shorter or equal (where the
  // guest's kernel cuts), each its own view: at most a packet's views.
  constexpr int kMaxRun = static_cast<int>(
      std::min<size_t>(buffer::PacketBuffer::kMaxPayloadViews, kRecvBatch));
  size_t total = size;
  int run = 1;
  while (first + run < n && run < kMaxRun) {
    const size_t next = rx.msgs[first + run].msg_len;
    if (rx.segment[first + run] != 0 || next == 0 || next > size ||
        total + next > limit) {
      break;
    }
    total += next;
    ++run;
    if (next < size) break;
  }
  if (run < 2) return 0;
  buffer::PayloadView views[kMaxRun];
  for (int i = 0; i < run; ++i) {
    views[i] = buffer::PayloadView(std::move(rx.chunks[first + i]), 0,
                                   rx.msgs[first + i].msg_len);
  }
  Touch(flow, now);
  if (!udp_.SendSuperFrom(flow.key.remote, flow.key.local,
                          std::span<const buffer::PayloadView>(views, run),
                          segment, now)
           .ok()) {
    counters_.to_guest_dropped_send += run;
    return run;
  }
  ++counters_.to_guest_uso;
  counters_.datagrams_to_guest += run;
  counters_.bytes_to_guest += total;
  flow.bytes_in += total;
  return run;
}

bool UdpFlowTable::SendToGuest(Flow& flow, buffer::ChunkRef chunk, size_t n,
                               uint16_t segment_size, Instant now) {
  const size_t max = flow.key.local.ip.is_v4()
                         ? udp::UdpLayer::kMaxIpv4Payload
                         : udp::UdpLayer::kMaxIpv6Payload;
  const size_t step = segment_size != 0 && n > segment_size ? segment_size : n;
  if (step != n) ++counters_.to_guest_gro;
  if (step > max) {
    ++counters_.to_guest_dropped_too_big;
    return false;
  }
  Touch(flow, now);
  // USO: where the guest's link takes UDP super-datagrams, a GRO read
  // leaves whole (or in as few super-frames as its limits allow), as the
  // peer's kernel would have handed it to a guest NIC with USO; else (0)
  // each of its datagrams leaves on its own.
  const size_t limit =
      step != n ? udp_.SuperDatagramLimit(flow.key.local.ip,
                                          static_cast<uint16_t>(step))
                : 0;
  // Whole datagrams per super-frame; under 2 there is nothing to gain. An
  // empty datagram (step 0, which a host peer may send) leaves as itself.
  const size_t super_max = step != 0 ? limit / step * step : 0;
  bool all = true;
  size_t off = 0;
  do {
    // Each datagram of a GRO read, or each super-frame, is a view of the
    // one chunk.
    const size_t rest = n - off;
    const size_t len = super_max >= 2 * step
                           ? (rest <= limit ? rest : super_max)
                           : std::min(step, rest);
    const buffer::PayloadView view(chunk, static_cast<uint32_t>(off),
                                   static_cast<uint32_t>(len));
    const std::span<const buffer::PayloadView> views(&view, 1);
    const uint64_t datagrams = step != 0 ? (len + step - 1) / step : 1;
    const bool super = datagrams > 1;
    if (!(super ? udp_.SendSuperFrom(flow.key.remote, flow.key.local, views,
                                     static_cast<uint16_t>(step), now)
                : udp_.SendFrom(flow.key.remote, flow.key.local, views, now))
             .ok()) {
      counters_.to_guest_dropped_send += datagrams;
      all = false;
    } else {
      counters_.to_guest_uso += super;
      counters_.datagrams_to_guest += datagrams;
      counters_.bytes_to_guest += len;
      flow.bytes_in += len;
    }
    off += len;
  } while (off < n);
  return all;
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
  Instant next = kNever;
  for (const auto& [list, timeout] :
       {std::pair{&outbound_lru_, options_.idle_timeout},
        std::pair{&inbound_replied_lru_, options_.idle_timeout},
        std::pair{&inbound_unreplied_lru_, UnrepliedTimeout()}}) {
    if (!list->empty()) {
      next = std::min(next, list->front()->last_active + timeout);
    }
  }
  return next;
}

void UdpFlowTable::ExpireList(std::list<Flow*>& list, Duration timeout,
                              Instant now) {
  while (!list.empty() && list.front()->last_active + timeout <= now) {
    Flow* f = list.front();
    ++counters_.closed_idle;
    if (&list == &inbound_unreplied_lru_) ++counters_.inbound_unreplied_expired;
    if (f->counts != nullptr) ++f->counts->flows_expired;
    if (f->counts != nullptr && &list == &inbound_unreplied_lru_) {
      ++f->counts->flows_expired_unreplied;
    }
    Close(f);
  }
}

void UdpFlowTable::Poll(Instant now) {
  ExpireList(outbound_lru_, options_.idle_timeout, now);
  ExpireList(inbound_replied_lru_, options_.idle_timeout, now);
  ExpireList(inbound_unreplied_lru_, UnrepliedTimeout(), now);
}

bool UdpFlowTable::EvictInbound() {
  // Linux's conntrack early_drop likewise gives up an unreplied entry
  // first. An answered flow goes only when every flow is answered (a
  // guest that echoes a spoofed flood): a new client still gets in, and
  // the flow the guest loses was the least recently active.
  const bool unreplied = !inbound_unreplied_lru_.empty();
  std::list<Flow*>& from =
      unreplied ? inbound_unreplied_lru_ : inbound_replied_lru_;
  if (from.empty()) return false;
  Flow* victim = from.front();
  ++(unreplied ? counters_.inbound_evicted_unreplied
               : counters_.inbound_evicted_replied);
  ++victim->counts->flows_evicted;
  if (unreplied) ++victim->counts->flows_evicted_unreplied;
  Close(victim);
  return true;
}

UdpFlowTable::Flow* UdpFlowTable::OpenInbound(
    int host_fd, const SocketAddress& client, const SocketAddress& guest,
    const IpAddress& gateway, InboundUdpCounts& counts, Instant now) {
  // Their own share, never the guest's outbound one; full, it makes room.
  if (inbound_.size() >= options_.max_inbound_flows && !EvictInbound()) {
    ++counters_.refused_limit;
    ++counts.refused_limit;
    return nullptr;
  }
  // The guest sees an IPv4 client off the host's loopback as itself (as
  // -t through the stack does), anyone else as the gateway.
  const bool own = client.ip.is_v4() && guest.ip.is_v4() &&
                   client.ip.v4().bytes[0] != 127 &&
                   !client.ip.IsUnspecified();
  SocketAddress source{own ? client.ip : gateway, client.port};
  // The client's port unless another client has it on that source: then
  // the next free one of 49152-65535.
  for (int attempt = 0; flows_.contains(Key{guest, source}); ++attempt) {
    if (attempt == 64) {
      ++counters_.inbound_refused_port;
      ++counts.dropped;
      return nullptr;
    }
    source.port = next_inbound_port_;
    next_inbound_port_ =
        next_inbound_port_ == 65535 ? 49152 : next_inbound_port_ + 1;
  }
  const Key key{guest, source};
  auto flow = std::make_unique<Flow>();
  Flow* f = flow.get();
  f->key = key;
  f->fd = host_fd;
  f->last_active = now;
  f->inbound = true;
  f->client = client;
  f->client_name_len = ToSockaddr(client, f->client_name);
  f->counts = &counts;
  Link(*f, inbound_unreplied_lru_);
  flows_.emplace(key, std::move(flow));
  inbound_.emplace(InboundKey{host_fd, client}, f);
  ++counters_.opened;
  ++counters_.inbound_opened;
  ++counts.flows_opened;
  ++counts.flows_open;
  return f;
}

void UdpFlowTable::ReadInbound(int host_fd, const SocketAddress& guest,
                               const IpAddress& gateway,
                               InboundUdpCounts& counts, Instant now) {
  // As ReadHost: recvmmsg into pooled chunks, with each sender's address.
  RxScratch& rx = *rx_;
  int budget = kReadBatch;
  while (budget > 0) {
    const unsigned want =
        std::min<unsigned>(kRecvBatch, static_cast<unsigned>(budget));
    unsigned m = 0;
    for (; m < want; ++m) {
      if (!rx.chunks[m]) rx.chunks[m] = chunks_.Allocate();
      if (!rx.chunks[m]) break;
      std::span<uint8_t> room = rx.chunks[m]->unshared_tail(0);
      rx.iov[m] = iovec{room.data(), room.size()};
      msghdr& h = rx.msgs[m].msg_hdr;
      h = msghdr{};
      h.msg_name = &rx.names[m];
      h.msg_namelen = sizeof(rx.names[m]);
      h.msg_iov = &rx.iov[m];
      h.msg_iovlen = 1;
      rx.msgs[m].msg_len = 0;
    }
    int n;
    if (m == 0) {
      // No chunk: the datagram is read away and counted.
      uint8_t scratch[1];
      n = static_cast<int>(recv(host_fd, scratch, sizeof(scratch), MSG_DONTWAIT));
      if (n < 0) {
        if (errno == EINTR) continue;
        break;
      }
      ++counters_.to_guest_dropped_no_buffer;
      ++counts.dropped;
      --budget;
      continue;
    }
    ++counters_.to_guest_batches;
    n = recvmmsg(host_fd, rx.msgs, m, MSG_DONTWAIT, nullptr);
    if (n < 0) {
      if (errno == EINTR) continue;
      break;  // EAGAIN; nothing else is pending on an unconnected socket
    }
    for (int i = 0; i < n; ++i) {
      const std::optional<SocketAddress> client =
          FromSockaddr(rx.names[i], rx.msgs[i].msg_hdr.msg_namelen);
      if (!client) continue;
      Flow* flow = nullptr;
      if (auto it = inbound_.find(InboundKey{host_fd, *client});
          it != inbound_.end()) {
        flow = it->second;
      } else {
        flow = OpenInbound(host_fd, *client, guest, gateway, counts, now);
        if (flow == nullptr) continue;  // counted
      }
      const size_t len = rx.msgs[i].msg_len;
      if (!SendToGuest(*flow, std::move(rx.chunks[i]), len, 0, now)) {
        ++counts.dropped;
        continue;
      }
      ++counts.datagrams_to_guest;
      counts.bytes_to_guest += len;
    }
    budget -= n;
    if (static_cast<unsigned>(n) < m) break;  // drained
  }
  // Unused chunks go back: nothing is held between readiness calls.
  for (buffer::ChunkRef& c : rx.chunks) c.Reset();
}

size_t UdpFlowTable::CloseOutbound(
    const std::function<bool(const SocketAddress& guest,
                             const SocketAddress& peer)>& doomed) {
  std::vector<Flow*> gone;
  for (Flow* f : outbound_lru_) {
    if (doomed(f->key.local, f->key.remote)) gone.push_back(f);
  }
  for (Flow* f : gone) {
    ++counters_.closed_policy;
    Close(f);
  }
  return gone.size();
}

void UdpFlowTable::CloseInbound(int host_fd) {
  std::vector<Flow*> gone;
  for (const auto& [key, flow] : inbound_) {
    if (key.first == host_fd) gone.push_back(flow);
  }
  for (Flow* f : gone) {
    ++counters_.closed_shutdown;
    Close(f);
  }
}

}  // namespace netstack::backend
