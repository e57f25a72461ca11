// Sends MIB mebibytes over one TCP connection between two stacks in this
// process, for instruction counting:
//   valgrind --tool=callgrind bench/tcp_tx_callgrind off 16
//   valgrind --tool=callgrind bench/tcp_tx_callgrind off 48
// The difference of the two totals divided by 32 is the instructions per
// MiB (set-up and slow start cancel out); bench/callgrind_tx.sh does this.
// The sender's link is software GSO ("sw") or plain ("off"); the figure
// covers everything a byte costs in this process: the sender's TCP, the
// GSO split and checksums, the channel's copy (the stand-in for the
// kernel's copy out of a socket), and the receiver's stack and TCP.
// Virtual time: each turn advances a fake clock by 20 us, then both
// runtimes (bench/tcp_pair.h) run one turn each.
#include <cstdio>
#include <cstdlib>
#include <array>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

#include "bench/tcp_pair.h"
#include "link/channel_endpoint.h"
#include "link/gso_endpoint.h"

namespace netstack {
namespace {

int Run(bool gso, uint64_t mib) {
  buffer::ChunkPool chunks(4096);
  buffer::PacketPool packets(16384);
  Instant now = absl::FromUnixSeconds(1'700'000'000);
  bench::TcpPairOptions po;
  po.channel.queue_limit = 8192;
  if (gso) po.a_software_gso = link::kMaxGsoIpLen;
  po.now = &now;
  absl::StatusOr<bench::TcpPair> pair = bench::MakeTcpPair(chunks, packets, po);
  if (!pair.ok()) {
    std::fprintf(stderr, "%s\n", std::string(pair.status().message()).c_str());
    return 1;
  }
  runtime::Runtime& a = *pair->a;
  runtime::Runtime& b = *pair->b;
  const transport::SocketAddress dst{
      transport::IpAddress(bench::TcpPair::Address(2)), 9};
  auto listener = b.tcp().Open(transport::Family::kIpv4);
  if (!listener->Bind(dst).ok() || !listener->Listen(4).ok()) return 1;
  auto client = a.tcp().Open(transport::Family::kIpv4);
  if (!client->Connect(dst).ok()) return 1;

  buffer::ChunkRef filler = chunks.Allocate();
  std::memset(filler->mutable_data().data(), 'x', buffer::kChunkSize);
  const buffer::PayloadView view(filler, 0, buffer::kChunkSize);
  std::unique_ptr<tcp::TcpSocket> server;
  std::array<buffer::PayloadView, 64> in;
  const uint64_t target = mib << 20;
  uint64_t queued = 0;
  uint64_t received = 0;
  // The application, in each side's end of turn: after the readiness
  // callbacks, before TCP sends.
  a.AddSweep([&](Instant) {
    while (client->state() == tcp::TcpState::kEstablished && queued < target &&
           client->WriteView(view).ok()) {
      queued += view.size();
    }
  });
  b.AddSweep([&](Instant) {
    if (server == nullptr) {
      auto s = listener->Accept();
      if (s.ok()) server = std::move(*s);
    }
    while (server != nullptr) {
      size_t views = 0;
      auto r = server->ReadViews(in, SIZE_MAX, &views);
      for (size_t i = 0; i < views; ++i) in[i] = buffer::PayloadView();
      if (!r.ok() || *r == 0) break;
      received += *r;
    }
  });
  for (long turn = 0; received < target && turn < 100'000'000; ++turn) {
    now += absl::Microseconds(20);
    if (!a.Poll().ok() || !b.Poll().ok()) return 1;
  }
  const tcp::TcpInfo info = client->Info();
  std::printf("%s: %llu bytes received, %llu wire packets sent, %llu "
              "retransmits\n",
              gso ? "sw" : "off", static_cast<unsigned long long>(received),
              static_cast<unsigned long long>(info.segments_sent),
              static_cast<unsigned long long>(info.retransmits));
  return received >= target ? 0 : 1;
}

}  // namespace
}  // namespace netstack

int main(int argc, char** argv) {
  if (argc != 3 || (std::strcmp(argv[1], "off") != 0 &&
                    std::strcmp(argv[1], "sw") != 0)) {
    std::fprintf(stderr, "usage: %s off|sw MIB\n", argv[0]);
    return 2;
  }
  const long mib = std::atol(argv[2]);
  if (mib <= 0) {
    std::fprintf(stderr, "MIB must be positive\n");
    return 2;
  }
  return netstack::Run(std::strcmp(argv[1], "sw") == 0,
                       static_cast<uint64_t>(mib));
}
