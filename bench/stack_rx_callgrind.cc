// Runs N echo requests through the stack, for instruction counting:
//   valgrind --tool=callgrind bench/stack_rx_callgrind 4 1000
//   valgrind --tool=callgrind bench/stack_rx_callgrind 4 11000
// The difference of the two totals divided by 10000 is the instructions
// per packet, with set-up cancelled out (bench/callgrind_rx.sh does this).
#include <cstdio>
#include <cstdlib>

#include "bench/stack_rx.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s 4|6 PACKETS\n", argv[0]);
    return 2;
  }
  const int family = std::atoi(argv[1]);
  const long packets = std::atol(argv[2]);
  if ((family != 4 && family != 6) || packets <= 0 || packets % 32 != 0) {
    std::fprintf(stderr, "family must be 4 or 6, PACKETS a multiple of 32\n");
    return 2;
  }
  netstack::bench::StackRxFixture fx(family, 32);
  for (long i = 0; i < packets / 32; ++i) fx.RunBatch();
  const auto& c = fx.counters();
  const uint64_t replies =
      family == 4 ? c.icmpv4_echo_replies_sent : c.icmpv6_echo_replies_sent;
  std::printf("%llu replies\n", static_cast<unsigned long long>(replies));
  return replies == static_cast<uint64_t>(packets) ? 0 : 1;
}
