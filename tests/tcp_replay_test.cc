// Replays real captures of the Linux kernel talking to netstackd
// (tests/testdata/tcp_*.pcap, made by tests/testdata/make_tcp_captures.sh)
// into a fresh netstack stack and checks that the stack answers exactly as
// netstackd's stack did, segment by segment and field by field.
//
// The setup mirrors netstackd as the capture's X.netstackd.txt records it
// (its command line): the same MAC, address and MTU, the same TCP/UDP
// layer options and pool sizes, listeners on the echo and discard ports
// that read and write exactly like netstackd's services, and, when
// netstackd ran with faults, the same link::FaultInjector with the same
// profile and seed between the link and the stack:
//
//   capture's kernel frames -> FakeLink -> [FaultInjector] -> Recorder -> Stack
//   compared with capture's   <- FakeLink <- [FaultInjector] <- Recorder <-
//   netstackd frames
//
// netstackd's --pcap sniffer sits between its AF_PACKET link and its fault
// injector, so a capture holds every frame the kernel sent (including
// those the injector then dropped) and only the frames of netstackd that
// the injector let through. The FakeLink here is at the sniffer's place:
// all of the kernel's frames go in, and what comes out of the injector is
// what the capture must show. The injector is deterministic (one random
// stream per direction and effect from the seed, one loss draw per frame
// in arrival order), so it drops the same frames as netstackd's did; the
// Recorder between injector and stack shows which ones, and the fault
// counters are checked against the ones netstackd printed at exit.
//
// Time: the fake clock follows the capture. netstackd stamps every frame
// with the `now` of its event-loop turn (inbound at delivery, outbound at
// transmit), so the capture splits into turns: frames with one timestamp,
// inbound ones (recorded when the batch was delivered) before outbound
// ones. Each turn is replayed as netstackd ran it: the turn's inbound
// frames are delivered as one batch at its time, then the stack's and the
// link's timers if due, the services' callbacks (Notifier::Dispatch),
// TcpLayer::Poll and Stack::Flush, all at that time; what leaves the link
// must be the turn's outbound frames. So the ACK decisions made once per
// batch, the delayed-ACK and retransmission timers and every RTT sample
// see the same batches at the same instants as in netstackd.
//
// What may differ, and how it is handled (nothing else is tolerated; every
// other byte of every frame is compared):
//   - The stack's ISN: netstackd keyed its ISNs from getrandom. Our
//     sequence numbers are compared relative to our ISN; the kernel's
//     acknowledgment numbers (and SACK blocks, if any) are moved from the
//     captured stack's sequence space into ours before injection.
//   - The stack's TSval: TSval = clock in ms + a per-connection offset
//     derived from the ISN, so it differs by a constant. Both SYN-ACKs are
//     sent at the same (captured) instant, so the constant is learned from
//     them and every later TSval must differ by exactly it. The kernel's
//     TSecr (an echo of the stack's TSval) is moved by the same constant
//     before injection, so PAWS and timestamp RTT samples see what
//     netstackd saw. The stack's TSecr echoes the kernel's TSval, which is
//     injected unchanged, so it is compared as is.
//   - The TCP checksum, which covers the two fields above: the expected
//     frame is rewritten (sequence number, TSval) and its checksum
//     recomputed; both must be valid.
//   - Time below a microsecond: pcap timestamps are microseconds, netstackd's
//     clock had nanoseconds. Millisecond TSvals are unaffected (flooring to
//     microseconds keeps the millisecond); RTT samples, and so timer
//     deadlines, can differ by under a microsecond, which could move a
//     timer into another turn only if its deadline fell within a few
//     microseconds of a turn's time (it would show up as a mismatch).
//   - Turns that left no trace: netstackd also ran turns that received and
//     sent nothing (a wakeup for a timer that had nothing to send). They
//     are not replayed; a timer that fired in one runs in the next
//     captured turn instead. The test reports how many turns that brought
//     frames began with a timer overdue (0 in the shipped captures); a
//     change in what is sent would fail the comparison.
//
// A change in netstack that changes what the stack sends in these
// captures fails this test by design (it found, for one, the D-SACK
// blocks of commit 947d2a3 in a capture taken before it). If the change
// is intended, rerun tests/testdata/make_tcp_captures.sh with a netstackd
// built from the changed tree and commit the new captures with it.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "link/fault_injector.h"
#include "netstack/buffer/chunk.h"
#include "netstack/buffer/packet.h"
#include "netstack/link/link_endpoint.h"
#include "netstack/stack/fake_link.h"
#include "netstack/stack/route_table.h"
#include "netstack/stack/stack.h"
#include "netstack/tcp/tcp_layer.h"
#include "netstack/tcp/tcp_socket.h"
#include "netstack/transport/address.h"
#include "netstack/transport/errors.h"
#include "netstack/transport/notifier.h"
#include "netstack/udp/udp_layer.h"
#include "netstack/wire/bytes.h"
#include "netstack/wire/checksum.h"
#include "netstack/wire/ipv4.h"
#include "netstack/wire/tcp.h"
#include "tests/pcap_fixture.h"

namespace netstack::testing {
namespace {

// The kernel's end of the veth pair in make_tcp_captures.sh; netstackd's
// MAC comes from its --mac flag.
constexpr char kKernelMac[] = "02:00:00:00:00:01";
constexpr size_t kEthHeaderLen = 14;
constexpr uint16_t kEthIpv4 = 0x0800;
constexpr uint8_t kTcpProtocol = 6;

// What X.netstackd.txt says about the run: netstackd's command line and
// the counters it printed at exit.
struct NetstackdRun {
  std::string command;
  std::string nic = "eth0";  // netstackd names the NIC after the link
  wire::MacAddress mac;
  std::vector<stack::Ipv4Cidr> addrs;
  uint32_t mtu = 1500;  // a veth's default; --mtu overrides
  uint16_t echo_port = 0;
  uint16_t discard_port = 0;
  double loss = 0;
  bool fault_ingress = false;
  uint64_t seed = 1;                // netstackd's default
  size_t fault_queue_limit = 1000;  // netstackd's default
  std::map<std::string, uint64_t> counters;
};

// "name value" lines and "prefix: a=1 b=2" lines (as "prefix.a"), as
// netstackd prints its counters (and tests/interop/interop_util.py reads
// them).
void ParseCounterLine(std::string_view line,
                      std::map<std::string, uint64_t>& out) {
  const std::string l(line);
  if (const size_t colon = l.find(": "); colon != std::string::npos) {
    const std::string prefix = l.substr(0, colon);
    for (absl::string_view kv :
         absl::StrSplit(l.substr(colon + 2), ' ', absl::SkipEmpty())) {
      std::pair<std::string, std::string> p = absl::StrSplit(kv, '=');
      uint64_t v;
      if (absl::SimpleAtoi(p.second, &v)) out[prefix + "." + p.first] = v;
    }
    return;
  }
  std::pair<std::string, std::string> p = absl::StrSplit(l, ' ');
  uint64_t v;
  if (!p.first.empty() && absl::SimpleAtoi(p.second, &v)) out[p.first] = v;
}

std::map<std::string, uint64_t> ParseCounters(const std::string& text) {
  std::map<std::string, uint64_t> out;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ParseCounterLine(std::string_view(line.data(), line.size()), out);
  }
  return out;
}

// Reads X.netstackd.txt. Refuses flags that would change the stack's
// behaviour in a way this replay does not reproduce.
absl::StatusOr<NetstackdRun> ReadNetstackdRun(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  NetstackdRun run;
  std::string line;
  std::string counters;
  while (std::getline(in, line)) {
    if (line.rfind("# netstackd ", 0) == 0) {
      run.command = line.substr(2);
    } else if (!line.empty() && line[0] != '#') {
      counters += line + "\n";
    }
  }
  run.counters = ParseCounters(counters);
  if (run.command.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": no '# netstackd ...' command line"));
  }
  std::vector<std::string> args =
      absl::StrSplit(run.command, ' ', absl::SkipEmpty());
  bool have_mac = false;
  for (size_t i = 1; i < args.size(); ++i) {
    std::string name = args[i];
    std::string value;
    if (name.rfind("--", 0) != 0) {
      return absl::InvalidArgumentError(absl::StrCat("stray argument ", name));
    }
    name = name.substr(2);
    if (const size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    std::replace(name.begin(), name.end(), '-', '_');
    const bool boolean = name == "fault_ingress";
    if (!boolean && value.empty()) {
      if (i + 1 >= args.size()) {
        return absl::InvalidArgumentError(
            absl::StrCat("--", name, " needs a value"));
      }
      value = args[++i];
    }
    int port = 0;
    if (name == "packet") {
      run.nic = value;  // the FakeLink stands in for the link
    } else if (name == "netns" || name == "pcap") {
      // Where the link lived and where the capture went.
    } else if (name == "fault_queue_limit") {
      if (!absl::SimpleAtoi(value, &run.fault_queue_limit)) {
        return absl::InvalidArgumentError("bad --fault_queue_limit");
      }
    } else if (name == "mac") {
      auto mac = wire::MacAddress::Parse(value);
      if (!mac) return absl::InvalidArgumentError("bad --mac");
      run.mac = *mac;
      have_mac = true;
    } else if (name == "addr") {
      for (absl::string_view a : absl::StrSplit(value, ',')) {
        auto cidr = stack::ParseIpv4Cidr(std::string(a));
        if (!cidr) return absl::InvalidArgumentError("bad --addr");
        run.addrs.push_back(*cidr);
      }
    } else if (name == "mtu") {
      if (!absl::SimpleAtoi(value, &run.mtu)) {
        return absl::InvalidArgumentError("bad --mtu");
      }
    } else if (name == "echo_port" || name == "discard_port") {
      if (!absl::SimpleAtoi(value, &port) || port <= 0 || port > 65535) {
        return absl::InvalidArgumentError(absl::StrCat("bad --", name));
      }
      (name == "echo_port" ? run.echo_port : run.discard_port) =
          static_cast<uint16_t>(port);
    } else if (name == "loss") {
      if (!absl::SimpleAtod(value, &run.loss)) {
        return absl::InvalidArgumentError("bad --loss");
      }
    } else if (name == "fault_ingress") {
      run.fault_ingress = value.empty() || value == "true";
    } else if (name == "seed") {
      if (!absl::SimpleAtoi(value, &run.seed)) {
        return absl::InvalidArgumentError("bad --seed");
      }
    } else {
      // --addr6, --gateway, --delay, --reorder, --duplicate, --corrupt,
      // --http-root ...: not reproduced here.
      return absl::InvalidArgumentError(
          absl::StrCat("the replay does not reproduce netstackd's --", name));
    }
  }
  if (!have_mac || run.addrs.empty()) {
    return absl::InvalidArgumentError("need --mac and --addr");
  }
  return run;
}

std::vector<uint8_t> Flatten(const buffer::PacketBuffer& p) {
  std::vector<uint8_t> frame(p.headers().data().begin(),
                             p.headers().data().end());
  for (const auto& v : p.payload()) {
    frame.insert(frame.end(), v.bytes().begin(), v.bytes().end());
  }
  return frame;
}

// Sits directly above the stack: records what the stack really received
// (after the fault injector) and what it really sent (before it).
class Recorder final : public link::LinkEndpoint, public link::LinkReceiver {
 public:
  explicit Recorder(link::LinkEndpoint* inner) : inner_(inner) {
    inner_->Attach(this);
  }
  ~Recorder() override { inner_->Attach(nullptr); }

  link::LinkCapabilities Capabilities() const override {
    return inner_->Capabilities();
  }
  void Attach(link::LinkReceiver* receiver) override { receiver_ = receiver; }
  size_t Transmit(buffer::PacketChain& chain, Instant now) override {
    for (const buffer::PacketBuffer& p : chain) sent.push_back(Flatten(p));
    return inner_->Transmit(chain, now);
  }
  void DeliverFrames(std::span<link::InboundFrame> frames,
                     Instant now) override {
    for (const link::InboundFrame& f : frames) {
      received.emplace_back(f.frame.bytes().begin(), f.frame.bytes().end());
    }
    if (receiver_ != nullptr) receiver_->DeliverFrames(frames, now);
  }
  Instant NextDeadline() const override { return inner_->NextDeadline(); }
  void Poll(Instant now) override { inner_->Poll(now); }
  link::LinkStats Stats() const override { return inner_->Stats(); }
  std::string Name() const override { return "recorder"; }

  std::vector<std::vector<uint8_t>> sent;      // by the stack
  std::vector<std::vector<uint8_t>> received;  // by the stack

 private:
  link::LinkEndpoint* const inner_;
  link::LinkReceiver* receiver_ = nullptr;
};

// Stand-ins for netstackd's echo and discard services
// (tools/netstackd/services/{echo,discard}_service.cc, which are visible
// to tools/netstackd only). They read and write exactly as those do, since
// that decides when windows open and what data goes out: listeners on
// 0.0.0.0 and [::] with backlog 1024; echo keeps one 64 KiB buffer, reads
// only when it is empty, writes it out before reading again, and at EOF
// closes; discard reads (64 KiB at a time) until it would block, and
// closes at EOF. Finished connections are freed after Dispatch, like the
// services' Sweep().
class Services {
 public:
  static constexpr size_t kBufferBytes = 64 << 10;

  Services(tcp::TcpLayer& tcp, uint16_t echo_port, uint16_t discard_port)
      : tcp_(tcp) {
    if (echo_port != 0) Listen(echo_port, /*echo=*/true);
    if (discard_port != 0) Listen(discard_port, /*echo=*/false);
  }

  void Sweep() { dead_.clear(); }
  uint64_t echo_bytes = 0;
  uint64_t discard_bytes = 0;
  uint64_t echo_connections = 0;
  uint64_t discard_connections = 0;
  uint64_t errors = 0;

 private:
  struct Conn {
    Services* services;
    bool echo;
    std::unique_ptr<tcp::TcpSocket> socket;
    std::unique_ptr<uint8_t[]> buffer{new uint8_t[kBufferBytes]};
    size_t head = 0;
    size_t tail = 0;
    bool eof = false;
    bool done = false;

    void OnEvent(uint32_t events) {
      if (done) return;
      if ((events & transport::event::kError) != 0 &&
          !socket->TakeError().ok()) {
        Finish(/*error=*/true);
        return;
      }
      Pump();
    }
    void Pump() {
      while (!done) {
        while (echo && head < tail) {
          absl::StatusOr<size_t> n = socket->Write(
              std::span<const uint8_t>(buffer.get() + head, tail - head));
          if (!n.ok()) {
            if (!transport::IsWouldBlock(n.status())) Finish(true);
            return;
          }
          head += *n;
          services->echo_bytes += *n;
        }
        head = tail = 0;
        if (eof) {
          Finish(false);
          return;
        }
        absl::StatusOr<size_t> n =
            socket->Read(std::span<uint8_t>(buffer.get(), kBufferBytes));
        if (!n.ok()) {
          if (!transport::IsWouldBlock(n.status())) Finish(true);
          return;
        }
        if (*n == 0) {
          if (echo) {
            eof = true;
          } else {
            Finish(false);
            return;
          }
        } else if (echo) {
          tail = *n;
        } else {
          services->discard_bytes += *n;
        }
      }
    }
    void Finish(bool error) {
      done = true;
      if (error) ++services->errors;
      socket->Close();
      services->Retire(this);
    }
  };

  void Listen(uint16_t port, bool echo) {
    for (transport::Family family :
         {transport::Family::kIpv4, transport::Family::kIpv6}) {
      transport::SocketAddress any;
      any.ip = family == transport::Family::kIpv4
                   ? transport::IpAddress(wire::Ipv4Address())
                   : transport::IpAddress(wire::Ipv6Address());
      any.port = port;
      std::unique_ptr<tcp::TcpSocket> l = tcp_.Open(family);
      EXPECT_TRUE(l->Bind(any).ok());
      EXPECT_TRUE(l->Listen(1024).ok());
      tcp::TcpSocket* raw = l.get();
      l->set_callback([this, raw, echo](uint32_t) {
        while (true) {
          absl::StatusOr<std::unique_ptr<tcp::TcpSocket>> s = raw->Accept();
          if (!s.ok()) {
            (void)raw->TakeError();
            return;
          }
          ++(echo ? echo_connections : discard_connections);
          auto c = std::make_unique<Conn>();
          c->services = this;
          c->echo = echo;
          c->socket = std::move(*s);
          Conn* cp = c.get();
          live_.push_back(std::move(c));
          cp->socket->set_callback([cp](uint32_t ev) { cp->OnEvent(ev); });
          cp->Pump();  // data may have arrived before the callback was set
        }
      });
      listeners_.push_back(std::move(l));
    }
  }

  void Retire(Conn* c) {
    for (auto it = live_.begin(); it != live_.end(); ++it) {
      if (it->get() == c) {
        dead_.push_back(std::move(*it));
        live_.erase(it);
        return;
      }
    }
  }

  tcp::TcpLayer& tcp_;
  std::vector<std::unique_ptr<tcp::TcpSocket>> listeners_;
  std::vector<std::unique_ptr<Conn>> live_;
  std::vector<std::unique_ptr<Conn>> dead_;
};

// --- Frames
// -------------------------------------------------------------------

// An Ethernet + IPv4 + TCP frame, parsed; offsets into the frame's bytes.
struct TcpFrame {
  wire::Ipv4Repr ip;
  wire::TcpRepr tcp;
  size_t tcp_offset = 0;
  size_t tcp_len = 0;  // header + payload
  size_t header_len = 0;
  bool ip_checksum_ok = false;
  bool tcp_checksum_ok = false;
  std::vector<uint8_t> options;  // the raw option area
  std::vector<uint8_t> payload;
  // Offsets (from the frame start) of the TSval and TSecr fields and of
  // each SACK block's left edge, for rewriting.
  std::optional<size_t> tsval_at;
  std::vector<size_t> sack_at;
};

std::optional<TcpFrame> ParseTcpFrame(std::span<const uint8_t> f) {
  if (f.size() < kEthHeaderLen + 20 || wire::LoadBe16(&f[12]) != kEthIpv4) {
    return std::nullopt;
  }
  TcpFrame out;
  const wire::Ipv4Packet ip4(f.subspan(kEthHeaderLen));
  if (wire::Ipv4Repr::Parse(ip4, out.ip) != wire::WireError::kOk ||
      out.ip.protocol != kTcpProtocol) {
    return std::nullopt;
  }
  out.ip_checksum_ok = ip4.HeaderChecksumValid();
  out.tcp_offset = kEthHeaderLen + out.ip.HeaderLen();
  out.tcp_len = out.ip.payload_len;
  if (out.tcp_offset + out.tcp_len > f.size()) return std::nullopt;
  const wire::TcpHeader h(f.subspan(out.tcp_offset, out.tcp_len));
  if (wire::TcpRepr::Parse(h, out.tcp) != wire::WireError::kOk) {
    return std::nullopt;
  }
  out.header_len = h.HeaderLen();
  out.tcp_checksum_ok = h.ChecksumValid(
      wire::Ipv4PseudoHeaderSum(out.ip.src, out.ip.dst, kTcpProtocol,
                                static_cast<uint32_t>(out.tcp_len)));
  out.options.assign(h.Options().begin(), h.Options().end());
  out.payload.assign(h.Payload().begin(), h.Payload().end());
  // Walk the (already validated) options for the fields we rewrite.
  for (size_t i = 0; i < out.options.size();) {
    const uint8_t kind = out.options[i];
    if (kind == 0) break;
    if (kind == 1) {
      ++i;
      continue;
    }
    const uint8_t len = out.options[i + 1];
    const size_t at = out.tcp_offset + 20 + i;
    if (kind == 8 && len == 10) out.tsval_at = at + 2;
    if (kind == 5) {
      for (size_t b = 2; b + 8 <= len; b += 8) out.sack_at.push_back(at + b);
    }
    i += len;
  }
  return out;
}

void Add32(std::vector<uint8_t>& f, size_t at, uint32_t delta) {
  wire::StoreBe32(&f[at], wire::LoadBe32(&f[at]) + delta);
}

void RefillTcpChecksum(std::vector<uint8_t>& f, const TcpFrame& t) {
  wire::MutableTcpHeader h(
      std::span<uint8_t>(f).subspan(t.tcp_offset, t.tcp_len));
  h.FillChecksum(wire::Ipv4PseudoHeaderSum(t.ip.src, t.ip.dst, kTcpProtocol,
                                           static_cast<uint32_t>(t.tcp_len)));
}

std::string Hex(std::span<const uint8_t> b) {
  std::string s;
  for (uint8_t c : b) absl::StrAppend(&s, absl::Hex(c, absl::kZeroPad2));
  return s;
}

std::string Summary(std::span<const uint8_t> f) {
  auto t = ParseTcpFrame(f);
  if (!t)
    return absl::StrCat(f.size(), "-byte non-TCP frame ",
                        Hex(f.first(std::min<size_t>(f.size(), 42))));
  std::string s =
      absl::StrFormat("%d>%d flags=0x%02x seq=%u ack=%u win=%u len=%u",
                      t->tcp.src_port, t->tcp.dst_port, t->tcp.flags,
                      t->tcp.seq, t->tcp.ack, t->tcp.window, t->payload.size());
  if (t->tcp.timestamps) {
    absl::StrAppend(&s, " ts=", t->tcp.timestamps->tsval, "/",
                    t->tcp.timestamps->tsecr);
  }
  for (uint8_t i = 0; i < t->tcp.sack_count; ++i) {
    absl::StrAppend(&s, " sack[", t->tcp.sack_blocks[i].left, ",",
                    t->tcp.sack_blocks[i].right, ")");
  }
  return s;
}

// --- The replay
// ---------------------------------------------------------------

struct Turn {
  Instant at;
  std::vector<size_t> in;   // capture indices (0-based) of kernel frames
  std::vector<size_t> out;  // ... of netstackd's frames
};

// Splits the capture into netstackd's event-loop turns (see the file
// comment): a new turn at a new timestamp, or when a kernel frame follows
// one of netstackd's at the same timestamp.
std::vector<Turn> SplitIntoTurns(const std::vector<CapturedFrame>& frames,
                                 const wire::MacAddress& kernel,
                                 const wire::MacAddress& ours) {
  std::vector<Turn> turns;
  for (size_t i = 0; i < frames.size(); ++i) {
    const auto& b = frames[i].bytes;
    EXPECT_GE(b.size(), kEthHeaderLen);
    if (b.size() < kEthHeaderLen) continue;
    const auto src = wire::MacAddress::FromBytes(&b[6]);
    const bool inbound = src == kernel;
    EXPECT_TRUE(inbound || src == ours)
        << "frame " << i + 1 << " is from neither the kernel nor netstackd";
    if (turns.empty() || turns.back().at != frames[i].timestamp ||
        (inbound && !turns.back().out.empty())) {
      turns.push_back(Turn{frames[i].timestamp, {}, {}});
    }
    (inbound ? turns.back().in : turns.back().out).push_back(i);
  }
  return turns;
}

// Per connection (keyed by the kernel's port): how to move numbers between
// the captured stack's spaces and the replayed stack's.
struct Translation {
  bool known = false;
  uint32_t isn_captured = 0;     // the stack's ISN in the capture
  uint32_t isn_replayed = 0;     // ... in the replay
  uint32_t isn_kernel = 0;       // the kernel's ISN (the same in both)
  uint32_t tsval0_captured = 0;  // the stack's TSval on its SYN-ACK
  uint32_t tsval0_replayed = 0;
  uint32_t seq_delta() const { return isn_replayed - isn_captured; }
  uint32_t ts_delta() const { return tsval0_replayed - tsval0_captured; }
};

struct ReplayResult {
  size_t frames = 0;
  size_t kernel_frames = 0;                   // injected
  size_t kernel_frames_delivered = 0;         // reached the stack
  std::vector<size_t> dropped_inbound;        // capture frame numbers (1-based)
  std::vector<std::string> dropped_outbound;  // sent by the stack, dropped
  size_t stack_frames_sent = 0;  // by the replayed stack, before faults
  size_t compared_frames = 0;    // captured netstackd frames matched
  size_t compared_segments = 0;  // ... of which TCP segments
  size_t sack_segments = 0;      // compared segments with SACK blocks
  size_t mismatches = 0;
  size_t turns = 0;
  size_t silent_timer_turns = 0;  // see Run()
};

class Replay {
 public:
  explicit Replay(const NetstackdRun& run)
      : run_(run), kernel_mac_(*wire::MacAddress::Parse(kKernelMac)) {
    link::LinkCapabilities caps;  // what PacketEndpoint reports on a veth
    caps.mtu = run.mtu;
    caps.mac = run.mac;
    auto fake = std::make_unique<stack::FakeLink>(chunks_, caps);
    wire_ = fake.get();
    if (run.loss > 0) {
      link::FaultInjectorOptions fo;  // as netstackd's Run() builds it
      fo.egress.loss = run.loss;
      if (run.fault_ingress) fo.ingress.loss = run.loss;
      fo.seed = run.seed;
      fo.queue_limit = run.fault_queue_limit;
      auto fi =
          link::FaultInjector::Create(std::move(fake), packets_, chunks_, fo);
      if (!fi.ok()) {
        ADD_FAILURE() << fi.status();
        std::abort();
      }
      faults_ = fi->get();
      lower_ = std::move(*fi);
    } else {
      lower_ = std::move(fake);
    }
    recorder_ = std::make_unique<Recorder>(lower_.get());
    stack_ = std::make_unique<stack::Stack>(stack::StackOptions{}, chunks_,
                                            packets_);
    auto nic = stack_->AddNic(recorder_.get(), run.nic);
    EXPECT_TRUE(nic.ok());
    for (const auto& a : run.addrs) {
      EXPECT_TRUE(stack_->AddAddress(*nic, a).ok());
    }
    // netstackd draws the seed from getrandom; any value does here, since
    // ISNs (and with them TSval offsets) are translated anyway.
    tcp::TcpLayerOptions tcp_options;
    tcp_options.seed = 0x5eed;
    tcp_ = std::make_unique<tcp::TcpLayer>(*stack_, chunks_, packets_,
                                           notifier_, tcp_options);
    udp_ = std::make_unique<udp::UdpLayer>(*stack_, chunks_, packets_,
                                           notifier_, 0x5eed);
    services_ =
        std::make_unique<Services>(*tcp_, run.echo_port, run.discard_port);
  }

  ~Replay() {
    services_.reset();
    udp_.reset();
    tcp_.reset();
    stack_.reset();
    recorder_.reset();
    lower_.reset();
  }

  // One event-loop turn of netstackd (main.cc: the link's batch, then
  // timers and pollers, then the turn-end hook).
  void RunTurn(Instant now, const std::vector<std::vector<uint8_t>>& in) {
    if (!in.empty()) {
      wire_->Inject(std::span<const std::vector<uint8_t>>(in), now);
    }
    if (stack_->NextDeadline() <= now) stack_->Poll(now);
    if (recorder_->NextDeadline() <= now) recorder_->Poll(now);
    notifier_.Dispatch();
    services_->Sweep();
    tcp_->Poll(now);
    stack_->Flush(now);
  }

  ReplayResult Run(const std::vector<CapturedFrame>& frames,
                   const TsharkTable* table);

  const NetstackdRun& run() const { return run_; }
  link::FaultInjector* faults() const { return faults_; }
  const Services& services() const { return *services_; }
  std::map<std::string, uint64_t> Counters() const {
    return ParseCounters(stack_->FormatCounters() + "\n" +
                         tcp_->FormatCounters());
  }

 private:
  // Moves a kernel frame's acknowledgment number, SACK blocks and TSecr
  // into the replayed stack's spaces.
  void TranslateInbound(std::vector<uint8_t>& f, size_t frame_number);
  // The captured netstackd frame as the replayed stack must send it.
  std::vector<uint8_t> Expected(const std::vector<uint8_t>& captured,
                                size_t frame_number);
  // Field-by-field comparison of one captured netstackd frame with the
  // replayed stack's; adds a failure (and counts) on any difference.
  void Compare(const std::vector<uint8_t>& captured,
               const std::vector<uint8_t>& replayed, size_t frame_number,
               Instant at, ReplayResult& result);

  // A time as tshark's frame.time_relative: seconds since the first frame.
  std::string Rel(Instant t) const {
    return absl::StrFormat("%.6f s", absl::ToDoubleSeconds(t - first_));
  }

  NetstackdRun run_;
  wire::MacAddress kernel_mac_;
  Instant first_;
  buffer::ChunkPool chunks_{1024};  // as netstackd
  buffer::PacketPool packets_{16384};
  stack::FakeLink* wire_ = nullptr;
  link::FaultInjector* faults_ = nullptr;
  std::unique_ptr<link::LinkEndpoint> lower_;
  std::unique_ptr<Recorder> recorder_;
  std::unique_ptr<stack::Stack> stack_;
  transport::Notifier notifier_;
  std::unique_ptr<tcp::TcpLayer> tcp_;
  std::unique_ptr<udp::UdpLayer> udp_;
  std::unique_ptr<Services> services_;
  std::map<uint16_t, Translation> conns_;
  size_t reported_ = 0;  // detailed mismatch reports so far
};

void Replay::TranslateInbound(std::vector<uint8_t>& f, size_t frame_number) {
  auto t = ParseTcpFrame(f);
  if (!t) return;  // ARP: nothing to translate
  Translation& x = conns_[t->tcp.src_port];
  if ((t->tcp.flags & wire::tcp_flag::kSyn) != 0 &&
      (t->tcp.flags & wire::tcp_flag::kAck) == 0) {
    x.isn_kernel = t->tcp.seq;
  }
  if ((t->tcp.flags & wire::tcp_flag::kAck) == 0) return;
  if (!x.known) {
    ADD_FAILURE() << "frame " << frame_number
                  << ": the kernel acknowledges before netstackd's SYN-ACK "
                     "was matched; cannot translate";
    return;
  }
  Add32(f, t->tcp_offset + 8, x.seq_delta());
  for (size_t at : t->sack_at) {
    Add32(f, at, x.seq_delta());
    Add32(f, at + 4, x.seq_delta());
  }
  if (t->tsval_at) Add32(f, *t->tsval_at + 4, x.ts_delta());
  RefillTcpChecksum(f, *t);
}

std::vector<uint8_t> Replay::Expected(const std::vector<uint8_t>& captured,
                                      size_t frame_number) {
  std::vector<uint8_t> f = captured;
  auto t = ParseTcpFrame(f);
  if (!t) return f;  // ARP: compared byte for byte
  const Translation& x = conns_[t->tcp.dst_port];
  if (!x.known) {
    ADD_FAILURE() << "frame " << frame_number << ": no translation yet";
    return f;
  }
  Add32(f, t->tcp_offset + 4, x.seq_delta());
  if (t->tsval_at) Add32(f, *t->tsval_at, x.ts_delta());
  RefillTcpChecksum(f, *t);
  return f;
}

void Replay::Compare(const std::vector<uint8_t>& captured,
                     const std::vector<uint8_t>& replayed, size_t frame_number,
                     Instant at, ReplayResult& result) {
  ++result.compared_frames;
  auto c = ParseTcpFrame(captured);
  auto r = ParseTcpFrame(replayed);
  std::vector<std::string> diffs;
  auto check = [&](const char* field, const auto& want, const auto& got) {
    if (!(want == got)) {
      std::ostringstream os;
      os << field << ": netstackd " << want << ", replay " << got;
      diffs.push_back(os.str());
    }
  };
  if (!c || !r) {
    // ARP (or anything else that is not TCP): byte for byte.
    check("non-TCP frame", Hex(captured), Hex(replayed));
  } else {
    ++result.compared_segments;
    if (c->tcp.sack_count > 0) ++result.sack_segments;
    Translation& x = conns_[c->tcp.dst_port];
    if (!x.known && (c->tcp.flags & wire::tcp_flag::kSyn) != 0 &&
        (r->tcp.flags & wire::tcp_flag::kSyn) != 0) {
      // The first SYN(-ACK) of the connection: learn the ISNs and, as both
      // were sent at this same instant, the TSval offset.
      x.known = true;
      x.isn_captured = c->tcp.seq;
      x.isn_replayed = r->tcp.seq;
      x.tsval0_captured = c->tcp.timestamps ? c->tcp.timestamps->tsval : 0;
      x.tsval0_replayed = r->tcp.timestamps ? r->tcp.timestamps->tsval : 0;
    }
    const uint32_t kisn = x.isn_kernel;
    // Ethernet and IP: exact.
    check("eth.dst", Hex(std::span(captured).first(6)),
          Hex(std::span(replayed).first(6)));
    check("eth.src", Hex(std::span(captured).subspan(6, 6)),
          Hex(std::span(replayed).subspan(6, 6)));
    check("ip.src", c->ip.src.ToString(), r->ip.src.ToString());
    check("ip.dst", c->ip.dst.ToString(), r->ip.dst.ToString());
    check("ip.ttl", int{c->ip.ttl}, int{r->ip.ttl});
    check("ip.dsfield", int{c->ip.dscp_ecn}, int{r->ip.dscp_ecn});
    check("ip.id", c->ip.ident, r->ip.ident);
    check("ip.df", c->ip.dont_fragment, r->ip.dont_fragment);
    check("ip.len", c->ip.TotalLen(), r->ip.TotalLen());
    check("ip.checksum_ok", c->ip_checksum_ok, r->ip_checksum_ok);
    // TCP.
    check("tcp.srcport", c->tcp.src_port, r->tcp.src_port);
    check("tcp.dstport", c->tcp.dst_port, r->tcp.dst_port);
    check("tcp.flags", int{c->tcp.flags}, int{r->tcp.flags});
    check("tcp.ae", c->tcp.ae, r->tcp.ae);
    // Relative to each stack's own ISN.
    check("tcp.seq (relative)", c->tcp.seq - x.isn_captured,
          r->tcp.seq - x.isn_replayed);
    // The kernel's sequence space is the same in both (its frames are
    // injected as captured), so the ack is exact; shown relative.
    check("tcp.ack (relative)", c->tcp.ack - kisn, r->tcp.ack - kisn);
    check("tcp.window", c->tcp.window, r->tcp.window);
    check("tcp.urgent", c->tcp.urgent_pointer, r->tcp.urgent_pointer);
    check("tcp.hdr_len", c->header_len, r->header_len);
    check("tcp.option.mss", c->tcp.mss.value_or(0), r->tcp.mss.value_or(0));
    check("tcp.option.mss present", c->tcp.mss.has_value(),
          r->tcp.mss.has_value());
    check("tcp.option.wscale", int{c->tcp.window_scale.value_or(255)},
          int{r->tcp.window_scale.value_or(255)});
    check("tcp.option.sack_perm", c->tcp.sack_permitted, r->tcp.sack_permitted);
    check("tcp.option.timestamps present", c->tcp.timestamps.has_value(),
          r->tcp.timestamps.has_value());
    if (c->tcp.timestamps && r->tcp.timestamps) {
      // TSval relative to each stack's SYN-ACK TSval (see the file
      // comment); TSecr echoes the kernel's TSval: exact.
      check("tcp.option.tsval (relative)",
            c->tcp.timestamps->tsval - x.tsval0_captured,
            r->tcp.timestamps->tsval - x.tsval0_replayed);
      check("tcp.option.tsecr", c->tcp.timestamps->tsecr,
            r->tcp.timestamps->tsecr);
    }
    check("tcp.option.sack blocks", int{c->tcp.sack_count},
          int{r->tcp.sack_count});
    for (uint8_t i = 0; i < std::min(c->tcp.sack_count, r->tcp.sack_count);
         ++i) {
      // In the kernel's sequence space: exact, shown relative.
      check(absl::StrCat("tcp.option.sack[", i, "] (relative)").c_str(),
            absl::StrCat(c->tcp.sack_blocks[i].left - kisn, "-",
                         c->tcp.sack_blocks[i].right - kisn),
            absl::StrCat(r->tcp.sack_blocks[i].left - kisn, "-",
                         r->tcp.sack_blocks[i].right - kisn));
    }
    check("tcp.unknown_options", int{c->tcp.unknown_options},
          int{r->tcp.unknown_options});
    check("tcp.len", c->payload.size(), r->payload.size());
    if (c->payload != r->payload) {
      size_t i = 0;
      while (i < std::min(c->payload.size(), r->payload.size()) &&
             c->payload[i] == r->payload[i]) {
        ++i;
      }
      diffs.push_back(absl::StrCat("payload bytes differ from offset ", i));
    }
    check("tcp.checksum_ok", c->tcp_checksum_ok, r->tcp_checksum_ok);
    // Anything the fields above do not cover (option order and padding,
    // IP flags and header checksum, Ethernet type, trailing bytes): the
    // whole frame, with ISN and TSval moved into the replay's spaces.
    if (diffs.empty() && x.known) {
      const std::vector<uint8_t> want = Expected(captured, frame_number);
      if (want != replayed) {
        size_t i = 0;
        while (i < std::min(want.size(), replayed.size()) &&
               want[i] == replayed[i]) {
          ++i;
        }
        diffs.push_back(absl::StrCat("frame bytes differ at offset ", i, " (",
                                     want.size(), " vs ", replayed.size(),
                                     " bytes)"));
      }
    }
  }
  if (diffs.empty()) return;
  ++result.mismatches;
  if (++reported_ <= 20) {
    ADD_FAILURE() << "capture frame " << frame_number << " at " << Rel(at)
                  << ": netstackd sent [" << Summary(captured)
                  << "], the replay [" << Summary(replayed) << "]:\n  "
                  << absl::StrJoin(diffs, "\n  ");
  } else {
    ADD_FAILURE() << "capture frame " << frame_number << " differs ("
                  << diffs.size() << " fields)";
  }
}

ReplayResult Replay::Run(const std::vector<CapturedFrame>& frames,
                         const TsharkTable* table) {
  ReplayResult result;
  result.frames = frames.size();
  // Our own parser against tshark's, on the captured bytes.
  if (table != nullptr) {
    EXPECT_EQ(table->rows.size(), frames.size());
    for (size_t i = 0; i < std::min(frames.size(), table->rows.size()); ++i) {
      const TsharkRow& row = table->rows[i];
      auto t = ParseTcpFrame(frames[i].bytes);
      EXPECT_EQ(t.has_value(), !row.at("tcp.srcport").empty())
          << "frame " << i + 1;
      if (!t) continue;
      EXPECT_EQ(ParseTsharkNumber(row.at("tcp.seq_raw")), t->tcp.seq);
      EXPECT_EQ(ParseTsharkNumber(row.at("tcp.ack_raw")), t->tcp.ack);
      EXPECT_EQ(ParseTsharkNumber(row.at("tcp.flags")), t->tcp.flags);
      EXPECT_EQ(ParseTsharkNumber(row.at("tcp.window_size_value")),
                t->tcp.window);
      EXPECT_EQ(ParseTsharkNumber(row.at("tcp.len")), t->payload.size());
      EXPECT_TRUE(t->tcp_checksum_ok) << "frame " << i + 1;
    }
  }

  const std::vector<Turn> turns = SplitIntoTurns(frames, kernel_mac_, run_.mac);
  result.turns = turns.size();
  if (!frames.empty()) first_ = frames.front().timestamp;
  // netstackd ran (idle) turns before the first frame; one is enough to
  // start every clock.
  if (!turns.empty()) RunTurn(turns.front().at - absl::Seconds(1), {});
  size_t sent_seen = 0;
  for (const Turn& turn : turns) {
    // A timer due before a turn that brought frames: netstackd woke up for
    // it in a turn that sent nothing (or the capture would show it), and
    // it runs here after this turn's frames instead (see the file comment).
    if (!turn.in.empty() &&
        std::min(tcp_->NextDeadline(), stack_->NextDeadline()) < turn.at) {
      ++result.silent_timer_turns;
    }
    std::vector<std::vector<uint8_t>> in;
    for (size_t i : turn.in) {
      in.push_back(frames[i].bytes);
      TranslateInbound(in.back(), i + 1);
    }
    const size_t received_before = recorder_->received.size();
    RunTurn(turn.at, in);
    result.kernel_frames += in.size();
    // Which of this turn's frames the injector let through: the delivered
    // ones are a subsequence, in order (loss only: no duplicates, no
    // reordering, no delay).
    {
      size_t j = received_before;
      for (size_t k = 0; k < in.size(); ++k) {
        if (j < recorder_->received.size() && recorder_->received[j] == in[k]) {
          ++j;
        } else {
          result.dropped_inbound.push_back(turn.in[k] + 1);
        }
      }
      EXPECT_EQ(j, recorder_->received.size())
          << "the stack received frames that were not injected";
      result.kernel_frames_delivered += j - received_before;
    }
    // What left the wire this turn, against what netstackd's did.
    std::vector<std::vector<uint8_t>> out = std::move(wire_->sent);
    wire_->sent.clear();
    // What the injector dropped of what the stack sent (a subsequence
    // again): such frames are not in the capture either.
    {
      size_t j = 0;
      for (size_t k = sent_seen; k < recorder_->sent.size(); ++k) {
        if (j < out.size() && out[j] == recorder_->sent[k]) {
          ++j;
        } else {
          result.dropped_outbound.push_back(absl::StrCat(
              Rel(turn.at), " (after capture frame ",
              (turn.out.empty() ? turn.in.back() : turn.out.back()) + 1,
              "): ", Summary(recorder_->sent[k])));
        }
      }
      EXPECT_EQ(j, out.size())
          << "the wire carried frames the stack did not send";
    }
    const size_t n = std::min(out.size(), turn.out.size());
    for (size_t k = 0; k < n; ++k) {
      Compare(frames[turn.out[k]].bytes, out[k], turn.out[k] + 1, turn.at,
              result);
    }
    for (size_t k = n; k < turn.out.size(); ++k) {
      ++result.mismatches;
      ADD_FAILURE() << "capture frame " << turn.out[k] + 1 << " at "
                    << Rel(turn.at) << ": netstackd sent ["
                    << Summary(frames[turn.out[k]].bytes)
                    << "], the replayed stack sent nothing more this turn";
    }
    for (size_t k = n; k < out.size(); ++k) {
      ++result.mismatches;
      ADD_FAILURE() << "turn at " << Rel(turn.at) << " (after capture frame "
                    << (turn.out.empty() ? turn.in.back() : turn.out.back()) + 1
                    << "): the replayed stack sent an extra frame ["
                    << Summary(out[k]) << "]";
    }
    sent_seen = recorder_->sent.size();
  }
  result.stack_frames_sent = sent_seen;
  return result;
}

// --- The tests
// ----------------------------------------------------------------

struct Loaded {
  NetstackdRun run;
  std::vector<CapturedFrame> frames;
  TsharkTable table;
};

void Load(const std::string& name, Loaded& out) {
  absl::StatusOr<NetstackdRun> run =
      ReadNetstackdRun(TestDataPath(name + ".netstackd.txt"));
  ASSERT_TRUE(run.ok()) << run.status();
  out.run = *run;
  absl::StatusOr<std::vector<CapturedFrame>> frames =
      ReadPcap(TestDataPath(name + ".pcap"));
  ASSERT_TRUE(frames.ok()) << frames.status();
  out.frames = std::move(*frames);
  absl::StatusOr<TsharkTable> table =
      ReadTsharkTsv(TestDataPath(name + ".tshark.tsv"));
  ASSERT_TRUE(table.ok()) << table.status();
  out.table = std::move(*table);
}

// The replayed stack's counters must be netstackd's: the stack's and the
// TCP layer's (what it received, sent, dropped and why), and the fault
// injector's. Services are compared separately (the stand-ins count
// differently named things).
void ExpectSameCounters(const Replay& replay) {
  std::map<std::string, uint64_t> ours = replay.Counters();
  if (replay.faults() != nullptr) {
    for (auto [dir, s] :
         {std::pair{"egress", &replay.faults()->egress_stats()},
          std::pair{"ingress", &replay.faults()->ingress_stats()}}) {
      const std::string p = absl::StrCat("fault.", dir, ".");
      ours[p + "in"] = s->packets_in;
      ours[p + "out"] = s->packets_out;
      ours[p + "dropped"] = s->dropped;
      ours[p + "duplicated"] = s->duplicated;
      ours[p + "reordered"] = s->reordered;
      ours[p + "corrupted"] = s->corrupted;
      ours[p + "delayed"] = s->delayed;
      ours[p + "overflow"] = s->overflow;
    }
  }
  // link.<nic>.{rx,tx}_syscalls count the system calls of netstackd's
  // AF_PACKET socket, which the FakeLink does not make; every other link
  // counter (frames, bytes, drops) is the wire's and must match. chunks.*
  // is the state of a chunk pool (its size, what is held now), not
  // something the wire did; the captures predate it.
  auto skipped = [](const std::string& name) {
    return name.rfind("service.", 0) == 0 || name.rfind("chunks.", 0) == 0 ||
           (name.rfind("link.", 0) == 0 && name.size() > 9 &&
            name.compare(name.size() - 9, 9, "_syscalls") == 0);
  };
  size_t compared = 0;
  for (const auto& [name, value] : replay.run().counters) {
    if (skipped(name)) continue;
    ++compared;
    auto it = ours.find(name);
    if (it == ours.end()) {
      ADD_FAILURE() << "netstackd printed counter " << name
                    << " but the replayed stack has none";
      continue;
    }
    EXPECT_EQ(it->second, value) << "counter " << name;
  }
  // Counters the replay has and netstackd did not print must be zero
  // (the stack prints only the counters that are not).
  for (const auto& [name, value] : ours) {
    if (!skipped(name) && replay.run().counters.count(name) == 0) {
      EXPECT_EQ(value, 0u) << "counter " << name << " (netstackd: not printed)";
    }
  }
  EXPECT_GT(compared, 10u);
}

void PrintResult(const std::string& name, const ReplayResult& r) {
  std::string dropped = r.dropped_inbound.empty()
                            ? "none"
                            : absl::StrJoin(r.dropped_inbound, ",");
  std::printf(
      "%s: %zu frames in %zu turns; %zu kernel frames replayed, %zu reached "
      "the stack (dropped by the injector: frames %s); the stack sent %zu "
      "frames, %zu of them on the wire compared with netstackd's (%zu TCP "
      "segments, %zu with SACK blocks), %zu mismatches; %zu turns with "
      "frames began with a timer overdue\n",
      name.c_str(), r.frames, r.turns, r.kernel_frames,
      r.kernel_frames_delivered, dropped.c_str(), r.stack_frames_sent,
      r.compared_frames, r.compared_segments, r.sack_segments, r.mismatches,
      r.silent_timer_turns);
  for (const std::string& d : r.dropped_outbound) {
    std::printf("  the injector dropped what the stack sent at %s\n",
                d.c_str());
  }
}

size_t CountOutbound(const Loaded& l) {
  size_t n = 0;
  for (const auto& row : l.table.rows) {
    if (row.at("eth.src") == l.run.mac.ToString()) ++n;
  }
  return n;
}

TEST(TcpReplayTest, HandshakeTransferToEcho) {
  Loaded l;
  ASSERT_NO_FATAL_FAILURE(Load("tcp_handshake_transfer", l));
  ASSERT_EQ(l.run.loss, 0.0);
  Replay replay(l.run);
  const ReplayResult r = replay.Run(l.frames, &l.table);
  PrintResult("tcp_handshake_transfer", r);
  EXPECT_EQ(r.mismatches, 0u);
  // Every captured netstackd frame was compared (no frame dropped).
  EXPECT_EQ(r.compared_frames, CountOutbound(l));
  EXPECT_EQ(r.compared_frames, r.stack_frames_sent);
  EXPECT_GE(r.compared_segments, 20u);
  EXPECT_EQ(r.kernel_frames_delivered, r.kernel_frames);
  EXPECT_EQ(replay.services().echo_connections, 1u);
  EXPECT_EQ(replay.services().echo_bytes,
            l.run.counters.at("service.echo.tcp_bytes"));
  EXPECT_EQ(replay.services().errors, 0u);
  ExpectSameCounters(replay);
}

TEST(TcpReplayTest, LossyTransferToDiscard) {
  Loaded l;
  ASSERT_NO_FATAL_FAILURE(Load("tcp_lossy_transfer", l));
  ASSERT_GT(l.run.loss, 0.0);
  ASSERT_TRUE(l.run.fault_ingress);
  Replay replay(l.run);
  const ReplayResult r = replay.Run(l.frames, &l.table);
  PrintResult("tcp_lossy_transfer", r);
  EXPECT_EQ(r.mismatches, 0u);
  EXPECT_EQ(r.compared_frames, CountOutbound(l));
  // The injector dropped as many frames as netstackd's did, both ways.
  ASSERT_NE(replay.faults(), nullptr);
  EXPECT_EQ(r.dropped_inbound.size(),
            l.run.counters.at("fault.ingress.dropped"));
  EXPECT_GT(r.dropped_inbound.size(), 0u);
  EXPECT_EQ(r.stack_frames_sent - r.compared_frames,
            l.run.counters.at("fault.egress.dropped"));
  EXPECT_EQ(r.dropped_outbound.size(),
            l.run.counters.at("fault.egress.dropped"));
  EXPECT_GT(r.sack_segments, 0u);
  EXPECT_EQ(replay.services().discard_connections, 1u);
  EXPECT_EQ(replay.services().discard_bytes,
            l.run.counters.at("service.discard.tcp_bytes"));
  EXPECT_EQ(replay.services().errors, 0u);
  ExpectSameCounters(replay);
}

}  // namespace
}  // namespace netstack::testing
