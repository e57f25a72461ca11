// The driver's results: a table for people, a JSON array for scripts
// (bench/plot_tcp_benchmark.py). Each netstack row is compared with the
// kernel-to-kernel baseline of the same MTU measured in the same run.
#ifndef TOOLS_TCP_BENCHMARK_DRIVER_REPORT_H_
#define TOOLS_TCP_BENCHMARK_DRIVER_REPORT_H_

#include <optional>
#include <string>
#include <vector>

#include "tools/tcp_benchmark/measurement.h"

namespace netstack::tools::bench {

// The baseline's Gbit/s at `mtu`, if it was measured and worked.
std::optional<double> KernelGbps(const std::vector<Measurement>& all, int mtu);

// mode | MTU | netstack role | Gbit/s | CPU s/GB | retransmits |
// kernel->kernel Gbit/s | ratio, one line per measurement; failed ones
// say FAILED.
std::string FormatTable(const std::vector<Measurement>& all);

// One JSON array, one object per measurement, with the keys mode, mtu,
// netstack_role, gbps, cpu_s_per_gb, retransmits, ratio_to_kernel (null
// without a baseline; 1.0 on kernel rows), and link, reverse, duration,
// streams, bytes, seconds, cpu_s; "error" on failed ones.
std::string FormatJson(const std::vector<Measurement>& all);

}  // namespace netstack::tools::bench

#endif  // TOOLS_TCP_BENCHMARK_DRIVER_REPORT_H_
