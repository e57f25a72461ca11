// Process CPU use over a test, as iperf3 reports it: user and system time
// from getrusage(RUSAGE_SELF) as a percentage of the wall-clock time
// between Start() and Stop() (100 = one CPU busy the whole time).
#ifndef TOOLS_TCP_BENCHMARK_CPU_USAGE_H_
#define TOOLS_TCP_BENCHMARK_CPU_USAGE_H_

#include "netstack/base/time.h"

namespace netstack::tools::bench {

struct CpuUtil {
  double total = 0;
  double user = 0;
  double system = 0;
};

class CpuMeter {
 public:
  void Start(Instant now);
  // Fixes the result; later calls return the first one.
  CpuUtil Stop(Instant now);
  CpuUtil result() const { return result_; }

 private:
  Instant start_wall_;
  Duration start_user_;
  Duration start_system_;
  bool started_ = false;
  bool stopped_ = false;
  CpuUtil result_;
};

}  // namespace netstack::tools::bench

#endif  // TOOLS_TCP_BENCHMARK_CPU_USAGE_H_
