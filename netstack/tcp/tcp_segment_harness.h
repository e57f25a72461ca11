// Segment-level TCP behaviour tests (gVisor's "testbench" / packetimpact
// idea, on a fake clock): ONE netstack Stack + TcpLayer sits on a
// stack::FakeLink, and the test plays the peer by hand. It builds
// Ethernet + IPv4/IPv6 + TCP frames from a template segment whose fields it
// overrides, moves time forward (every timer runs at its own deadline),
// and checks the segments the stack sent with composable matchers:
//
//   SegmentHarness h;
//   auto sock = h.OpenActive();                    // SYN, SYN-ACK, ACK
//   ASSERT_TRUE(sock->Write(Bytes(100)).ok());
//   h.Poll();
//   EXPECT_THAT(h.Take(), ElementsAre(Tcp(Flags(kAck | kPsh),
//                                         Seq(h.iss() + 1), PayloadLen(100))));
//   h.Send(h.Segment().Ack(h.iss() + 101));        // the peer acks it
//
// Neighbour resolution is answered for the test: the peer's ARP/NDP
// entries are primed at start-up and every ARP request or Neighbor
// Solicitation the stack sends later is answered at once, so only TCP
// segments (and any other IP traffic, in other_frames) reach the test.
#ifndef NETSTACK_TCP_TCP_SEGMENT_HARNESS_H_
#define NETSTACK_TCP_TCP_SEGMENT_HARNESS_H_

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "netstack/base/time.h"
#include "netstack/buffer/chunk.h"
#include "netstack/buffer/packet.h"
#include "netstack/stack/counters.h"
#include "netstack/stack/fake_link.h"
#include "netstack/stack/stack.h"
#include "netstack/tcp/tcp_layer.h"
#include "netstack/tcp/tcp_socket.h"
#include "netstack/transport/address.h"
#include "netstack/transport/notifier.h"
#include "netstack/wire/tcp.h"

namespace netstack::tcp::testing {

inline constexpr uint8_t kFin = wire::tcp_flag::kFin;
inline constexpr uint8_t kSyn = wire::tcp_flag::kSyn;
inline constexpr uint8_t kRst = wire::tcp_flag::kRst;
inline constexpr uint8_t kPsh = wire::tcp_flag::kPsh;
inline constexpr uint8_t kAck = wire::tcp_flag::kAck;

// One segment the stack sent, parsed from the frame on the link.
struct OutSegment {
  Instant at;  // fake time of the poll that emitted it
  transport::IpAddress src;
  transport::IpAddress dst;
  size_t ip_packet_len = 0;  // IP header + TCP header + payload
  wire::TcpRepr tcp;
  std::vector<uint8_t> payload;
  bool checksum_ok = false;

  bool has(uint8_t flag) const { return (tcp.flags & flag) != 0; }
  // SEG.SEQ + SEG.LEN.
  uint32_t end() const {
    return tcp.seq + static_cast<uint32_t>(payload.size()) +
           (has(kSyn) ? 1 : 0) + (has(kFin) ? 1 : 0);
  }
};
std::string FlagsString(uint8_t flags);
void PrintTo(const OutSegment& s, std::ostream* os);

// A segment the test (the peer) sends: a template with fields overridden
// through the chained setters. Ports and addresses come from the harness.
struct PeerSegment {
  wire::TcpRepr tcp;
  std::vector<uint8_t> payload;
  // Tampering, for malformed-segment tests.
  std::optional<uint8_t> data_offset;  // words written into byte 12
  bool corrupt_checksum = false;
  std::optional<std::vector<uint8_t>> raw_options;  // replaces the options
  bool truncate_to_header = false;  // IP payload: 20-byte TCP header only
  std::optional<uint16_t> src_port;  // overrides the peer port

  PeerSegment& Flags(uint8_t f) { tcp.flags = f; return *this; }
  PeerSegment& Seq(uint32_t s) { tcp.seq = s; return *this; }
  PeerSegment& Ack(uint32_t a) { tcp.ack = a; return *this; }
  PeerSegment& Window(uint16_t w) { tcp.window = w; return *this; }
  // `n` bytes of a pattern that depends on the sequence number.
  PeerSegment& Data(size_t n);
  PeerSegment& Payload(std::vector<uint8_t> p) {
    payload = std::move(p);
    return *this;
  }
  PeerSegment& Mss(std::optional<uint16_t> m) { tcp.mss = m; return *this; }
  PeerSegment& WindowScale(std::optional<uint8_t> s) {
    tcp.window_scale = s;
    return *this;
  }
  PeerSegment& SackPermitted(bool on) {
    tcp.sack_permitted = on;
    return *this;
  }
  PeerSegment& Timestamps(uint32_t tsval, uint32_t tsecr) {
    tcp.timestamps = wire::TcpTimestamps{tsval, tsecr};
    return *this;
  }
  PeerSegment& NoTimestamps() { tcp.timestamps.reset(); return *this; }
  PeerSegment& Sack(std::initializer_list<wire::TcpSackBlock> blocks);
  PeerSegment& DataOffset(uint8_t words) { data_offset = words; return *this; }
  PeerSegment& BadChecksum() { corrupt_checksum = true; return *this; }
  PeerSegment& RawOptions(std::vector<uint8_t> o) {
    raw_options = std::move(o);
    return *this;
  }
  PeerSegment& SrcPort(uint16_t p) { src_port = p; return *this; }
};

// The pattern byte at sequence number `seq` (what PeerSegment::Data and
// harness Bytes() use), so a reader can check what it got.
inline uint8_t PatternByte(uint32_t seq) {
  return static_cast<uint8_t>((seq * 2654435761u) >> 24);
}
std::vector<uint8_t> Bytes(size_t n, uint8_t first = 0);

// What the peer offers in its SYN or SYN-ACK.
struct PeerSynOptions {
  std::optional<uint16_t> mss = 1460;
  std::optional<uint8_t> window_scale = 7;
  bool sack = true;
  bool timestamps = true;
  uint16_t window = 65535;  // unscaled in a SYN (RFC 7323 2.2)
};

struct HarnessOptions {
  bool v6 = false;
  uint32_t mtu = 1500;
  // The link's GSO limit (0: every packet fits the MTU). With GSO the
  // stack sends super-segments, which the test sees whole.
  uint32_t gso_max_size = 0;
  // LinkCapabilities::tx_checksum_offload: single segments then leave
  // with only the pseudo-header sum in their checksum field.
  bool tx_checksum_offload = false;
  TcpLayerOptions tcp;
};

class SegmentHarness {
 public:
  static constexpr uint16_t kOurPort = 5000;     // listeners bind it
  static constexpr uint16_t kPeerPort = 40000;
  static constexpr uint32_t kPeerIsn = 0xfffff000u;  // wraps soon

  explicit SegmentHarness(const HarnessOptions& options = {});
  ~SegmentHarness();
  SegmentHarness(const SegmentHarness&) = delete;
  SegmentHarness& operator=(const SegmentHarness&) = delete;

  TcpLayer& tcp() { return *tcp_; }
  stack::Stack& stack() { return *stack_; }
  transport::Notifier& notifier() { return notifier_; }
  stack::FakeLink& link() { return *link_; }
  buffer::ChunkPool& chunks() { return chunks_; }
  Instant now() const { return now_; }
  bool v6() const { return options_.v6; }
  transport::IpAddress our_ip() const;
  transport::IpAddress peer_ip() const;
  transport::SocketAddress our_address() const { return {our_ip(), kOurPort}; }
  transport::SocketAddress peer_address() const {
    return {peer_ip(), kPeerPort};
  }
  transport::Family family() const {
    return options_.v6 ? transport::Family::kIpv6 : transport::Family::kIpv4;
  }
  uint64_t Drops(stack::DropReason r) const {
    return stack_->counters().drop(r);
  }

  // --- the peer's side of the connection (the template's fields) ---
  struct Peer {
    uint16_t port = kPeerPort;       // the peer's port (source of ours)
    uint16_t remote_port = kOurPort;  // the stack's port
    uint32_t seq = kPeerIsn;  // next sequence number the peer sends
    uint32_t ack = 0;         // what the peer acknowledges
    uint16_t window = 65535;  // raw window field
    bool timestamps = false;  // send TSopt on every segment
    uint32_t ts_recent = 0;   // newest TSval the stack sent (echoed)
    uint32_t ts_base = 5'000'000;  // peer clock at harness start (ms)
  } peer;
  // The peer's TSval now (a 1 ms clock).
  uint32_t PeerTsval() const;
  // Template: ACK, peer.seq, peer.ack, peer.window, timestamps if on.
  PeerSegment Segment() const;
  // A SYN (no ACK) from the peer with `o`, seq = peer.seq.
  PeerSegment Syn(const PeerSynOptions& o = {}) const;

  // Builds the Ethernet frame for `s` (checksums filled unless tampered).
  std::vector<uint8_t> Frame(const PeerSegment& s) const;
  // An ICMP (IPv4) or ICMPv6 error from the peer's address about `about`,
  // a segment the stack sent: `type`/`code` as on the wire, `info` the
  // 32-bit field after the checksum (the next-hop MTU of fragmentation
  // needed in its low 16 bits, the MTU of Packet Too Big). The invoking
  // datagram quotes `about`'s IP header and first 8 TCP bytes, with its
  // sequence number replaced by `seq` if given.
  std::vector<uint8_t> IcmpErrorFrame(const OutSegment& about, uint8_t type,
                                      uint8_t code, uint32_t info = 0,
                                      std::optional<uint32_t> seq = {}) const;
  // Ethernet + IP (peer to us, the harness's family) around `l4`.
  std::vector<uint8_t> PeerIpFrame(uint8_t protocol,
                                   const std::vector<uint8_t>& l4) const;
  // Injects one frame and polls (the end of a receive batch).
  void Send(const PeerSegment& s);
  // Injects all frames in ONE FakeLink::Inject call (one receive batch),
  // then polls.
  void SendBatch(const std::vector<PeerSegment>& segs);
  void InjectFrame(const std::vector<uint8_t>& frame);
  // The peer sends `n` bytes at peer.seq (which advances).
  void SendData(size_t n);
  // The peer acknowledges `ack` (peer.ack is set to it).
  void SendAck(uint32_t ack);

  // Writes `n` bytes on `s`, lets them out, and `rtt` later the peer
  // acknowledges everything: an RTT sample of `rtt` for the stack.
  // Expects the data to go out at once; returns the segments it took.
  std::vector<OutSegment> WriteAndAck(TcpSocket& s, size_t n, Duration rtt);

  // --- time ---
  // Runs the notifier, the stack and the TCP layer at now(), and collects
  // what was sent.
  void Poll();
  Instant NextDeadline() const;
  // Moves to `t`, running every timer due before it at its own deadline.
  void AdvanceTo(Instant t);
  void Advance(Duration d) { AdvanceTo(now_ + d); }
  // Jumps to the next deadline (if it comes within `limit`) and polls.
  // Returns false if nothing was due.
  bool RunToNextDeadline(Duration limit = absl::Hours(1));
  // Advances deadline by deadline until a segment is sent or `limit`
  // passes; true if something was sent.
  bool AdvanceUntilSent(Duration limit = absl::Seconds(600));

  // --- what the stack sent ---
  // TCP segments sent since the last Take(), oldest first.
  std::vector<OutSegment> Take();
  const std::vector<OutSegment>& pending() const { return out_; }
  // Frames that were neither TCP nor ARP/NDP (ICMP errors...).
  std::vector<std::vector<uint8_t>> other_frames;
  // Highest SEG.SEQ + SEG.LEN the stack has sent (0 before anything).
  uint32_t snd_max() const { return snd_max_; }

  // --- handshakes (each expects exact segments and fails the test if the
  // stack sends something else) ---
  // Our socket connects to the peer; the peer answers the SYN with a
  // SYN-ACK offering `o`; returns the socket in ESTABLISHED. The SYN and
  // the handshake ACK are in last_syn() / Take()n away.
  std::unique_ptr<TcpSocket> OpenActive(
      const PeerSynOptions& o = {},
      const std::optional<ConnectionOptions>& ours = std::nullopt);
  // A listener on kOurPort (kept by the harness), the peer's SYN with `o`,
  // the SYN-ACK, the final ACK, and Accept().
  // `rtt`: how long the peer takes to answer the SYN-ACK.
  std::unique_ptr<TcpSocket> OpenPassive(
      const PeerSynOptions& o = {},
      const std::optional<ConnectionOptions>& ours = std::nullopt,
      Duration rtt = absl::ZeroDuration());
  TcpSocket* listener() { return listener_.get(); }
  std::unique_ptr<TcpSocket>& listener_ptr() { return listener_; }
  // The stack's ISS (from its SYN or SYN-ACK in Open*).
  uint32_t iss() const { return iss_; }
  const OutSegment& last_syn() const { return last_syn_; }

 private:
  // Reads what the link sent; true if it injected neighbour answers.
  bool Collect();
  void AnswerNeighbour(const std::vector<uint8_t>& frame,
                       std::vector<std::vector<uint8_t>>& answers);

  HarnessOptions options_;
  buffer::ChunkPool chunks_{16384};
  buffer::PacketPool packets_{16384};
  std::unique_ptr<stack::FakeLink> link_;
  std::unique_ptr<stack::Stack> stack_;
  transport::Notifier notifier_;
  std::unique_ptr<TcpLayer> tcp_;
  std::unique_ptr<TcpSocket> listener_;
  Instant start_;
  Instant now_;
  std::vector<OutSegment> out_;
  uint32_t snd_max_ = 0;
  bool snd_max_set_ = false;
  uint32_t iss_ = 0;
  OutSegment last_syn_;
};

// --- matchers on OutSegment ---
// Tcp(m...) is AllOf(m...), to read like gVisor's checker.TCP(...).
template <typename... M>
auto Tcp(M&&... m) {
  return ::testing::AllOf(std::forward<M>(m)...);
}

MATCHER_P(Flags, f, "flags are " + FlagsString(f)) {
  *result_listener << "flags " << FlagsString(arg.tcp.flags);
  return arg.tcp.flags == f;
}
MATCHER_P(FlagsSet, f, "has flags " + FlagsString(f)) {
  *result_listener << "flags " << FlagsString(arg.tcp.flags);
  return (arg.tcp.flags & f) == f;
}
MATCHER_P(FlagsClear, f, "has none of " + FlagsString(f)) {
  *result_listener << "flags " << FlagsString(arg.tcp.flags);
  return (arg.tcp.flags & f) == 0;
}
MATCHER_P(Seq, s, "seq " + std::to_string(static_cast<uint32_t>(s))) {
  *result_listener << "seq " << arg.tcp.seq << " (" << std::showpos
                   << static_cast<int64_t>(arg.tcp.seq) -
                          static_cast<int64_t>(static_cast<uint32_t>(s))
                   << std::noshowpos << ")";
  return arg.tcp.seq == static_cast<uint32_t>(s);
}
MATCHER_P(Ack, a, "ack " + std::to_string(static_cast<uint32_t>(a))) {
  *result_listener << "ack " << arg.tcp.ack;
  return arg.tcp.ack == static_cast<uint32_t>(a) &&
         (arg.tcp.flags & wire::tcp_flag::kAck) != 0;
}
MATCHER_P(Window, w, "window field " + std::to_string(w)) {
  *result_listener << "window field " << arg.tcp.window;
  return arg.tcp.window == w;
}
MATCHER_P(PayloadLen, n, "payload of " + std::to_string(n) + " bytes") {
  *result_listener << "payload of " << arg.payload.size() << " bytes";
  return arg.payload.size() == static_cast<size_t>(n);
}
MATCHER_P(HasMss, m, "MSS option " + std::to_string(m)) {
  if (!arg.tcp.mss) {
    *result_listener << "no MSS option";
    return false;
  }
  *result_listener << "MSS " << *arg.tcp.mss;
  return *arg.tcp.mss == m;
}
MATCHER(NoMss, "no MSS option") { return !arg.tcp.mss.has_value(); }
MATCHER_P(WindowScale, s, "window scale option " + std::to_string(s)) {
  if (!arg.tcp.window_scale) {
    *result_listener << "no window scale option";
    return false;
  }
  *result_listener << "window scale " << int{*arg.tcp.window_scale};
  return *arg.tcp.window_scale == s;
}
MATCHER(NoWindowScale, "no window scale option") {
  return !arg.tcp.window_scale.has_value();
}
MATCHER(SackPermitted, "SACK-permitted") { return arg.tcp.sack_permitted; }
MATCHER(NoSackPermitted, "no SACK-permitted") {
  return !arg.tcp.sack_permitted;
}
MATCHER(HasTimestamps, "timestamps option") {
  return arg.tcp.timestamps.has_value();
}
MATCHER(NoTimestamps, "no timestamps option") {
  return !arg.tcp.timestamps.has_value();
}
MATCHER_P(TsEcr, e, "TSecr " + std::to_string(e)) {
  if (!arg.tcp.timestamps) {
    *result_listener << "no timestamps";
    return false;
  }
  *result_listener << "TSecr " << arg.tcp.timestamps->tsecr;
  return arg.tcp.timestamps->tsecr == static_cast<uint32_t>(e);
}
MATCHER(NoSack, "no SACK blocks") { return arg.tcp.sack_count == 0; }
// SackBlocks(ElementsAre(Block(l, r), ...)).
MATCHER_P(SackBlocks, m, "SACK blocks " +
                             ::testing::DescribeMatcher<
                                 std::vector<wire::TcpSackBlock>>(m)) {
  std::vector<wire::TcpSackBlock> b(arg.tcp.sack_blocks.begin(),
                                    arg.tcp.sack_blocks.begin() +
                                        arg.tcp.sack_count);
  return ::testing::ExplainMatchResult(m, b, result_listener);
}
inline wire::TcpSackBlock Block(uint32_t l, uint32_t r) { return {l, r}; }
MATCHER_P(SentAt, t, "sent at " + absl::FormatTime(t)) {
  *result_listener << "sent at " << absl::FormatTime(arg.at);
  return arg.at == t;
}
MATCHER(ChecksumOk, "valid TCP checksum") { return arg.checksum_ok; }
MATCHER_P(PayloadEq, p, "payload equal to the expected bytes") {
  return arg.payload == p;
}

}  // namespace netstack::tcp::testing

namespace netstack::wire {
void PrintTo(const TcpSackBlock& b, std::ostream* os);
}  // namespace netstack::wire

#endif  // NETSTACK_TCP_TCP_SEGMENT_HARNESS_H_
