// TcpLayer: demultiplexing, listeners and SYN cookies, emitting segments,
// and connection lifetimes.
#include "netstack/tcp/tcp_layer.h"

#include <algorithm>

#include "absl/strings/str_format.h"
#include "netstack/tcp/connection.h"
#include "netstack/wire/bytes.h"
#include "netstack/wire/checksum.h"
#include "netstack/wire/ip_protocol.h"

namespace netstack::tcp {

namespace flag = wire::tcp_flag;
using stack::DropReason;

namespace {

constexpr uint8_t kTcp = static_cast<uint8_t>(wire::IpProtocol::kTcp);

SipKey KeyFrom(uint64_t seed, uint64_t salt) {
  SipKey k{};
  uint64_t x = seed ^ (salt * 0x9e3779b97f4a7c15ull);
  for (size_t i = 0; i < k.size(); ++i) {
    // splitmix64 steps
    x += 0x9e3779b97f4a7c15ull;
    uint64_t z = x;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    k[i] = static_cast<uint8_t>(z ^ (z >> 31));
  }
  return k;
}

// Parses and validates a TCP header at the boundary. On success fills
// `seg.tcp` and `seg.payload`.
std::optional<DropReason> ParseSegment(const buffer::PayloadView& l4,
                                       uint16_t pseudo_sum, bool verified,
                                       bool partial, Segment& seg) {
  const wire::TcpHeader h(l4.bytes());
  switch (wire::TcpRepr::Parse(h, seg.tcp)) {
    case wire::WireError::kOk:
      break;
    case wire::WireError::kBadHeaderLength:
    case wire::WireError::kTruncated:
      return DropReason::kTcpBadDataOffset;
    case wire::WireError::kBadOptionLength:
    case wire::WireError::kOptionOverflow:
      return DropReason::kTcpBadOptions;
    default:
      return DropReason::kTcpMalformed;
  }
  if (!verified && !partial) {
    wire::ChecksumAccumulator payload;
    payload.Add(l4.bytes().subspan(h.HeaderLen()));
    if (!h.ChecksumValid(pseudo_sum, payload)) {
      return DropReason::kTcpBadChecksum;
    }
  }
  const uint8_t f = seg.tcp.flags;
  if ((f & flag::kSyn) && (f & (flag::kFin | flag::kRst))) {
    return DropReason::kTcpBadFlags;  // SYN+FIN, SYN+RST
  }
  if ((f & (flag::kSyn | flag::kAck | flag::kRst)) == 0) {
    return DropReason::kTcpBadFlags;  // null, FIN-only, PSH-only...
  }
  if (seg.tcp.src_port == 0 || seg.tcp.dst_port == 0) {
    return DropReason::kTcpBadAddress;
  }
  seg.payload = l4.Subview(static_cast<uint32_t>(h.HeaderLen()),
                           l4.size() - static_cast<uint32_t>(h.HeaderLen()));
  return std::nullopt;
}

}  // namespace

TcpLayer::TcpLayer(stack::Stack& stack, buffer::ChunkPool& chunks,
                   buffer::PacketPool& packets, transport::Notifier& notifier,
                   const TcpLayerOptions& options)
    : stack_(stack),
      chunks_(chunks),
      packets_(packets),
      notifier_(notifier),
      options_(options),
      timers_(absl::UnixEpoch()),
      isn_(KeyFrom(options.seed, 1)),
      cookies_(KeyFrom(options.seed, 2)),
      time_wait_(options.max_time_wait) {
  next_ephemeral_ = static_cast<uint32_t>(options.seed);
  stack_.SetTransport(kTcp, this);
}

TcpLayer::~TcpLayer() {
  stack_.SetTransport(kTcp, nullptr);
  for (auto& [addr, l] : listeners_) delete l;
  listeners_.clear();
  // Closed connections already unregistered (a recycled TIME_WAIT, or
  // one whose socket let go since the last Poll) are only in closed_.
  std::sort(closed_.begin(), closed_.end());
  closed_.erase(std::unique(closed_.begin(), closed_.end()), closed_.end());
  for (Connection* c : closed_) {
    auto it = connections_.find(c->tuple());
    if ((it == connections_.end() || it->second != c) && !c->attached()) {
      delete c;
    }
  }
  closed_.clear();
  for (auto& [t, c] : connections_) {
    c->attached_ = false;
    delete c;
  }
  connections_.clear();
}

std::unique_ptr<TcpSocket> TcpLayer::Open(transport::Family family) {
  return std::unique_ptr<TcpSocket>(
      new TcpSocket(*this, family, options_.connection));
}

Instant TcpLayer::NextDeadline() const {
  if (!pending_output_.empty()) return now_;
  return std::min(timers_.NextDeadline(), time_wait_.NextDeadline());
}

void TcpLayer::Poll(Instant now) {
  now_ = std::max(now_, now);
  if (options_.busy_syn_rate != 0) limit_hits_at_poll_ = stack_.RxBatchLimitHits();
  timers_.Advance(now_);
  time_wait_.Expire(now_);
  // Output may mark more connections (none today); loop until quiet.
  for (int round = 0; round < 4 && !pending_output_.empty(); ++round) {
    // Two vectors swapped back and forth keep their capacity: no heap.
    output_batch_.swap(pending_output_);
    // Connections with at most a packet to send go first, then the rest
    // in the order they were marked. The link sends this Poll's packets
    // in the order they are made, so an interactive flow's reply (one
    // small segment, an ACK) would otherwise wait behind every
    // super-segment a bulk flow marked earlier in the turn emits: about
    // 1 MiB of TAP writes, each running the guest kernel's receive
    // (issue #34, rr-under-load).
    for (Connection*& c : output_batch_) {
      if (!c->OutputIsSmall()) continue;
      c->output_marked_ = false;
      c->Output(now_);
      c = nullptr;
    }
    for (Connection* c : output_batch_) {
      if (c == nullptr) continue;
      c->output_marked_ = false;
      c->Output(now_);
    }
    output_batch_.clear();
  }
  ReapClosed();
  stack_.Flush(now_);
}

void TcpLayer::MarkOutput(Connection* c) {
  if (c->output_marked_) return;
  c->output_marked_ = true;
  pending_output_.push_back(c);
}

void TcpLayer::Register(Connection* c) { connections_[c->tuple()] = c; }

void TcpLayer::Unregister(Connection* c) {
  auto it = connections_.find(c->tuple());
  if (it != connections_.end() && it->second == c) connections_.erase(it);
}

void TcpLayer::ReapClosed() {
  if (closed_.empty()) return;
  std::sort(closed_.begin(), closed_.end());
  closed_.erase(std::unique(closed_.begin(), closed_.end()), closed_.end());
  // Compacts closed_ in place (no vector per call): kept are the closed
  // connections that still have output marked; attached ones are reaped
  // when their socket lets go (Detach puts them back).
  size_t kept = 0;
  for (Connection* c : closed_) {
    if (c->state() != TcpState::kClosed) continue;  // reopened? not here
    if (!c->Reapable() || c->output_marked_) {
      if (!c->attached()) closed_[kept++] = c;
      continue;
    }
    Unregister(c);
    delete c;
  }
  closed_.resize(kept);
}

Connection* TcpLayer::NewConnection(const transport::FourTuple& t,
                                    const ConnectionOptions& o) {
  auto* c = new Connection(*this, t, o);
  Register(c);
  return c;
}

bool TcpLayer::IsLocalAddress(const transport::IpAddress& a) const {
  return a.is_v4() ? stack_.HasAddress(a.v4()) : stack_.HasAddress(a.v6());
}

std::optional<transport::IpAddress> TcpLayer::SourceFor(
    const transport::IpAddress& dst, uint32_t* mtu, uint32_t* gso) const {
  if (dst.is_v4()) {
    auto p = stack_.Path(dst.v4());
    if (!p) return std::nullopt;
    *mtu = p->mtu;
    *gso = p->gso_max_size;
    return transport::IpAddress(p->src);
  }
  auto p = stack_.Path(dst.v6());
  if (!p) return std::nullopt;
  *mtu = p->mtu;
  *gso = p->gso_max_size;
  return transport::IpAddress(p->src);
}

// --- receive ---

std::optional<DropReason> TcpLayer::DeliverSegment(
    const buffer::PayloadView& l4, uint16_t pseudo_sum, bool verified,
    bool partial, const transport::IpAddress& src,
    const transport::IpAddress& dst, Instant now) {
  Segment seg;
  if (auto r = ParseSegment(l4, pseudo_sum, verified, partial, seg)) return r;
  seg.tuple.local = {dst, seg.tcp.dst_port};
  seg.tuple.remote = {src, seg.tcp.src_port};
  return Receive(seg, now);
}

std::optional<DropReason> TcpLayer::Deliver(const stack::Ipv4Datagram& d,
                                            Instant now) {
  now_ = std::max(now_, now);
  ++counters_.segments_in;
  if (d.link_multicast || d.ip.dst.IsBroadcast() || d.ip.dst.IsMulticast() ||
      d.ip.src.IsMulticast() || d.ip.src.IsBroadcast()) {
    return DropReason::kTcpBadAddress;
  }
  return DeliverSegment(
      d.payload,
      wire::Ipv4PseudoHeaderSum(d.ip.src, d.ip.dst, kTcp,
                                static_cast<uint16_t>(d.payload.size())),
      d.checksum_verified, d.checksum_partial, transport::IpAddress(d.ip.src),
      transport::IpAddress(d.ip.dst), now_);
}

std::optional<DropReason> TcpLayer::Deliver(const stack::Ipv6Datagram& d,
                                            Instant now) {
  now_ = std::max(now_, now);
  ++counters_.segments_in;
  if (d.link_multicast || d.ip.dst.IsMulticast() || d.ip.src.IsMulticast()) {
    return DropReason::kTcpBadAddress;
  }
  return DeliverSegment(
      d.payload,
      wire::Ipv6PseudoHeaderSum(d.ip.src, d.ip.dst, kTcp,
                                static_cast<uint32_t>(d.payload.size())),
      d.checksum_verified, d.checksum_partial, transport::IpAddress(d.ip.src),
      transport::IpAddress(d.ip.dst), now_);
}

Listener* TcpLayer::FindListener(const transport::SocketAddress& local) const {
  auto li = listeners_.find(local);
  if (li != listeners_.end()) return li->second;
  const transport::SocketAddress any{
      local.ip.is_v4() ? transport::IpAddress(wire::Ipv4Address())
                       : transport::IpAddress(wire::Ipv6Address()),
      local.port};
  li = listeners_.find(any);
  return li != listeners_.end() ? li->second : nullptr;
}

void TcpLayer::OnIcmpError(const stack::IcmpError& e, Instant now) {
  now_ = std::max(now_, now);
  // The invoking segment went from (src, sport) to (dst, dport); its
  // first 8 bytes are the ports and the sequence number.
  const transport::IpAddress src =
      e.v6 ? transport::IpAddress(e.src6) : transport::IpAddress(e.src4);
  const transport::IpAddress dst =
      e.v6 ? transport::IpAddress(e.dst6) : transport::IpAddress(e.dst4);
  const transport::FourTuple t{{src, wire::LoadBe16(&e.l4[0])},
                               {dst, wire::LoadBe16(&e.l4[2])}};
  auto it = connections_.find(t);
  if (it == connections_.end()) {
    ++counters_.icmp_errors_ignored;
    return;
  }
  if (it->second->OnIcmpError(e.kind, e.mtu, SeqNum(wire::LoadBe32(&e.l4[4])),
                              now_)) {
    ++counters_.icmp_errors_taken;
  } else {
    ++counters_.icmp_errors_ignored;
  }
}

std::optional<DropReason> TcpLayer::Receive(Segment& seg, Instant now) {
  auto it = connections_.find(seg.tuple);
  if (it != connections_.end()) {
    Connection* c = it->second;
    if (c->state() != TcpState::kClosed) return c->OnSegment(seg, now);
    Unregister(c);  // reaped later; a new segment starts afresh
  }
  if (TimeWaitEntry* tw = time_wait_.Find(seg.tuple)) {
    return ReceiveTimeWait(*tw, seg, now);
  }
  if (Listener* l = FindListener(seg.tuple.local)) {
    return ReceiveForListener(*l, seg, now);
  }
  if (syn_handler_ != nullptr && seg.has(flag::kSyn) && !seg.has(flag::kAck)) {
    return ReceiveUnclaimedSyn(seg, now);
  }
  SendResetFor(seg, now);
  return DropReason::kTcpNoListener;
}

std::optional<DropReason> TcpLayer::ReceiveUnclaimedSyn(
    Segment& seg, Instant now, std::optional<SeqNum> iss) {
  if (held_syns_.contains(seg.tuple)) {
    // The guest retransmits while the decision is pending: one decision
    // per tuple, so never a second host connection.
    ++counters_.held_syn_retransmits;
    return DropReason::kTcpSynHeld;
  }
  if (held_syns_.size() >= options_.max_half_open) {
    ++counters_.held_syn_limit_drops;
    return DropReason::kTcpHalfOpenLimit;
  }
  switch (syn_handler_->OnUnclaimedSyn(seg.tuple, now)) {
    case SynVerdict::kHold:
      break;
    case SynVerdict::kReset:
      SendResetFor(seg, now);
      return DropReason::kTcpNoListener;
    case SynVerdict::kDrop:
      return DropReason::kTcpSynShed;
  }
  wire::TcpRepr syn = seg.tcp;
  syn.flags = flag::kSyn;  // data and PSH/URG are not kept (nor ACKed)
  held_syns_.emplace(seg.tuple, HeldSyn{syn, iss});
  ++counters_.syns_held;
  return std::nullopt;
}

absl::StatusOr<std::unique_ptr<TcpSocket>> TcpLayer::AcceptHeld(
    const transport::FourTuple& tuple, Instant now) {
  now_ = std::max(now_, now);
  auto it = held_syns_.find(tuple);
  if (it == held_syns_.end()) {
    return absl::NotFoundError("no SYN held for " + tuple.remote.ToString());
  }
  Segment seg;
  seg.tuple = tuple;
  seg.tcp = it->second.syn;
  const std::optional<SeqNum> iss = it->second.iss;
  held_syns_.erase(it);
  if (connections_.contains(tuple) || !ConnectionRoom()) {
    ++counters_.held_syns_refused;
    SendResetFor(seg, now_);
    return transport::NoBuffers();
  }
  Connection* c = NewConnection(tuple, options_.connection);
  c->StartPassive(seg, nullptr, iss ? *iss : isn_.Next(tuple, now_), now_);
  std::unique_ptr<TcpSocket> s(new TcpSocket(
      *this,
      tuple.local.ip.is_v4() ? transport::Family::kIpv4
                             : transport::Family::kIpv6,
      options_.connection));
  s->conn_ = c;
  c->set_attached(true);
  ++counters_.held_syns_accepted;
  return s;
}

bool TcpLayer::RefuseHeld(const transport::FourTuple& tuple,
                          HeldSynRefusal how, Instant now) {
  now_ = std::max(now_, now);
  auto it = held_syns_.find(tuple);
  if (it == held_syns_.end()) return false;
  Segment seg;
  seg.tuple = tuple;
  seg.tcp = it->second.syn;
  held_syns_.erase(it);
  ++counters_.held_syns_refused;
  stack::IcmpErrorKind kind = stack::IcmpErrorKind::kHostUnreachable;
  switch (how) {
    case HeldSynRefusal::kSilent:
      return true;
    case HeldSynRefusal::kReset:
      SendResetFor(seg, now_);
      return true;
    case HeldSynRefusal::kNetUnreachable:
      kind = stack::IcmpErrorKind::kNetUnreachable;
      break;
    case HeldSynRefusal::kHostUnreachable:
      break;
    case HeldSynRefusal::kAdminProhibited:
      kind = stack::IcmpErrorKind::kAdminProhibited;
      break;
  }
  // The error quotes the SYN's IP header and its first 8 bytes: ports
  // and sequence number (RFC 792, RFC 4443 2.4(c)), which is what the
  // guest's TCP matches the error against.
  std::array<uint8_t, 8> head{};
  wire::StoreBe16(&head[0], tuple.remote.port);
  wire::StoreBe16(&head[2], tuple.local.port);
  wire::StoreBe32(&head[4], seg.tcp.seq);
  if (tuple.remote.ip.is_v4()) {
    stack_.SendDestUnreachable(tuple.remote.ip.v4(), tuple.local.ip.v4(), kTcp,
                               head, kind, now_);
  } else {
    stack_.SendDestUnreachable(tuple.remote.ip.v6(), tuple.local.ip.v6(), kTcp,
                               head, kind, now_);
  }
  return true;
}

// RFC 9293 3.10.7.4 in TIME_WAIT, in the order of Linux's
// tcp_timewait_state_process (net/ipv4/tcp_minisocks.c).
std::optional<DropReason> TcpLayer::ReceiveTimeWait(TimeWaitEntry& tw,
                                                    Segment& seg,
                                                    Instant now) {
  // RFC 1337: a RST must not end TIME_WAIT early.
  if (seg.has(flag::kRst)) return DropReason::kTcpTimeWait;
  if (tw.AcceptsSyn(seg)) {
    if (Listener* l = FindListener(seg.tuple.local)) {
      // RFC 6191: a newer SYN ends TIME_WAIT early.
      const SeqNum iss = tw.ReopenIss();
      time_wait_.Erase(tw);
      ++counters_.time_wait_recycled;
      return ReceiveForListener(*l, seg, now, iss);
    }
    if (syn_handler_ != nullptr) {
      // Gateway mode has no listener: the SynHandler stands for one
      // (Linux's TCP_TW_SYN hands the SYN to the listener). Otherwise the
      // SYN drew a bare ACK and the guest, which reused its port at once
      // because it closed passively and keeps no TIME_WAIT, hung until 2
      // MSL ran out. TIME_WAIT ends only once the SYN is held: a SYN the
      // handler sheds or resets leaves it, so the retransmission is asked
      // about again and still gets an ISS above the old sequence space.
      const std::optional<DropReason> r =
          ReceiveUnclaimedSyn(seg, now, tw.ReopenIss());
      if (!r) {  // held
        time_wait_.Erase(tw);
        ++counters_.time_wait_recycled;
      }
      return r;
    }
  }
  const bool paws = tw.PawsRejects(seg);
  if (!paws && !seg.has(flag::kSyn) && !seg.has(flag::kFin) &&
      seg.payload.size() == 0) {
    return DropReason::kTcpTimeWait;  // a bare ACK: nothing to answer
  }
  // A retransmitted FIN (our ACK was lost), data, a SYN we refused or a
  // segment PAWS rejected: ACK it. Restart 2 MSL unless it was a bare
  // SYN, which may be a new connection's with a random ISN below RCV.NXT
  // (Linux: "Do not reschedule in the last case").
  if (paws || seg.has(flag::kAck)) time_wait_.Restart(tw, now);
  // Linux tcp_oow_rate_limited: data-less segments and SYNs draw at most
  // one ACK per 500 ms, so two stacks that disagree cannot loop.
  const bool limited = seg.payload.size() == 0 || seg.has(flag::kSyn);
  if (limited && now - tw.last_oow_ack < absl::Milliseconds(500)) {
    ++counters_.invalid_acks_rate_limited;
  } else {
    tw.last_oow_ack = now;
    SegmentOut out;
    out.tcp.seq = tw.snd_nxt.value();
    out.tcp.ack = tw.rcv_nxt.value();
    out.tcp.flags = flag::kAck;
    out.tcp.window = tw.window;
    if (tw.ts_ok) {
      out.tcp.timestamps = wire::TcpTimestamps{
          static_cast<uint32_t>(absl::ToUnixMillis(now)) + tw.ts_offset,
          tw.ts_recent};
    }
    (void)Transmit(tw.tuple, out, now);
  }
  return paws ? DropReason::kTcpPawsRejected : DropReason::kTcpTimeWait;
}

bool TcpLayer::EnterTimeWait(Connection& c, const TimeWaitEntry& e,
                             Instant now) {
  Unregister(&c);
  if (time_wait_.Insert(e, now) == nullptr) {
    ++counters_.time_wait_overflows;
    return false;
  }
  return true;
}

bool TcpLayer::CookiesInUse(Instant now) const {
  return now - last_cookie_sent_ <=
         (SynCookies::kMaxAge + 1) * SynCookies::kPeriod;
}

bool TcpLayer::ConnectionRoom() {
  if (connections_.size() < options_.max_connections) return true;
  ++counters_.connection_limit_refusals;
  return false;
}

std::optional<DropReason> TcpLayer::ReceiveForListener(
    Listener& l, Segment& seg, Instant now, std::optional<SeqNum> iss) {
  if (seg.has(flag::kRst)) return DropReason::kTcpRstInvalid;
  if (seg.has(flag::kAck)) {
    // Either the last step of a SYN-cookie handshake or a stray ACK: a
    // late segment of a connection already closed and reaped, say. Only
    // when cookies went out recently is it a cookie candidate; otherwise
    // calling a failed check a "bad cookie" makes a clean run read as an
    // attack (issue 12 item 10). Both draw the RST of RFC 9293 3.10.7.2.
    if (options_.syn_cookies && !seg.has(flag::kSyn) && CookiesInUse(now)) {
      auto mss = cookies_.Check(seg.tuple, seg.seq() - 1, seg.ack() - 1, now);
      if (mss) {
        if (l.AcceptQueueFull()) {
          ++counters_.accept_queue_overflows;
          return DropReason::kTcpListenOverflow;
        }
        if (!ConnectionRoom()) return DropReason::kTcpConnectionLimit;
        CookieOptions co;
        if (seg.tcp.timestamps) {
          co = SynCookies::DecodeTsecr(seg.tcp.timestamps->tsecr);
        }
        Connection* c = NewConnection(seg.tuple, l.options());
        c->StartFromCookie(seg, &l, seg.ack() - 1, *mss, co, now);
        if (seg.payload.size() > 0 || seg.has(flag::kFin)) {
          (void)c->OnSegment(seg, now);
        }
        return std::nullopt;
      }
      ++counters_.syn_cookies_rejected;
      SendResetFor(seg, now);
      return DropReason::kTcpBadSynCookie;
    }
    SendResetFor(seg, now);
    return DropReason::kTcpStrayAck;
  }
  if (!seg.has(flag::kSyn)) return DropReason::kTcpBadFlags;
  if (!ConnectionRoom()) return DropReason::kTcpConnectionLimit;
  if (options_.busy_syn_rate != 0 &&
      stack_.RxBatchLimitHits() != limit_hits_at_poll_ &&
      !busy_syns_.Take(now)) {
    ++counters_.syns_shed;
    return DropReason::kTcpSynShed;
  }
  const bool half_open_full = half_open_count_ >= options_.max_half_open;
  if (l.Full() || half_open_full) {
    if (!options_.syn_cookies) {
      if (!l.Full()) {
        ++counters_.half_open_limit_drops;
        return DropReason::kTcpHalfOpenLimit;
      }
      ++counters_.accept_queue_overflows;
      return DropReason::kTcpListenOverflow;
    }
    // Stateless SYN-ACK whose ISN is the cookie (RFC 4987 section 3.6).
    const uint16_t peer_mss =
        seg.tcp.mss.value_or(seg.tuple.local.ip.is_v4() ? 536 : 1220);
    const SynCookies::Cookie cookie =
        cookies_.Make(seg.tuple, seg.seq(), peer_mss, now);
    SegmentOut out;
    out.tcp.seq = cookie.isn.value();
    out.tcp.ack = (seg.seq() + 1).value();
    out.tcp.flags = flag::kSyn | flag::kAck;
    // Our own MSS: the cookie's value is the peer's, rounded down.
    uint32_t mtu = 1500;
    uint32_t gso = 0;
    (void)SourceFor(seg.tuple.remote.ip, &mtu, &gso);
    out.tcp.mss = MssForMtu(mtu, seg.tuple.remote.ip.is_v6());
    const ConnectionOptions& o = l.options();
    out.tcp.window = static_cast<uint16_t>(
        std::min<uint32_t>(o.receive_buffer, 65535));
    if (seg.tcp.timestamps && o.timestamps) {
      std::optional<uint8_t> ws;
      uint8_t our_ws = 0;
      if (seg.tcp.window_scale && o.window_scaling) {
        ws = seg.tcp.window_scale;
        const uint32_t max_buf =
            std::max(o.max_receive_buffer, o.receive_buffer);
        while (our_ws < 14 && (max_buf >> our_ws) > 65535) ++our_ws;
        out.tcp.window_scale = our_ws;
      }
      const bool sack = seg.tcp.sack_permitted && o.sack;
      out.tcp.sack_permitted = sack;
      out.tcp.timestamps = wire::TcpTimestamps{
          SynCookies::EncodeTsval(
              static_cast<uint32_t>(absl::ToUnixMillis(now)), ws, sack),
          seg.tcp.timestamps->tsval};
    }
    ++counters_.syn_cookies_sent;
    last_cookie_sent_ = now;
    (void)Transmit(seg.tuple, out, now);
    return std::nullopt;
  }
  Connection* c = NewConnection(seg.tuple, l.options());
  c->StartPassive(seg, &l, iss ? *iss : isn_.Next(seg.tuple, now), now);
  return std::nullopt;
}

void TcpLayer::SendResetFor(const Segment& seg, Instant now) {
  // RFC 9293 3.10.7.1; never in answer to a RST.
  if (seg.has(flag::kRst)) return;
  SegmentOut out;
  if (seg.has(flag::kAck)) {
    out.tcp.seq = seg.tcp.ack;
    out.tcp.flags = flag::kRst;
  } else {
    out.tcp.seq = 0;
    out.tcp.ack = (seg.seq() + seg.len()).value();
    out.tcp.flags = flag::kRst | flag::kAck;
  }
  ++counters_.resets_sent;
  (void)Transmit(seg.tuple, out, now);
}

// --- transmit ---

bool TcpLayer::Transmit(const transport::FourTuple& tuple,
                        const SegmentOut& out, Instant now) {
  buffer::PacketPtr p = packets_.Allocate();
  if (!p) {
    ++counters_.send_failures;
    stack_.CountDrop(DropReason::kNoBuffer);
    return false;
  }
  // Every segment gets only the pseudo-header sum (CHECKSUM_PARTIAL);
  // its payload is not read here. A super-segment is split by the link
  // (software or host GSO), which sums each wire packet's slice. A single
  // segment carries the PartialChecksum mark: a TAP hands it to the
  // kernel with NEEDS_CSUM, and the stack completes it for any other link
  // (issue #34: the guest's kernel verified what we had summed).
  const bool gso = out.packets > 1 && out.gso_size > 0;
  for (uint32_t i = 0; i < out.views; ++i) {
    if (!p->AppendPayload(out.payload[i])) {
      ++counters_.send_failures;
      return false;
    }
  }
  wire::TcpRepr tcp = out.tcp;
  tcp.src_port = tuple.local.port;
  tcp.dst_port = tuple.remote.port;
  const size_t hlen = tcp.BufferLen();
  auto hdr = p->headers().Prepend(hlen);
  if (!hdr) {
    ++counters_.send_failures;
    stack_.CountDrop(DropReason::kNoBuffer);
    return false;
  }
  tcp.Emit(wire::MutableTcpHeader(*hdr));
  if (!gso) {
    p->partial_checksum() = buffer::PartialChecksum{
        static_cast<uint8_t>(hlen), wire::TcpHeader::kChecksumOffset};
  }
  const size_t l4_len = hlen + out.payload_len;
  ++counters_.segments_out;
  if (tuple.remote.ip.is_v4()) {
    const uint16_t pseudo =
        wire::Ipv4PseudoHeaderSum(tuple.local.ip.v4(), tuple.remote.ip.v4(),
                                  kTcp, static_cast<uint32_t>(l4_len));
    if (gso) p->gso() = buffer::GsoInfo{buffer::GsoType::kTcpV4, out.gso_size};
    wire::MutableTcpHeader(*hdr).SetChecksum(pseudo);
    wire::Ipv4Repr ip;
    ip.src = tuple.local.ip.v4();
    ip.dst = tuple.remote.ip.v4();
    ip.protocol = kTcp;
    ip.dont_fragment = true;
    return stack_.SendIpv4(ip, std::move(p), now);
  }
  const uint16_t pseudo =
      wire::Ipv6PseudoHeaderSum(tuple.local.ip.v6(), tuple.remote.ip.v6(),
                                kTcp, static_cast<uint32_t>(l4_len));
  if (gso) p->gso() = buffer::GsoInfo{buffer::GsoType::kTcpV6, out.gso_size};
  wire::MutableTcpHeader(*hdr).SetChecksum(pseudo);
  wire::Ipv6Repr ip;
  ip.src = tuple.local.ip.v6();
  ip.dst = tuple.remote.ip.v6();
  ip.next_header = kTcp;
  return stack_.SendIpv6(ip, std::move(p), now);
}

// --- ports ---

bool TcpLayer::PortInUse(const transport::SocketAddress& a) const {
  for (const auto* table : {&bound_}) {
    for (const auto& [addr, n] : *table) {
      if (n > 0 && addr.port == a.port &&
          addr.ip.family() == a.ip.family() &&
          (addr.ip == a.ip || addr.ip.IsUnspecified() ||
           a.ip.IsUnspecified())) {
        return true;
      }
    }
  }
  return false;
}

absl::Status TcpLayer::BindSocket(TcpSocket& s,
                                  const transport::SocketAddress& a) {
  if (a.ip.family() != s.family_) {
    return transport::InvalidArgument("address family does not match");
  }
  if (!a.ip.IsUnspecified() && !s.transparent_ && !IsLocalAddress(a.ip)) {
    return transport::InvalidArgument(
        std::string("not a local address: ") + a.ip.ToString());
  }
  transport::SocketAddress b = a;
  if (b.port == 0) {
    const uint32_t range = options_.ephemeral_high - options_.ephemeral_low + 1;
    bool found = false;
    for (uint32_t i = 0; i < range; ++i) {
      const uint16_t port = static_cast<uint16_t>(
          options_.ephemeral_low + (next_ephemeral_++ % range));
      b.port = port;
      if (!PortInUse(b)) {
        found = true;
        break;
      }
    }
    if (!found) return transport::AddressInUse("no free ephemeral port");
  } else if (PortInUse(b)) {
    return transport::AddressInUse(b.ToString());
  }
  ++bound_[b];
  s.bound_ = b;
  s.bound_set_ = true;
  return absl::OkStatus();
}

absl::StatusOr<uint16_t> TcpLayer::AllocateEphemeral(
    const transport::IpAddress& ip, const transport::IpAddress& rip,
    uint16_t rport) {
  const uint32_t range = options_.ephemeral_high - options_.ephemeral_low + 1;
  for (uint32_t i = 0; i < range; ++i) {
    const uint16_t port = static_cast<uint16_t>(
        options_.ephemeral_low + (next_ephemeral_++ % range));
    transport::FourTuple t{{ip, port}, {rip, rport}};
    if (connections_.contains(t) || time_wait_.Contains(t)) continue;
    if (PortInUse(transport::SocketAddress{ip, port})) continue;
    return port;
  }
  return transport::AddressInUse("no free ephemeral port");
}

size_t TcpLayer::ConnectionsWithPendingOutput() const {
  size_t n = 0;
  for (const auto& [tuple, conn] : connections_) {
    switch (conn->state()) {
      case TcpState::kSynSent:
      case TcpState::kSynReceived:
      case TcpState::kFinWait1:
      case TcpState::kClosing:
      case TcpState::kLastAck:
        ++n;
        break;
      case TcpState::kEstablished:
      case TcpState::kCloseWait:
        if (conn->unsent_bytes() > 0) ++n;
        break;
      default:
        break;
    }
  }
  return n;
}

std::string TcpLayer::FormatCounters() const {
  const TcpCounters& c = counters_;
  return absl::StrFormat(
      "tcp: segments_in=%u segments_out=%u active_opens=%u "
      "passive_opens=%u established=%u resets_sent=%u resets_received=%u "
      "challenge_acks=%u invalid_acks_rate_limited=%u syn_cookies_sent=%u syn_cookies_accepted=%u "
      "syn_cookies_rejected=%u accept_overflows=%u time_wait_recycled=%u "
      "connection_limit_refusals=%u half_open_limit_drops=%u "
      "time_wait_overflows=%u half_open_dropped_listener_closed=%u "
      "timed_out=%u retransmits=%u sack_reneging=%u send_failures=%u "
      "connections=%u "
      "time_wait=%u icmp_errors_taken=%u icmp_errors_ignored=%u "
      "pmtu_decreases=%u syns_held=%u held_syn_retransmits=%u "
      "held_syns_accepted=%u held_syns_refused=%u held_syn_limit_drops=%u "
      "syns_shed=%u",
      c.segments_in, c.segments_out, c.active_opens, c.passive_opens,
      c.established, c.resets_sent, c.resets_received, c.challenge_acks,
      c.invalid_acks_rate_limited,
      c.syn_cookies_sent, c.syn_cookies_accepted, c.syn_cookies_rejected,
      c.accept_queue_overflows, c.time_wait_recycled,
      c.connection_limit_refusals, c.half_open_limit_drops,
      c.time_wait_overflows, c.half_open_dropped_listener_closed,
      c.connections_timed_out, c.retransmits, c.sack_reneging,
      c.send_failures,
      connections_.size(), time_wait_.size(), c.icmp_errors_taken,
      c.icmp_errors_ignored, c.pmtu_decreases, c.syns_held,
      c.held_syn_retransmits, c.held_syns_accepted, c.held_syns_refused,
      c.held_syn_limit_drops, c.syns_shed);
}

}  // namespace netstack::tcp
