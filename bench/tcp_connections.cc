// 10,000 (by default) concurrent TCP connections between two netstack
// stacks over an in-memory channel link: the accept rate, and the memory
// one idle established connection costs.
//
//   bazel run --config=opt //bench:tcp_connections -- --connections=10000
//
// Memory is the heap in use (mallinfo2) after all connections are
// established and idle, minus the heap in use before the first Connect,
// divided by the number of connection endpoints (two per connection: the
// client's and the server's). Each endpoint's state is the TCB, its
// (empty) queues, congestion-control state and the demux table entry.
// The accept rate is connections completed (handshake done and Accept()
// returned) per second of wall time, both stacks on this one thread.
#include <arpa/inet.h>
#include <fcntl.h>
#include <malloc.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/time/clock.h"
#include "bench/tcp_pair.h"
#include "netstack/tcp/tcp_layer.h"

ABSL_FLAG(int, connections, 10000, "concurrent connections to open");
ABSL_FLAG(int, batch, 500, "Connect() calls per event-loop turn");
ABSL_FLAG(bool, kernel_baseline, true,
          "also time the same number of connect+accept pairs through the "
          "kernel's loopback in this process (the baseline for the ratio)");

namespace netstack {
namespace {

size_t HeapInUse() {
  struct mallinfo2 m = mallinfo2();
  return m.uordblks + m.hblkhd;
}


// The kernel doing the same: n non-blocking connects to a loopback
// listener, accepted as they complete. Returns connections per second, or
// 0 if the fd limit does not allow it.
double KernelBaseline(int n, int* count) {
  struct rlimit rl;
  getrlimit(RLIMIT_NOFILE, &rl);
  const rlim_t want = static_cast<rlim_t>(2 * n + 64);
  if (rl.rlim_cur < want) {
    rl.rlim_cur = std::min(want, rl.rlim_max);
    setrlimit(RLIMIT_NOFILE, &rl);
    getrlimit(RLIMIT_NOFILE, &rl);
    if (rl.rlim_cur < want) n = static_cast<int>((rl.rlim_cur - 64) / 2);
  }
  if (n <= 0) return 0;
  *count = n;
  const int lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  if (bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      listen(lfd, 65535) != 0 ||
      getsockname(lfd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    close(lfd);
    return 0;
  }
  std::vector<int> fds;
  fds.reserve(2 * n);
  const absl::Time start = absl::Now();
  int accepted = 0;
  int opened = 0;
  while (accepted < n) {
    for (int i = 0; i < 500 && opened < n; ++i, ++opened) {
      const int c = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
      (void)connect(c, reinterpret_cast<sockaddr*>(&a), sizeof(a));
      fds.push_back(c);
    }
    while (true) {
      const int s = accept4(lfd, nullptr, nullptr, SOCK_NONBLOCK);
      if (s < 0) break;
      fds.push_back(s);
      ++accepted;
    }
    if (absl::Now() - start > absl::Seconds(60)) break;
  }
  const double secs = absl::ToDoubleSeconds(absl::Now() - start);
  for (int fd : fds) close(fd);
  close(lfd);
  return accepted == n ? n / secs : 0;
}

int Run() {
  const int n = absl::GetFlag(FLAGS_connections);
  buffer::ChunkPool chunks(4096);
  buffer::PacketPool packets(65536);
  bench::TcpPairOptions po;
  po.channel.queue_limit = 65536;
  po.max_backlog = 65535;
  auto pair = bench::MakeTcpPair(chunks, packets, po);
  if (!pair.ok()) {
    std::fprintf(stderr, "pair: %s\n", pair.status().ToString().c_str());
    return 1;
  }
  runtime::Runtime& client = *pair->a;
  runtime::Runtime& server = *pair->b;
  const transport::SocketAddress dst{
      transport::IpAddress(wire::Ipv4Address::FromU32(0x0a000002u)), 80};

  auto listener = server.tcp().Open(transport::Family::kIpv4);
  if (!listener->Bind(dst).ok() || !listener->Listen(65535).ok()) return 1;

  std::vector<std::unique_ptr<tcp::TcpSocket>> clients;
  std::vector<std::unique_ptr<tcp::TcpSocket>> accepted;
  clients.reserve(n);
  accepted.reserve(n);

  // One turn of each runtime, on the monotonic clock, then the accepts.
  auto turn = [&]() {
    if (!client.Poll().ok() || !server.Poll().ok()) std::abort();
    while (true) {
      auto s = listener->Accept();
      if (!s.ok()) break;
      accepted.push_back(std::move(*s));
    }
  };
  // One connection first, outside the measurement: it resolves ARP (SYNs
  // parked behind an unresolved neighbour past the queue limit would be
  // dropped and retried after the 1 s initial RTO) and warms the tables.
  {
    auto warm = client.tcp().Open(transport::Family::kIpv4);
    if (!warm->Connect(dst).ok()) return 1;
    for (int i = 0; i < 1000 && accepted.empty(); ++i) turn();
    if (accepted.empty()) {
      std::fprintf(stderr, "warm-up connection failed\n");
      return 1;
    }
    clients.push_back(std::move(warm));
  }

  const size_t heap_before = HeapInUse();
  const absl::Time start = absl::Now();
  int opened = 0;
  absl::Time last_report = start;
  while (static_cast<int>(accepted.size()) < n + 1) {
    for (int i = 0; i < absl::GetFlag(FLAGS_batch) && opened < n; ++i) {
      auto s = client.tcp().Open(transport::Family::kIpv4);
      if (auto st = s->Connect(dst); !st.ok()) {
        std::fprintf(stderr, "connect %d: %s\n", opened,
                     st.ToString().c_str());
        return 1;
      }
      clients.push_back(std::move(s));
      ++opened;
    }
    const absl::Time now = absl::Now();
    turn();
    if (now - last_report > absl::Seconds(1)) {
      std::fprintf(stderr, "... %zu accepted\n", accepted.size());
      last_report = now;
    }
    if (now - start > absl::Seconds(120)) {
      std::fprintf(stderr, "timed out with %zu accepted\n", accepted.size());
      return 1;
    }
  }
  const absl::Time end = absl::Now();
  // Let the last ACKs and window updates settle, then measure.
  for (int i = 0; i < 10; ++i) turn();
  int established = 0;
  for (auto& s : clients) {
    established += s->state() == tcp::TcpState::kEstablished;
  }
  for (auto& s : accepted) {
    established += s->state() == tcp::TcpState::kEstablished;
  }
  const size_t heap_after = HeapInUse();
  established -= 2;  // the warm-up connection
  const double secs = absl::ToDoubleSeconds(end - start);
  std::printf("connections: %d (endpoints established: %d of %d)\n", n,
              established, 2 * n);
  std::printf("accept rate: %.0f connections/s (%.3f s for %d)\n", n / secs,
              secs, n);
  if (absl::GetFlag(FLAGS_kernel_baseline)) {
    int kn = 0;
    const double k = KernelBaseline(n, &kn);
    if (k > 0) {
      std::printf("kernel loopback, same run: %.0f connections/s (%d "
                  "connections, fd limit); netstack / kernel = %.2f\n",
                  k, kn, (n / secs) / k);
    } else {
      std::printf("kernel loopback baseline: not measured (fd limit)\n");
    }
  }
  std::printf("heap per idle endpoint: %.0f bytes (%zu bytes for %d "
              "endpoints)\n",
              static_cast<double>(heap_after - heap_before) / (2.0 * n),
              heap_after - heap_before, 2 * n);
  std::printf("layer connections: client %zu, server %zu\n",
              client.tcp().connection_count(), server.tcp().connection_count());
  std::printf("%s\n%s\n", client.tcp().FormatCounters().c_str(),
              server.tcp().FormatCounters().c_str());
  return established == 2 * n ? 0 : 1;
}

}  // namespace
}  // namespace netstack

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return netstack::Run();
}
