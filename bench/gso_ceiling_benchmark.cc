// Software GSO against the raw AF_PACKET ceiling (issue #34 goal 7). Needs
// root.
//
// Two namespaces joined by a veth pair. The sender's end has no addresses;
// the peer's end is up but its frames are addressed to another MAC
// (PACKET_OTHERHOST), so the peer's IP layer drops each one at once. What
// is measured is then the sender's path only: user space, the AF_PACKET
// send, the device queue and the veth.
//
// Each round runs every mode for --duration seconds, one after the other,
// and prints wire packets per second; the ratios of a round compare modes
// measured seconds apart on the same busy machine.
//   raw      sendmmsg of prebuilt contiguous frames, one iovec each: the
//            ceiling of any per-packet sender. The frames are the very
//            bytes the split produces (flattened once at start).
//   sw       super-segments through GsoEndpoint -> PacketEndpoint: the
//            split (pool packets, header rewrite, checksums, views of the
//            payload chunk) and one sendmmsg per chain.
//   split    the split alone, the chain then dropped: user-space cost.
//   raw+bypass, sw+bypass: the same with PACKET_QDISC_BYPASS.
// A chain is --supers super-segments of 65,495 payload bytes (MSS 1460,
// 45 wire packets of up to 1,514 bytes each), and the raw sender sends as
// many frames per call.
//
//   bazel run --config=opt //bench:gso_ceiling_benchmark --
//       --rounds 5 --duration 2 [--modes raw,sw,split] [--qdisc noqueue]
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "link/fd_test_util.h"
#include "link/fd_util.h"
#include "link/gso.h"
#include "link/gso_endpoint.h"
#include "link/gso_test_util.h"
#include "link/netns.h"
#include "link/packet_endpoint.h"
#include "netstack/buffer/chunk.h"
#include "netstack/buffer/packet.h"

namespace netstack::bench {
namespace {

using link::testing::TestNetns;

constexpr char kSenderIf[] = "gcb-send";
constexpr char kPeerIf[] = "gcb-peer";
constexpr size_t kSuperPayload = 65495;

struct Flags {
  int rounds = 3;
  double duration_s = 2;
  int supers = 22;
  std::vector<std::string> modes = {"raw", "sw", "split", "raw+bypass",
                                    "sw+bypass"};
  // The sender end's qdisc: "noqueue" (a veth's default) or "pfifo"
  // (tools/tcp_benchmark's topology, for back-pressure).
  std::string qdisc = "noqueue";
};

bool ParseFlags(int argc, char** argv, Flags& f) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    const bool has_value = i + 1 < argc;
    if (arg == "--rounds" && has_value) {
      if (!absl::SimpleAtoi(argv[++i], &f.rounds) || f.rounds < 1) return false;
    } else if (arg == "--duration" && has_value) {
      if (!absl::SimpleAtod(argv[++i], &f.duration_s) || f.duration_s <= 0) {
        return false;
      }
    } else if (arg == "--supers" && has_value) {
      if (!absl::SimpleAtoi(argv[++i], &f.supers) || f.supers < 1 ||
          f.supers * 45 > static_cast<int>(link::PacketEndpoint::kMaxTxBatch)) {
        return false;
      }
    } else if (arg == "--modes" && has_value) {
      f.modes = absl::StrSplit(argv[++i], ',');
    } else if (arg == "--qdisc" && has_value) {
      f.qdisc = argv[++i];
    } else {
      return false;
    }
  }
  return true;
}

absl::StatusOr<int> OpenRawSocket(const std::string& netns,
                                  const std::string& ifname, bool bypass) {
  absl::StatusOr<int> opened =
      link::OpenInNetns(netns, []() -> absl::StatusOr<int> {
        const int fd = ::socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, 0);
        if (fd < 0) return link::ErrnoStatus(errno, "socket(AF_PACKET)");
        return fd;
      });
  if (!opened.ok()) return opened.status();
  const int fd = *opened;
  const int sndbuf = 4 << 20;
  (void)::setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &sndbuf, sizeof(sndbuf));
  if (bypass) {
    const int one = 1;
    if (::setsockopt(fd, SOL_PACKET, PACKET_QDISC_BYPASS, &one,
                     sizeof(one)) != 0) {
      return link::ErrnoStatus(errno, "PACKET_QDISC_BYPASS");
    }
  }
  absl::StatusOr<int> ifindex = link::InterfaceIndex(fd, ifname);
  if (!ifindex.ok()) return ifindex.status();
  sockaddr_ll addr{};
  addr.sll_family = AF_PACKET;
  addr.sll_protocol = 0;
  addr.sll_ifindex = *ifindex;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    return link::ErrnoStatus(errno, "bind");
  }
  return fd;
}

// One slice of a mode: wire packets sent, wall and thread CPU seconds.
struct Sample {
  uint64_t packets = 0;
  double wall_s = 0;
  double cpu_s = 0;
  Sample& operator+=(const Sample& o) {
    packets += o.packets;
    wall_s += o.wall_s;
    cpu_s += o.cpu_s;
    return *this;
  }
};

double ThreadCpuSeconds() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

class Bench {
 public:
  Bench(const Flags& flags, TestNetns& ns)
      : flags_(flags), ns_(ns), chunks_(256), packets_(4096) {}

  absl::Status Init() {
    payload_chunk_ = chunks_.Allocate();
    if (!payload_chunk_) return absl::ResourceExhaustedError("chunk");
    std::span<uint8_t> bytes = payload_chunk_->mutable_data();
    for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = i * 13 + 7;
    // The raw sender's frames: one chain's split, flattened.
    buffer::PacketChain chain = MakeChain();
    buffer::PacketChain wire;
    while (buffer::PacketPtr p = chain.PopFront()) {
      if (link::SplitGso(std::move(p), packets_, wire, 1500) !=
          link::GsoSplitStatus::kSplit) {
        return absl::InternalError("split failed");
      }
    }
    for (const buffer::PacketBuffer& p : wire) {
      std::vector<uint8_t> f(p.headers().data().begin(),
                             p.headers().data().end());
      for (const buffer::PayloadView& v : p.payload()) {
        f.insert(f.end(), v.bytes().begin(), v.bytes().end());
      }
      frames_.push_back(std::move(f));
    }
    iov_.resize(frames_.size());
    hdrs_.resize(frames_.size());
    for (size_t i = 0; i < frames_.size(); ++i) {
      iov_[i] = iovec{frames_[i].data(), frames_[i].size()};
      hdrs_[i] = mmsghdr{};
      hdrs_[i].msg_hdr.msg_iov = &iov_[i];
      hdrs_[i].msg_hdr.msg_iovlen = 1;
    }
    return absl::OkStatus();
  }

  size_t frames_per_chain() const { return frames_.size(); }

  // Runs `mode` for `seconds`.
  absl::StatusOr<Sample> Run(const std::string& mode, double seconds) {
    end_ = absl::Now() + absl::Seconds(seconds);
    const absl::Time start = absl::Now();
    const double cpu_start = ThreadCpuSeconds();
    absl::StatusOr<uint64_t> packets;
    if (mode == "raw" || mode == "raw+bypass") {
      packets = RunRaw(mode == "raw+bypass");
    } else if (mode == "sw" || mode == "sw+bypass") {
      packets = RunSw(mode == "sw+bypass");
    } else if (mode == "split") {
      packets = RunSplit();
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown mode ", mode));
    }
    if (!packets.ok()) return packets.status();
    return Sample{*packets, absl::ToDoubleSeconds(absl::Now() - start),
                  ThreadCpuSeconds() - cpu_start};
  }

 private:
  buffer::PacketChain MakeChain() {
    buffer::PacketChain chain;
    link::testing::SuperSegmentSpec spec;
    spec.seq = seq_;
    const buffer::PayloadView view(payload_chunk_, 0, kSuperPayload);
    for (int i = 0; i < flags_.supers; ++i) {
      buffer::PacketPtr p = link::testing::MakeSuperSegment(
          packets_, spec, std::span<const buffer::PayloadView>(&view, 1));
      if (p == nullptr) break;
      chain.PushBack(std::move(p));
      spec.seq += kSuperPayload;
      spec.ident = static_cast<uint16_t>(spec.ident + 45);
    }
    seq_ = spec.seq;
    return chain;
  }

  absl::StatusOr<uint64_t> RunRaw(bool bypass) {
    absl::StatusOr<int> fd = OpenRawSocket(ns_.name(), kSenderIf, bypass);
    if (!fd.ok()) return fd.status();
    link::UniqueFd sock(*fd);
    uint64_t sent = 0;
    while (absl::Now() < end_) {
      const int r = ::sendmmsg(sock.get(), hdrs_.data(),
                               static_cast<unsigned>(hdrs_.size()), 0);
      if (r < 0 && errno != EINTR && errno != ENOBUFS) {
        return link::ErrnoStatus(errno, "sendmmsg");
      }
      if (r > 0) sent += static_cast<uint64_t>(r);
    }
    return sent;
  }

  absl::StatusOr<uint64_t> RunSw(bool bypass) {
    link::PacketOptions o;
    o.interface = kSenderIf;
    o.netns = ns_.name();
    o.qdisc_bypass = bypass;
    o.rx_batch = 4;
    o.accept_oversized = false;
    auto packet = link::PacketEndpoint::Open(o, chunks_);
    if (!packet.ok()) return packet.status();
    link::PacketEndpoint* inner = packet->get();
    auto gso = link::GsoEndpoint::Create(std::move(*packet), packets_);
    if (!gso.ok()) return gso.status();
    for (absl::Time now = absl::Now(); now < end_; now = absl::Now()) {
      buffer::PacketChain chain = MakeChain();
      (*gso)->Transmit(chain, now);
      while (chain.PopFront()) {  // blocked: dropped, not counted
      }
    }
    return inner->Stats().tx_frames;
  }

  absl::StatusOr<uint64_t> RunSplit() {
    uint64_t made = 0;
    while (absl::Now() < end_) {
      buffer::PacketChain chain = MakeChain();
      buffer::PacketChain wire;
      while (buffer::PacketPtr p = chain.PopFront()) {
        (void)link::SplitGso(std::move(p), packets_, wire, 1500);
      }
      while (wire.PopFront()) ++made;
    }
    return made;
  }

  const Flags& flags_;
  TestNetns& ns_;
  buffer::ChunkPool chunks_;
  buffer::PacketPool packets_;
  buffer::ChunkRef payload_chunk_;
  uint32_t seq_ = 1;
  absl::Time end_;
  std::vector<std::vector<uint8_t>> frames_;
  std::vector<iovec> iov_;
  std::vector<mmsghdr> hdrs_;
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int Main(int argc, char** argv) {
  Flags flags;
  if (!ParseFlags(argc, argv, flags)) {
    std::fprintf(stderr,
                 "usage: gso_ceiling_benchmark [--rounds N] [--duration S] "
                 "[--supers N (1..22)] [--modes raw,sw,split,raw+bypass,"
                 "sw+bypass] [--qdisc noqueue|pfifo]\n");
    return 2;
  }
  if (!link::testing::IsRoot()) {
    std::fprintf(stderr, "%s\n", link::testing::kNeedRoot);
    return 1;
  }
  auto sender = TestNetns::Create();
  auto peer = TestNetns::Create();
  if (!sender.ok() || !peer.ok()) {
    std::fprintf(stderr, "netns: %s %s\n", sender.status().ToString().c_str(),
                 peer.status().ToString().c_str());
    return 1;
  }
  for (const std::string& cmd :
       {absl::StrCat("link add ", kSenderIf, " type veth peer name ", kPeerIf,
                     " netns ", (*peer)->name()),
        absl::StrCat("link set ", kSenderIf, " up")}) {
    if (absl::Status s = (*sender)->Ip(cmd); !s.ok()) {
      std::fprintf(stderr, "%s\n", s.ToString().c_str());
      return 1;
    }
  }
  if (absl::Status s = (*peer)->Ip(absl::StrCat("link set ", kPeerIf, " up"));
      !s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    return 1;
  }
  if (flags.qdisc != "noqueue") {
    if (absl::Status s = (*sender)->Exec(absl::StrCat(
            "tc qdisc replace dev ", kSenderIf, " root ", flags.qdisc));
        !s.ok()) {
      std::fprintf(stderr, "%s\n", s.ToString().c_str());
      return 1;
    }
  }
  Bench bench(flags, **sender);
  if (absl::Status s = bench.Init(); !s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    return 1;
  }
  std::printf("gso_ceiling_benchmark: %zu wire packets per chain (%d "
              "super-segments), %.1f s per mode, qdisc %s\n",
              bench.frames_per_chain(), flags.supers, flags.duration_s,
              flags.qdisc.c_str());
  // Per round and mode: wire packets per wall second, and per CPU second
  // of the sending thread (the peer's drop runs in its softirq too), which
  // is steadier on a busy machine.
  std::map<std::string, std::vector<double>> wall_pps;
  std::map<std::string, std::vector<double>> cpu_pps;
  constexpr int kSlices = 8;  // modes interleave within a round
  for (int round = 0; round < flags.rounds; ++round) {
    std::map<std::string, Sample> sum;
    for (int slice = 0; slice < kSlices; ++slice) {
      for (const std::string& mode : flags.modes) {
        absl::StatusOr<Sample> got =
            bench.Run(mode, flags.duration_s / kSlices);
        if (!got.ok()) {
          std::fprintf(stderr, "%s: %s\n", mode.c_str(),
                       got.status().ToString().c_str());
          return 1;
        }
        sum[mode] += *got;
      }
    }
    std::printf("round %d (Mpps wall / per CPU-second):", round + 1);
    for (const std::string& mode : flags.modes) {
      const Sample& s = sum[mode];
      wall_pps[mode].push_back(s.packets / s.wall_s);
      cpu_pps[mode].push_back(s.packets / s.cpu_s);
      std::printf("  %s %.3f/%.3f", mode.c_str(), s.packets / s.wall_s / 1e6,
                  s.packets / s.cpu_s / 1e6);
    }
    std::printf("\n");
    std::fflush(stdout);
  }
  for (const auto& [name, table] :
       {std::pair{"wall", &wall_pps}, std::pair{"cpu", &cpu_pps}}) {
    std::printf("median Mpps (%s):", name);
    for (const std::string& mode : flags.modes) {
      std::printf("  %s %.3f", mode.c_str(), Median((*table)[mode]) / 1e6);
    }
    std::printf("\n");
    if (table->count("raw") == 0) continue;
    for (const char* m : {"sw", "sw+bypass", "raw+bypass"}) {
      if (table->count(m) == 0) continue;
      std::vector<double> ratios;
      for (size_t i = 0; i < (*table)[m].size(); ++i) {
        ratios.push_back((*table)[m][i] / (*table)["raw"][i]);
      }
      std::printf("  %s/raw (%s) per round:", m, name);
      for (double r : ratios) std::printf(" %.2fx", r);
      std::printf("  median %.2fx\n", Median(ratios));
    }
  }
  if (cpu_pps.count("split") > 0) {
    std::printf("split alone: %.0f ns of CPU per wire packet (median)\n",
                1e9 / Median(cpu_pps["split"]));
  }
  if (cpu_pps.count("raw") > 0) {
    std::printf("raw: %.0f ns of CPU per wire packet (median)\n",
                1e9 / Median(cpu_pps["raw"]));
  }
  return 0;
}

}  // namespace
}  // namespace netstack::bench

int main(int argc, char** argv) { return netstack::bench::Main(argc, argv); }
