#include "netstack/tcp/tcp_segment_harness.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "netstack/stack/test_frames.h"
#include "netstack/wire/arp.h"
#include "netstack/wire/bytes.h"
#include "netstack/wire/checksum.h"
#include "netstack/wire/ethernet.h"
#include "netstack/wire/icmpv6.h"
#include "netstack/wire/ip_protocol.h"
#include "netstack/wire/ipv4.h"
#include "netstack/wire/ipv6.h"

namespace netstack::wire {
void PrintTo(const TcpSackBlock& b, std::ostream* os) {
  *os << "[" << b.left << ", " << b.right << ")";
}
}  // namespace netstack::wire

namespace netstack::tcp::testing {

namespace {

constexpr uint8_t kTcpProto = static_cast<uint8_t>(wire::IpProtocol::kTcp);
constexpr uint8_t kIcmpv6Proto = 58;
constexpr uint16_t kEthIpv4 = static_cast<uint16_t>(wire::EtherType::kIpv4);
constexpr uint16_t kEthIpv6 = static_cast<uint16_t>(wire::EtherType::kIpv6);
constexpr uint16_t kEthArp = static_cast<uint16_t>(wire::EtherType::kArp);

wire::MacAddress OurMac() { return *wire::MacAddress::Parse("02:00:00:00:00:02"); }
wire::MacAddress PeerMac() {
  return *wire::MacAddress::Parse("02:00:00:00:00:01");
}
wire::Ipv4Address OurIp4() { return *wire::Ipv4Address::Parse("10.0.0.2"); }
wire::Ipv4Address PeerIp4() { return *wire::Ipv4Address::Parse("10.0.0.1"); }
wire::Ipv6Address OurIp6() { return *wire::Ipv6Address::Parse("fd00::2"); }
wire::Ipv6Address PeerIp6() { return *wire::Ipv6Address::Parse("fd00::1"); }

stack::testing::Peer PeerIdentity() {
  return {PeerMac(), PeerIp4(), PeerIp6()};
}

}  // namespace

std::string FlagsString(uint8_t flags) {
  std::string s;
  const std::pair<uint8_t, const char*> names[] = {
      {kSyn, "SYN"}, {kFin, "FIN"}, {kRst, "RST"}, {kPsh, "PSH"},
      {kAck, "ACK"}, {wire::tcp_flag::kUrg, "URG"},
      {wire::tcp_flag::kEce, "ECE"}, {wire::tcp_flag::kCwr, "CWR"}};
  for (const auto& [bit, name] : names) {
    if ((flags & bit) == 0) continue;
    if (!s.empty()) s += "|";
    s += name;
  }
  return s.empty() ? "none" : s;
}

void PrintTo(const OutSegment& s, std::ostream* os) {
  *os << absl::FormatTime("%H:%M:%E3S", s.at, absl::UTCTimeZone()) << " "
      << FlagsString(s.tcp.flags) << " seq=" << s.tcp.seq
      << " ack=" << s.tcp.ack << " win=" << s.tcp.window
      << " len=" << s.payload.size();
  if (s.tcp.mss) *os << " mss=" << *s.tcp.mss;
  if (s.tcp.window_scale) *os << " ws=" << int{*s.tcp.window_scale};
  if (s.tcp.sack_permitted) *os << " sackOK";
  if (s.tcp.timestamps) {
    *os << " ts=" << s.tcp.timestamps->tsval << "/"
        << s.tcp.timestamps->tsecr;
  }
  for (uint8_t i = 0; i < s.tcp.sack_count; ++i) {
    *os << " sack[" << s.tcp.sack_blocks[i].left << ","
        << s.tcp.sack_blocks[i].right << ")";
  }
  if (!s.checksum_ok) *os << " BAD-CHECKSUM";
}

PeerSegment& PeerSegment::Data(size_t n) {
  // The pattern follows the sequence number set so far: set Seq first.
  payload.assign(n, 0);
  for (size_t i = 0; i < n; ++i) {
    payload[i] = PatternByte(tcp.seq + static_cast<uint32_t>(i));
  }
  return *this;
}

PeerSegment& PeerSegment::Sack(
    std::initializer_list<wire::TcpSackBlock> blocks) {
  tcp.sack_count = 0;
  for (const auto& b : blocks) {
    if (tcp.sack_count == wire::TcpRepr::kMaxSackBlocks) break;
    tcp.sack_blocks[tcp.sack_count++] = b;
  }
  return *this;
}

std::vector<uint8_t> Bytes(size_t n, uint8_t first) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(first + i * 7);
  return v;
}

SegmentHarness::SegmentHarness(const HarnessOptions& options)
    : options_(options),
      start_(absl::FromUnixSeconds(1'700'000'000)),
      now_(start_) {
  link::LinkCapabilities caps;
  caps.mtu = options_.mtu;
  caps.gso_max_size = options_.gso_max_size;
  caps.tx_checksum_offload = options_.tx_checksum_offload;
  caps.mac = OurMac();
  link_ = std::make_unique<stack::FakeLink>(chunks_, caps);
  stack_ = std::make_unique<stack::Stack>(stack::StackOptions{}, chunks_,
                                          packets_);
  const stack::NicId nic = *stack_->AddNic(link_.get(), "fake0");
  EXPECT_TRUE(
      stack_->AddAddress(nic, stack::Ipv4Cidr{OurIp4(), 24}).ok());
  EXPECT_TRUE(
      stack_->AddAddress(nic, stack::Ipv6Cidr{OurIp6(), 64}).ok());
  tcp_ = std::make_unique<TcpLayer>(*stack_, chunks_, packets_, notifier_,
                                    options_.tcp);
  // Prime the neighbour caches: the peer asks for us, so the stack learns
  // the peer's link address (its answers are not TCP and are dropped).
  link_->Inject(stack::testing::ArpRequest(PeerIdentity(), OurIp4()), now_);
  link_->Inject(
      stack::testing::Icmpv6NeighborSolicitation(PeerIdentity(), OurIp6()),
      now_);
  Poll();
  other_frames.clear();
}

SegmentHarness::~SegmentHarness() {
  listener_.reset();
  tcp_.reset();
  stack_.reset();
  link_.reset();
}

transport::IpAddress SegmentHarness::our_ip() const {
  return options_.v6 ? transport::IpAddress(OurIp6())
                     : transport::IpAddress(OurIp4());
}

transport::IpAddress SegmentHarness::peer_ip() const {
  return options_.v6 ? transport::IpAddress(PeerIp6())
                     : transport::IpAddress(PeerIp4());
}

uint32_t SegmentHarness::PeerTsval() const {
  return peer.ts_base +
         static_cast<uint32_t>(absl::ToInt64Milliseconds(now_ - start_));
}

PeerSegment SegmentHarness::Segment() const {
  PeerSegment s;
  s.tcp.src_port = peer.port;
  s.tcp.dst_port = peer.remote_port;
  s.tcp.seq = peer.seq;
  s.tcp.ack = peer.ack;
  s.tcp.flags = kAck;
  s.tcp.window = peer.window;
  if (peer.timestamps) {
    s.tcp.timestamps = wire::TcpTimestamps{PeerTsval(), peer.ts_recent};
  }
  return s;
}

PeerSegment SegmentHarness::Syn(const PeerSynOptions& o) const {
  PeerSegment s;
  s.tcp.src_port = peer.port;
  s.tcp.dst_port = peer.remote_port;
  s.tcp.seq = peer.seq;
  s.tcp.flags = kSyn;
  s.tcp.window = o.window;
  s.tcp.mss = o.mss;
  s.tcp.window_scale = o.window_scale;
  s.tcp.sack_permitted = o.sack;
  if (o.timestamps) s.tcp.timestamps = wire::TcpTimestamps{PeerTsval(), 0};
  return s;
}

std::vector<uint8_t> SegmentHarness::Frame(const PeerSegment& s) const {
  wire::TcpRepr tcp = s.tcp;
  if (s.src_port) tcp.src_port = *s.src_port;
  // The TCP segment.
  std::vector<uint8_t> l4;
  if (s.raw_options) {
    wire::TcpRepr bare = tcp;
    bare.mss.reset();
    bare.window_scale.reset();
    bare.sack_permitted = false;
    bare.sack_count = 0;
    bare.timestamps.reset();
    std::vector<uint8_t> opts = *s.raw_options;
    while (opts.size() % 4 != 0) opts.push_back(0);
    l4.resize(20 + opts.size());
    bare.Emit(wire::MutableTcpHeader(l4));
    std::copy(opts.begin(), opts.end(), l4.begin() + 20);
    wire::MutableTcpHeader(l4).SetDataOffset(
        static_cast<uint8_t>((20 + opts.size()) / 4));
  } else {
    l4.resize(tcp.BufferLen());
    tcp.Emit(wire::MutableTcpHeader(l4));
  }
  if (!s.truncate_to_header) {
    l4.insert(l4.end(), s.payload.begin(), s.payload.end());
  }
  if (s.data_offset) wire::MutableTcpHeader(l4).SetDataOffset(*s.data_offset);
  // Checksum over the bytes as they are (whatever the data offset says).
  const uint16_t pseudo =
      options_.v6 ? wire::Ipv6PseudoHeaderSum(PeerIp6(), OurIp6(), kTcpProto,
                                              static_cast<uint32_t>(l4.size()))
                  : wire::Ipv4PseudoHeaderSum(PeerIp4(), OurIp4(), kTcpProto,
                                              static_cast<uint32_t>(l4.size()));
  wire::StoreBe16(&l4[16], 0);
  wire::ChecksumAccumulator acc;
  acc.AddFolded(pseudo);
  acc.Add(l4);
  uint16_t csum = acc.Checksum();
  if (s.corrupt_checksum) csum = static_cast<uint16_t>(csum ^ 0x5a5a);
  wire::StoreBe16(&l4[16], csum);

  return PeerIpFrame(kTcpProto, l4);
}

std::vector<uint8_t> SegmentHarness::PeerIpFrame(
    uint8_t protocol, const std::vector<uint8_t>& l4) const {
  std::vector<uint8_t> ip;
  if (options_.v6) {
    wire::Ipv6Repr r;
    r.src = PeerIp6();
    r.dst = OurIp6();
    r.next_header = protocol;
    r.hop_limit = 64;
    r.payload_len = static_cast<uint16_t>(l4.size());
    ip.resize(r.BufferLen() + l4.size());
    r.Emit(wire::MutableIpv6Packet(ip));
    std::copy(l4.begin(), l4.end(), ip.begin() + r.BufferLen());
  } else {
    wire::Ipv4Repr r;
    r.src = PeerIp4();
    r.dst = OurIp4();
    r.protocol = protocol;
    r.ttl = 64;
    r.dont_fragment = true;
    r.payload_len = static_cast<uint16_t>(l4.size());
    ip.resize(r.BufferLen() + l4.size());
    r.Emit(wire::MutableIpv4Packet(ip));
    std::copy(l4.begin(), l4.end(), ip.begin() + r.BufferLen());
  }
  return stack::testing::WithEthernet(PeerMac(), OurMac(),
                                      options_.v6 ? kEthIpv6 : kEthIpv4, ip);
}

std::vector<uint8_t> SegmentHarness::IcmpErrorFrame(
    const OutSegment& about, uint8_t type, uint8_t code, uint32_t info,
    std::optional<uint32_t> seq) const {
  // The invoking datagram: the IP header the stack sent and the first 8
  // bytes of its TCP header (ports, sequence number).
  std::vector<uint8_t> tcp8(8);
  wire::StoreBe16(&tcp8[0], about.tcp.src_port);
  wire::StoreBe16(&tcp8[2], about.tcp.dst_port);
  wire::StoreBe32(&tcp8[4], seq.value_or(about.tcp.seq));
  std::vector<uint8_t> invoking;
  if (options_.v6) {
    wire::Ipv6Repr r;
    r.src = OurIp6();
    r.dst = PeerIp6();
    r.next_header = kTcpProto;
    r.hop_limit = 64;
    r.payload_len = static_cast<uint16_t>(about.ip_packet_len - 40);
    invoking.resize(r.BufferLen());
    r.Emit(wire::MutableIpv6Packet(invoking));
  } else {
    wire::Ipv4Repr r;
    r.src = OurIp4();
    r.dst = PeerIp4();
    r.protocol = kTcpProto;
    r.ttl = 64;
    r.dont_fragment = true;
    r.payload_len = static_cast<uint16_t>(about.ip_packet_len - 20);
    invoking.resize(r.BufferLen());
    r.Emit(wire::MutableIpv4Packet(invoking));
  }
  invoking.insert(invoking.end(), tcp8.begin(), tcp8.end());
  std::vector<uint8_t> icmp = {type, code, 0, 0, 0, 0, 0, 0};
  wire::StoreBe32(&icmp[4], info);
  icmp.insert(icmp.end(), invoking.begin(), invoking.end());
  wire::ChecksumAccumulator acc;
  if (options_.v6) {
    acc.AddFolded(wire::Ipv6PseudoHeaderSum(
        PeerIp6(), OurIp6(), 58, static_cast<uint32_t>(icmp.size())));
  }
  acc.Add(icmp);
  wire::StoreBe16(&icmp[2], acc.Checksum());
  return PeerIpFrame(options_.v6 ? 58 : 1, icmp);
}

void SegmentHarness::InjectFrame(const std::vector<uint8_t>& frame) {
  link_->Inject(frame, now_);
  Poll();
}

void SegmentHarness::Send(const PeerSegment& s) { InjectFrame(Frame(s)); }

void SegmentHarness::SendBatch(const std::vector<PeerSegment>& segs) {
  std::vector<std::vector<uint8_t>> frames;
  frames.reserve(segs.size());
  for (const auto& s : segs) frames.push_back(Frame(s));
  link_->Inject(std::span<const std::vector<uint8_t>>(frames), now_);
  Poll();
}

void SegmentHarness::SendData(size_t n) {
  Send(Segment().Data(n));
  peer.seq += static_cast<uint32_t>(n);
}

void SegmentHarness::SendAck(uint32_t ack) {
  peer.ack = ack;
  Send(Segment());
}

void SegmentHarness::Poll() {
  for (int i = 0; i < 8; ++i) {
    notifier_.Dispatch();
    stack_->Poll(now_);
    tcp_->Poll(now_);
    const bool more = Collect();
    if (notifier_.empty() && !more) break;
  }
}

bool SegmentHarness::Collect() {
  // Answers to the stack's neighbour queries are injected after the
  // frames are read (they may release queued packets: read again).
  bool injected = false;
  for (int round = 0; round < 4; ++round) {
    std::vector<std::vector<uint8_t>> frames = std::move(link_->sent);
    link_->sent.clear();
    if (frames.empty()) break;
    std::vector<std::vector<uint8_t>> answers;
    for (const auto& f : frames) {
      wire::EthernetRepr eth;
      if (wire::EthernetRepr::Parse(wire::EthernetFrame(f), eth) !=
          wire::WireError::kOk) {
        ADD_FAILURE() << "the stack sent a malformed Ethernet frame";
        continue;
      }
      const std::span<const uint8_t> l3 =
          std::span<const uint8_t>(f).subspan(14);
      if (eth.ethertype == kEthArp) {
        AnswerNeighbour(f, answers);
        continue;
      }
      OutSegment seg;
      seg.at = now_;
      std::span<const uint8_t> l4;
      uint16_t pseudo = 0;
      if (eth.ethertype == kEthIpv4) {
        wire::Ipv4Packet p(l3);
        wire::Ipv4Repr ip;
        if (wire::Ipv4Repr::Parse(p, ip) != wire::WireError::kOk ||
            ip.protocol != kTcpProto) {
          other_frames.push_back(f);
          continue;
        }
        l4 = l3.subspan(ip.HeaderLen(), ip.payload_len);
        seg.src = transport::IpAddress(ip.src);
        seg.dst = transport::IpAddress(ip.dst);
        seg.ip_packet_len = ip.TotalLen();
        pseudo = wire::Ipv4PseudoHeaderSum(ip.src, ip.dst, kTcpProto,
                                           static_cast<uint32_t>(l4.size()));
      } else if (eth.ethertype == kEthIpv6) {
        wire::Ipv6Packet p(l3);
        wire::Ipv6Repr ip;
        if (wire::Ipv6Repr::Parse(p, ip) != wire::WireError::kOk) {
          other_frames.push_back(f);
          continue;
        }
        if (ip.next_header == kIcmpv6Proto) {
          const size_t before = answers.size();
          AnswerNeighbour(f, answers);
          if (answers.size() == before) other_frames.push_back(f);
          continue;
        }
        if (ip.next_header != kTcpProto) {
          other_frames.push_back(f);
          continue;
        }
        l4 = l3.subspan(40, ip.payload_len);
        seg.src = transport::IpAddress(ip.src);
        seg.dst = transport::IpAddress(ip.dst);
        seg.ip_packet_len = ip.TotalLen();
        pseudo = wire::Ipv6PseudoHeaderSum(ip.src, ip.dst, kTcpProto,
                                           static_cast<uint32_t>(l4.size()));
      } else {
        other_frames.push_back(f);
        continue;
      }
      const wire::TcpHeader h(l4);
      if (wire::TcpRepr::Parse(h, seg.tcp) != wire::WireError::kOk) {
        ADD_FAILURE() << "the stack sent a malformed TCP header";
        continue;
      }
      seg.checksum_ok = h.ChecksumValid(pseudo);
      seg.payload.assign(h.Payload().begin(), h.Payload().end());
      if (seg.tcp.timestamps && !seg.has(kRst)) {
        peer.ts_recent = seg.tcp.timestamps->tsval;
      }
      if (!seg.has(kRst)) {
        const uint32_t end = seg.end();
        if (!snd_max_set_ ||
            static_cast<int32_t>(end - snd_max_) > 0) {
          snd_max_ = end;
          snd_max_set_ = true;
        }
      }
      out_.push_back(std::move(seg));
    }
    if (answers.empty()) break;
    link_->Inject(std::span<const std::vector<uint8_t>>(answers), now_);
    injected = true;
    stack_->Poll(now_);
    stack_->Flush(now_);
  }
  return injected;
}

void SegmentHarness::AnswerNeighbour(
    const std::vector<uint8_t>& frame,
    std::vector<std::vector<uint8_t>>& answers) {
  const std::span<const uint8_t> l3 =
      std::span<const uint8_t>(frame).subspan(14);
  wire::EthernetRepr eth;
  (void)wire::EthernetRepr::Parse(wire::EthernetFrame(frame), eth);
  if (eth.ethertype == kEthArp) {
    wire::ArpRepr arp;
    if (wire::ArpRepr::Parse(wire::ArpPacket(l3), arp) !=
        wire::WireError::kOk) {
      return;
    }
    if (arp.operation == wire::ArpOperation::kRequest &&
        arp.target_ip == PeerIp4()) {
      answers.push_back(
          stack::testing::ArpReply(PeerIdentity(), OurMac(), OurIp4()));
    }
    return;
  }
  wire::Ipv6Repr ip;
  if (wire::Ipv6Repr::Parse(wire::Ipv6Packet(l3), ip) !=
      wire::WireError::kOk) {
    return;
  }
  const std::span<const uint8_t> body = l3.subspan(40, ip.payload_len);
  wire::Icmpv6Repr icmp;
  if (wire::Icmpv6Repr::Parse(wire::Icmpv6Packet(body), icmp) !=
      wire::WireError::kOk) {
    return;
  }
  const auto* ns = std::get_if<wire::NdpNeighborSolicitation>(&icmp.message);
  if (ns == nullptr || ns->target != PeerIp6()) return;
  wire::NdpNeighborAdvertisement na;
  na.solicited = true;
  na.override_flag = true;
  na.target = PeerIp6();
  na.options.target_link_layer = PeerMac();
  wire::Icmpv6Repr reply;
  reply.message = na;
  std::vector<uint8_t> msg(reply.BufferLen());
  reply.Emit(wire::MutableIcmpv6Packet(msg));
  wire::MutableIcmpv6Packet(msg).FillChecksum(PeerIp6(), ip.src);
  wire::Ipv6Repr out;
  out.src = PeerIp6();
  out.dst = ip.src;
  out.next_header = kIcmpv6Proto;
  out.hop_limit = 255;
  out.payload_len = static_cast<uint16_t>(msg.size());
  std::vector<uint8_t> pkt(40 + msg.size());
  out.Emit(wire::MutableIpv6Packet(pkt));
  std::copy(msg.begin(), msg.end(), pkt.begin() + 40);
  answers.push_back(
      stack::testing::WithEthernet(PeerMac(), OurMac(), kEthIpv6, pkt));
}

Instant SegmentHarness::NextDeadline() const {
  return std::min(tcp_->NextDeadline(), stack_->NextDeadline());
}

void SegmentHarness::AdvanceTo(Instant t) {
  Poll();
  for (int guard = 0; guard < 1'000'000; ++guard) {
    const Instant next = NextDeadline();
    if (next > t || next == kNever) break;
    if (next <= now_) {
      // Due now but not run by the last poll: poll once more, then move on
      // (never spin at one instant).
      Poll();
      if (NextDeadline() <= now_) break;
      continue;
    }
    now_ = next;
    Poll();
  }
  if (t > now_) now_ = t;
  Poll();
}

bool SegmentHarness::RunToNextDeadline(Duration limit) {
  const Instant next = NextDeadline();
  if (next == kNever || next > now_ + limit) return false;
  if (next > now_) now_ = next;
  Poll();
  return true;
}

bool SegmentHarness::AdvanceUntilSent(Duration limit) {
  const Instant end = now_ + limit;
  Poll();
  while (out_.empty()) {
    const Instant next = NextDeadline();
    if (next == kNever || next > end) {
      now_ = end;
      Poll();
      return !out_.empty();
    }
    if (next > now_) now_ = next;
    Poll();
    if (out_.empty() && NextDeadline() <= now_) {
      // Stuck at this instant without output: step past it.
      now_ += absl::Microseconds(1);
    }
  }
  return true;
}

std::vector<OutSegment> SegmentHarness::WriteAndAck(TcpSocket& s, size_t n,
                                                    Duration rtt) {
  auto w = s.Write(Bytes(n));
  EXPECT_TRUE(w.ok() && *w == n) << "Write(" << n << ")";
  Poll();
  std::vector<OutSegment> out = Take();
  Advance(rtt);
  SendAck(snd_max_);
  return out;
}

std::vector<OutSegment> SegmentHarness::Take() {
  std::vector<OutSegment> o = std::move(out_);
  out_.clear();
  return o;
}

std::unique_ptr<TcpSocket> SegmentHarness::OpenActive(
    const PeerSynOptions& o, const std::optional<ConnectionOptions>& ours) {
  auto s = tcp_->Open(family());
  if (ours) {
    EXPECT_TRUE(s->SetOptions(*ours).ok());
  }
  EXPECT_TRUE(s->Connect(peer_address()).ok());
  Poll();
  std::vector<OutSegment> out = Take();
  if (out.size() != 1 || out[0].tcp.flags != kSyn) {
    ADD_FAILURE() << "expected one SYN, got " << ::testing::PrintToString(out);
    return s;
  }
  last_syn_ = out[0];
  iss_ = out[0].tcp.seq;
  peer.port = out[0].tcp.dst_port;
  peer.remote_port = out[0].tcp.src_port;
  peer.timestamps = o.timestamps && out[0].tcp.timestamps.has_value();
  PeerSegment synack = Syn(o);
  synack.tcp.flags = kSyn | kAck;
  synack.tcp.ack = iss_ + 1;
  if (synack.tcp.timestamps && out[0].tcp.timestamps) {
    synack.tcp.timestamps->tsecr = out[0].tcp.timestamps->tsval;
  }
  Send(synack);
  peer.seq += 1;
  peer.ack = iss_ + 1;
  out = Take();
  if (out.size() != 1 || out[0].tcp.flags != kAck ||
      out[0].tcp.seq != iss_ + 1 || out[0].tcp.ack != peer.seq) {
    ADD_FAILURE() << "expected the handshake ACK, got "
                  << ::testing::PrintToString(out);
  }
  EXPECT_EQ(s->state(), TcpState::kEstablished);
  notifier_.Dispatch();
  return s;
}

std::unique_ptr<TcpSocket> SegmentHarness::OpenPassive(
    const PeerSynOptions& o, const std::optional<ConnectionOptions>& ours,
    Duration rtt) {
  if (listener_ == nullptr) {
    listener_ = tcp_->Open(family());
    if (ours) {
      EXPECT_TRUE(listener_->SetOptions(*ours).ok());
    }
    EXPECT_TRUE(listener_->Bind({our_ip(), kOurPort}).ok());
    EXPECT_TRUE(listener_->Listen(16).ok());
  }
  peer.remote_port = kOurPort;
  Send(Syn(o));
  std::vector<OutSegment> out = Take();
  if (out.size() != 1 || out[0].tcp.flags != (kSyn | kAck) ||
      out[0].tcp.ack != peer.seq + 1) {
    ADD_FAILURE() << "expected one SYN-ACK, got "
                  << ::testing::PrintToString(out);
    return nullptr;
  }
  last_syn_ = out[0];
  iss_ = out[0].tcp.seq;
  peer.seq += 1;
  peer.ack = iss_ + 1;
  peer.timestamps = o.timestamps && out[0].tcp.timestamps.has_value();
  if (rtt > absl::ZeroDuration()) Advance(rtt);
  Send(Segment());
  auto a = listener_->Accept();
  if (!a.ok()) {
    ADD_FAILURE() << "Accept: " << a.status();
    return nullptr;
  }
  EXPECT_EQ((*a)->state(), TcpState::kEstablished);
  // The stack may announce its (now scaled) window at once; anything else
  // is a failure. tcp_handshake_test checks that nothing is sent at all.
  out = Take();
  if (!out.empty() &&
      (out.size() != 1 || out[0].tcp.flags != kAck ||
       !out[0].payload.empty() || out[0].tcp.ack != peer.seq)) {
    ADD_FAILURE() << "unexpected segments after the handshake: "
                  << ::testing::PrintToString(out);
  }
  notifier_.Dispatch();
  return std::move(*a);
}

}  // namespace netstack::tcp::testing
