// Prints time and memory of the hostile out-of-order storm (hostile_ooo.h)
// for the counts given as arguments (default 2000 4000 8000), with
// --batch=N frames per receive batch (default 64; 1: every segment is a
// batch of its own and draws an ACK) and --adjacent (no hole between
// the segments: one run of them, the worst case):
//   bazel run --config=opt //netstack/tcp:tcp_receive_memory_benchmark
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "netstack/tcp/hostile_ooo.h"

int main(int argc, char** argv) {
  std::vector<size_t> counts;
  size_t batch = 64;
  bool holes = true;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--adjacent") == 0) {
      holes = false;
    } else if (std::strncmp(argv[i], "--batch=", 8) == 0) {
      batch = std::strtoul(argv[i] + 8, nullptr, 10);
    } else {
      counts.push_back(std::strtoul(argv[i], nullptr, 10));
    }
  }
  if (batch == 0) batch = 1;
  std::printf("batch %zu, %s\n", batch,
              holes ? "a hole before each segment" : "adjacent segments");
  if (counts.empty()) counts = {2000, 4000, 8000};
  constexpr uint32_t kBuffer = 256 << 10;
  std::printf("segments  seconds  us/seg  peak_KiB  final_KiB  acks  pruned  mem_drops  read  ok\n");
  for (size_t n : counts) {
    const auto r = netstack::tcp::testing::RunHostileOoo(n, kBuffer, batch, holes);
    std::printf("%8zu  %7.3f  %6.2f  %8zu  %9zu  %4llu  %6llu  %9llu  %5zu  %s\n",
                n, r.seconds, 1e6 * r.seconds / static_cast<double>(n),
                r.peak_pinned_bytes >> 10, r.final_pinned_bytes >> 10,
                static_cast<unsigned long long>(r.acks),
                static_cast<unsigned long long>(r.pruned),
                static_cast<unsigned long long>(r.memory_drops), r.bytes_read,
                r.data_ok ? "yes" : "NO");
  }
  return 0;
}
