// Receive cost per packet of the stack: Ethernet/IP/ICMP parse and
// validation, demultiplexing, building the echo reply (sharing the
// request's data) and handing it to the link. The link is a FakeLink that
// drops what it is given, so no system call is measured.
#include "benchmark/benchmark.h"
#include "bench/stack_rx.h"

namespace netstack::bench {
namespace {

void BM_RxEchoRequest(benchmark::State& state) {
  const int family = static_cast<int>(state.range(0));
  const size_t batch = static_cast<size_t>(state.range(1));
  StackRxFixture fx(family, batch);
  for (auto _ : state) fx.RunBatch();
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * batch));
  const auto& c = fx.counters();
  if (family == 4 && c.icmpv4_echo_replies_sent < state.iterations() * batch) {
    state.SkipWithError("not every request was answered");
  }
  if (family == 6 && c.icmpv6_echo_replies_sent < state.iterations() * batch) {
    state.SkipWithError("not every request was answered");
  }
}
// Args: IP version, frames per delivered batch.
BENCHMARK(BM_RxEchoRequest)
    ->ArgNames({"ip", "batch"})
    ->Args({4, 1})
    ->Args({4, 32})
    ->Args({6, 1})
    ->Args({6, 32});

}  // namespace
}  // namespace netstack::bench
