#include "netstack/stack/stack.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "netstack/stack/nic.h"
#include "netstack/wire/ip_protocol.h"
#include "netstack/wire/arp.h"
#include "netstack/wire/checksum.h"
#include "netstack/wire/ethernet.h"

namespace netstack::stack {
namespace {

// Completes a checksum left to the link (buffer::PartialChecksum): sums
// the transport header, whose field holds the pseudo-header sum, and the
// payload, and stores the complement. One pass over the payload, as when
// the transport summed it itself.
void CompletePartialChecksum(buffer::PacketBuffer& p) {
  const buffer::PartialChecksum c = p.partial_checksum();
  p.partial_checksum() = {};
  const auto hdrs = p.headers().mutable_data();
  if (hdrs.size() < c.l4_header_len || size_t{c.offset} + 2 > c.l4_header_len) {
    return;  // not produced by our transports; left as it is
  }
  const std::span<uint8_t> l4 = hdrs.last(c.l4_header_len);
  wire::ChecksumAccumulator acc;
  acc.Add(l4);
  for (const buffer::PayloadView& v : p.payload()) acc.Add(v.bytes());
  uint16_t sum = acc.Checksum();
  // UDP (field at 6) sends a computed zero as all ones (RFC 768).
  if (sum == 0 && c.offset == 6) sum = 0xffff;
  l4[c.offset] = static_cast<uint8_t>(sum >> 8);
  l4[c.offset + 1] = static_cast<uint8_t>(sum);
}

}  // namespace

Stack::Stack(const StackOptions& options, buffer::ChunkPool& chunks,
             buffer::PacketPool& packets)
    : options_(options),
      chunks_(chunks),
      packets_(packets),
      arp_(options.neighbor),
      ndp_(options.neighbor),
      reassembler_(chunks, options.reassembly),
      icmp_errors_(options.icmp_errors_per_second, options.icmp_error_burst) {}

Stack::~Stack() {
  for (auto& nic : nics_) nic->link->Attach(nullptr);
}

absl::StatusOr<NicId> Stack::AddNic(link::LinkEndpoint* link,
                                    std::string name) {
  if (link == nullptr) return absl::InvalidArgumentError("AddNic: null link");
  auto nic = std::make_unique<Nic>();
  nic->id = static_cast<NicId>(nics_.size() + 1);
  nic->name = std::move(name);
  nic->link = link;
  nic->caps = link->Capabilities();
  if (nic->caps.mtu < 1280) {
    // IPv6 needs 1280 (RFC 8200 section 5); IPv4 would work with less,
    // but no link we support is that small.
    return absl::InvalidArgumentError(
        absl::StrCat("NIC ", nic->name, ": MTU ", nic->caps.mtu,
                     " is below the IPv6 minimum of 1280"));
  }
  nic->receiver = std::make_unique<NicReceiver>(*this, *nic);
  const NicId id = nic->id;
  const wire::Ipv6Address link_local = LinkLocalFromMac(nic->caps.mac);
  nic->ipv6.push_back(Ipv6Cidr{link_local, 64});
  routes6_.Add(Route<wire::Ipv6Address>{
      Ipv6Cidr{*wire::Ipv6Address::Parse("fe80::"), 64}, std::nullopt, id});
  link->Attach(nic->receiver.get());
  nics_.push_back(std::move(nic));
  return id;
}

absl::Status Stack::AddAddress(NicId id, const Ipv4Cidr& cidr) {
  Nic* nic = FindNic(id);
  if (nic == nullptr) return absl::NotFoundError(absl::StrCat("no NIC ", id));
  if (cidr.address.IsZero() || cidr.address.IsMulticast() ||
      cidr.address.IsBroadcast()) {
    return absl::InvalidArgumentError(
        absl::StrCat(ToString(cidr), " is not a unicast address"));
  }
  // An embedder's input (runtime.h): a prefix past the address's bits
  // would make every route and on-link test compare past them.
  if (cidr.prefix_len > 32) {
    return absl::InvalidArgumentError(
        absl::StrCat("prefix length ", cidr.prefix_len, " is over 32"));
  }
  nic->ipv4.push_back(cidr);
  Ipv4Cidr net = cidr;
  routes4_.Add(Route<wire::Ipv4Address>{net, std::nullopt, id});
  return absl::OkStatus();
}

absl::Status Stack::AddAddress(NicId id, const Ipv6Cidr& cidr) {
  Nic* nic = FindNic(id);
  if (nic == nullptr) return absl::NotFoundError(absl::StrCat("no NIC ", id));
  if (cidr.address.IsZero() || cidr.address.IsMulticast()) {
    return absl::InvalidArgumentError(
        absl::StrCat(ToString(cidr), " is not a unicast address"));
  }
  if (cidr.prefix_len > 128) {
    return absl::InvalidArgumentError(
        absl::StrCat("prefix length ", cidr.prefix_len, " is over 128"));
  }
  nic->ipv6.push_back(cidr);
  routes6_.Add(Route<wire::Ipv6Address>{cidr, std::nullopt, id});
  return absl::OkStatus();
}

absl::Status Stack::SetGateway(NicId id, const GatewayOptions& options) {
  Nic* nic = FindNic(id);
  if (nic == nullptr) return absl::NotFoundError(absl::StrCat("no NIC ", id));
  nic->gateway = options;
  return absl::OkStatus();
}

bool Stack::SentByUs(const wire::Ipv4Address& a) const {
  for (const auto& nic : nics_) {
    if (IsOurIpv4(*nic, a)) return true;
    if (nic->gateway && a != nic->gateway->guest4 && GatewayForwards(*nic, a)) {
      return true;
    }
  }
  return false;
}

bool Stack::SentByUs(const wire::Ipv6Address& a) const {
  for (const auto& nic : nics_) {
    if (IsOurIpv6(*nic, a)) return true;
    if (nic->gateway && GatewayForwards(*nic, a)) return true;
  }
  return false;
}

absl::Status Stack::AddRoute(const Route<wire::Ipv4Address>& route) {
  if (FindNic(route.nic) == nullptr) {
    return absl::NotFoundError(absl::StrCat("no NIC ", route.nic));
  }
  routes4_.Add(route);
  return absl::OkStatus();
}

absl::Status Stack::AddRoute(const Route<wire::Ipv6Address>& route) {
  if (FindNic(route.nic) == nullptr) {
    return absl::NotFoundError(absl::StrCat("no NIC ", route.nic));
  }
  routes6_.Add(route);
  return absl::OkStatus();
}

Stack::Nic* Stack::FindNic(NicId id) {
  if (id == 0 || id > nics_.size()) return nullptr;
  return nics_[id - 1].get();
}

const Stack::Nic* Stack::FindNic(NicId id) const {
  if (id == 0 || id > nics_.size()) return nullptr;
  return nics_[id - 1].get();
}

void Stack::SetTransport(uint8_t protocol, TransportHandler* handler) {
  if (protocol == static_cast<uint8_t>(wire::IpProtocol::kTcp)) tcp_ = handler;
  if (protocol == static_cast<uint8_t>(wire::IpProtocol::kUdp)) udp_ = handler;
}

std::optional<PathInfo<wire::Ipv4Address>> Stack::Path(
    const wire::Ipv4Address& dst) const {
  const auto hop = routes4_.Lookup(dst);
  const Nic* nic = hop ? FindNic(hop->nic) : nullptr;
  if (nic == nullptr) return std::nullopt;
  auto src = SourceFor(*nic, dst);
  if (!src) return std::nullopt;
  return PathInfo<wire::Ipv4Address>{*src, nic->id, nic->caps.mtu,
                                     nic->caps.gso_max_size,
                                     nic->caps.udp_gso};
}

std::optional<PathInfo<wire::Ipv6Address>> Stack::Path(
    const wire::Ipv6Address& dst) const {
  const auto hop = routes6_.Lookup(dst);
  const Nic* nic = hop ? FindNic(hop->nic) : nullptr;
  if (nic == nullptr) return std::nullopt;
  auto src = SourceFor(*nic, dst);
  if (!src) return std::nullopt;
  return PathInfo<wire::Ipv6Address>{*src, nic->id, nic->caps.mtu,
                                     nic->caps.gso_max_size,
                                     nic->caps.udp_gso};
}

bool Stack::HasAddress(const wire::Ipv4Address& a) const {
  for (const auto& nic : nics_) {
    if (IsOurIpv4(*nic, a)) return true;
  }
  return false;
}

bool Stack::HasAddress(const wire::Ipv6Address& a) const {
  for (const auto& nic : nics_) {
    if (IsOurIpv6(*nic, a)) return true;
  }
  return false;
}

Instant Stack::NextDeadline() const {
  Instant next = retry_tx_at_;
  next = std::min(next, arp_.NextDeadline());
  next = std::min(next, ndp_.NextDeadline());
  next = std::min(next, reassembler_.NextDeadline());
  return next;
}

void Stack::ExpireReassembly(Instant now) {
  reassembler_.Poll(now, [&](const ip::ExpiredDatagram& e) {
    if (e.first_fragment_received) SendReassemblyTimeExceeded(e, now);
  });
}

void Stack::Poll(Instant now) {
  ExpireReassembly(now);
  arp_.Poll(
      now,
      [&](const wire::Ipv4Address& ip) {
        // Re-solicit on the NIC that routes to it.
        if (auto hop = routes4_.Lookup(ip)) {
          if (Nic* nic = FindNic(hop->nic)) {
            if (auto src = SourceFor(*nic, ip)) {
              SendArp(*nic, static_cast<uint16_t>(wire::ArpOperation::kRequest),
                      wire::MacAddress::Broadcast(), *src, wire::MacAddress(),
                      ip, now);
            }
          }
        }
      },
      [&](const wire::Ipv4Address&, buffer::PacketChain chain) {
        DropChain(std::move(chain), DropReason::kNeighborUnreachable);
      });
  ndp_.Poll(
      now,
      [&](const wire::Ipv6Address& ip) {
        if (auto hop = routes6_.Lookup(ip)) {
          if (Nic* nic = FindNic(hop->nic)) {
            SendNeighborSolicitation(*nic, ip, now);
          }
        }
      },
      [&](const wire::Ipv6Address&, buffer::PacketChain chain) {
        DropChain(std::move(chain), DropReason::kNeighborUnreachable);
      });
  Flush(now);
}

void Stack::SendReassemblyTimeExceeded(const ip::ExpiredDatagram& e,
                                       Instant now) {
  // RFC 792 / RFC 8200 4.5: Time Exceeded, code 1, quoting the first
  // fragment. The reassembler's spans die with this callback, so copy the
  // quote into a chunk of its own (a rare slow path).
  buffer::ChunkRef chunk = chunks_.Allocate();
  if (!chunk) return Drop(DropReason::kNoBuffer);
  const size_t quote_data = e.key.family == ip::IpFamily::kIpv4 ? 8 : 1024;
  const size_t n_hdr = e.first_header.size();
  const size_t n_data = std::min(quote_data, e.first_data.size());
  auto mem = chunk->mutable_data();
  std::copy(e.first_header.begin(), e.first_header.end(), mem.begin());
  std::copy(e.first_data.begin(), e.first_data.begin() + n_data,
            mem.begin() + n_hdr);
  buffer::PayloadView all(chunk, 0, static_cast<uint32_t>(n_hdr + n_data));
  if (e.key.family == ip::IpFamily::kIpv4) {
    // The kept header was validated when its fragment arrived; its Total
    // Length describes that fragment, not this quote, so read the fields
    // we need directly instead of re-parsing.
    if (n_hdr < wire::Ipv4Packet::kMinHeaderLen) return;
    const wire::Ipv4Packet quoted(all.bytes());
    Ipv4Datagram d;
    d.ip.src = quoted.Source();
    d.ip.dst = quoted.Destination();
    d.ip.protocol = quoted.Protocol();
    for (const auto& nic : nics_) {
      if (IsOurIpv4(*nic, d.ip.dst)) d.nic = nic->id;
    }
    d.header = all.Subview(0, static_cast<uint32_t>(n_hdr));
    d.payload = all.Subview(static_cast<uint32_t>(n_hdr),
                            static_cast<uint32_t>(n_data));
    d.ip.fragment_offset = 0;
    SendIcmpv4Error(d, 11, 1, 0, now);
  } else {
    Ipv6Datagram d;
    if (n_hdr < wire::Ipv6Packet::kHeaderLen) return;
    wire::Ipv6Packet fixed(all.bytes().first(wire::Ipv6Packet::kHeaderLen));
    d.ip.src = fixed.Source();
    d.ip.dst = fixed.Destination();
    d.packet = all;
    // The kept header ends with the Fragment header, whose Next Header is
    // the protocol of the data (so an expired ICMPv6 error is not
    // answered with another error, RFC 4443 2.4(e)).
    if (n_hdr >= wire::Ipv6Packet::kHeaderLen + 8) {
      d.protocol = e.first_header[n_hdr - 8];
    }
    d.payload = all.Subview(static_cast<uint32_t>(n_hdr),
                            static_cast<uint32_t>(n_data));
    for (const auto& nic : nics_) {
      if (IsOurIpv6(*nic, d.ip.dst)) d.nic = nic->id;
    }
    SendIcmpv6Error(d, /*Time Exceeded*/ 3, /*reassembly*/ 1, 0, now);
  }
}

bool Stack::TakeIcmpErrorToken(Instant now) {
  if (icmp_errors_.Take(now)) return true;
  Drop(DropReason::kIcmpRateLimited);
  return false;
}

void Stack::Flush(Instant now) {
  retry_tx_at_ = kNever;
  for (auto& nic : nics_) {
    if (nic->tx.empty()) continue;
    const size_t sent = nic->link->Transmit(nic->tx, now);
    counters_.tx_packets += sent;
    if (!nic->tx.empty()) {
      // The link would block. Retry soon; an event loop that watches the
      // link's WriteFd() calls Flush() earlier.
      retry_tx_at_ = now + absl::Milliseconds(1);
    }
  }
}

void Stack::DeliverFrames(Nic& nic, std::span<link::InboundFrame> frames,
                          Instant now) {
  for (const link::InboundFrame& f : frames) {
    ++counters_.rx_frames;
    const uint64_t drops_before = rx_drops_;
    HandleFrame(nic, f, now);
    if (rx_drops_ != drops_before) {
      ++counters_.rx_dropped_frames;
    } else {
      ++counters_.rx_consumed;
    }
  }
  if (udp_ != nullptr) udp_->OnReceiveBatchEnd(now);
  Flush(now);
}

void Stack::HandleFrame(Nic& nic, const link::InboundFrame& frame,
                        Instant now) {
  const wire::EthernetFrame eth(frame.frame.bytes());
  wire::EthernetRepr repr;
  if (wire::EthernetRepr::Parse(eth, repr) != wire::WireError::kOk) {
    return Drop(DropReason::kEthernetMalformed);
  }
  if (repr.dst != nic.caps.mac && !repr.dst.IsMulticast()) {
    return Drop(DropReason::kNotOurMac);
  }
  if (repr.src == nic.caps.mac || repr.src.IsMulticast()) {
    // Our own frame looped back, or a forged multicast source.
    return Drop(DropReason::kEthernetBadSource);
  }
  if (repr.vlan) {
    // We are not a VLAN-aware host: a tagged frame is for someone else.
    return Drop(DropReason::kVlanTagged);
  }
  const bool link_multicast = repr.dst.IsMulticast();
  const uint32_t hlen = static_cast<uint32_t>(eth.HeaderLen());
  buffer::PayloadView payload =
      frame.frame.Subview(hlen, frame.frame.size() - hlen);
  switch (static_cast<wire::EtherType>(repr.ethertype)) {
    case wire::EtherType::kArp:
      return HandleArp(nic, payload.bytes(), now);
    case wire::EtherType::kIpv4:
      return HandleIpv4(nic, frame, std::move(payload), link_multicast, now);
    case wire::EtherType::kIpv6:
      if (!options_.ipv6) return Drop(DropReason::kIpv6Disabled);
      return HandleIpv6(nic, frame, std::move(payload), link_multicast, now);
    default:
      return Drop(DropReason::kUnknownEthertype);
  }
}

void Stack::QueueFrame(Nic& nic, buffer::PacketPtr packet,
                       const wire::MacAddress& dst, uint16_t ethertype) {
  if (nic.tx.size() >= options_.tx_queue_limit) {
    return Drop(DropReason::kTxQueueFull);
  }
  if (packet->needs_checksum() && !nic.caps.tx_checksum_offload) {
    CompletePartialChecksum(*packet);
  }
  wire::EthernetRepr eth;
  eth.src = nic.caps.mac;
  eth.dst = dst;
  eth.ethertype = ethertype;
  auto hdr = packet->headers().Prepend(eth.BufferLen());
  if (!hdr) return Drop(DropReason::kNoBuffer);
  eth.Emit(wire::MutableEthernetFrame(*hdr));
  nic.tx.PushBack(std::move(packet));
}

size_t Stack::ToPayloadViews(
    buffer::PacketBuffer& packet,
    std::array<buffer::PayloadView,
               buffer::PacketBuffer::kMaxPayloadViews + 1>& out) {
  buffer::ChunkRef chunk = chunks_.Allocate();
  if (!chunk) return 0;
  if (packet.needs_checksum()) CompletePartialChecksum(packet);
  const auto hdr = packet.headers().data();
  std::copy(hdr.begin(), hdr.end(), chunk->mutable_data().begin());
  size_t n = 0;
  out[n++] = buffer::PayloadView(std::move(chunk), 0,
                                 static_cast<uint32_t>(hdr.size()));
  for (const auto& v : packet.payload()) out[n++] = v;
  return n;
}

void Stack::DropChain(buffer::PacketChain chain, DropReason reason) {
  // Only transmit-side reasons reach here: packets we were sending.
  counters_.drops[static_cast<size_t>(reason)] += chain.size();
  chain.Clear();
}

std::string Stack::FormatCounters() const {
  std::string out = counters_.Format();
  const auto& r = reassembler_.stats();
  absl::StrAppend(&out, "reassembly.bytes_held ", r.bytes_held, "\n",
                  "reassembly.peak_bytes_held ", r.peak_bytes_held, "\n");
  // What a fragment flood did (docs/SECURITY.md): the datagrams begun,
  // finished and held, and, by reason, the fragments refused and the
  // datagrams discarded (a timeout, an eviction at the memory limit, an
  // overlap). Non-zero ones only: a clean run prints none of them.
  if (r.fragments_received != 0) {
    absl::StrAppend(&out, "reassembly.fragments_received ",
                    r.fragments_received, "\n",
                    "reassembly.fragments_accepted ", r.fragments_accepted,
                    "\n", "reassembly.datagrams_started ",
                    r.datagrams_started, "\n",
                    "reassembly.datagrams_completed ", r.datagrams_completed,
                    "\n", "reassembly.datagrams_held ", r.datagrams_held,
                    "\n");
  }
  for (size_t i = 0; i < ip::kDropReasonCount; ++i) {
    const std::string name(ip::DropReasonName(static_cast<ip::DropReason>(i)));
    if (r.fragment_drops[i] != 0) {
      absl::StrAppend(&out, "reassembly.fragment_drop.", name, " ",
                      r.fragment_drops[i], "\n");
    }
    if (r.datagram_drops[i] != 0) {
      absl::StrAppend(&out, "reassembly.datagram_drop.", name, " ",
                      r.datagram_drops[i], "\n");
    }
  }
  // The payload chunks (chunk.h): what is held now, and the allocations
  // refused, at the limit (a link drops the frame: rx_dropped) or because
  // only the receive reserve was left (queued data waits).
  const auto& c = chunks_.stats();
  absl::StrAppend(&out, "chunks.in_use ", c.in_use, "\n",
                  "chunks.max ", chunks_.max_chunks(), "\n",
                  "chunks.receive_reserve ", chunks_.receive_reserve(), "\n",
                  "chunks.exhausted ", c.exhausted, "\n",
                  "chunks.queue_refused ", c.queue_refused, "\n");
  for (const auto& nic : nics_) {
    const link::LinkStats s = nic->link->Stats();
    absl::StrAppend(&out, "link.", nic->name, ".rx_frames ", s.rx_frames,
                    "\nlink.", nic->name, ".tx_frames ", s.tx_frames,
                    "\nlink.", nic->name, ".rx_dropped ", s.rx_dropped,
                    "\nlink.", nic->name, ".tx_dropped ", s.tx_dropped,
                    "\nlink.", nic->name, ".tx_syscalls ", s.tx_syscalls,
                    "\nlink.", nic->name, ".rx_syscalls ", s.rx_syscalls,
                    "\nlink.", nic->name, ".rx_frames_other_queues ",
                    s.rx_frames_other_queues,
                    "\nlink.", nic->name, ".rx_batch_limit_hits ",
                    s.rx_batch_limit_hits, "\n");
  }
  return out;
}

}  // namespace netstack::stack
