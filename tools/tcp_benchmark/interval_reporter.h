// Prints iperf3-style interval lines while a test runs: one line per
// stream and a [SUM] line with several, every `interval` seconds, from
// this side's own counts (the sender's lines carry retransmits).
#ifndef TOOLS_TCP_BENCHMARK_INTERVAL_REPORTER_H_
#define TOOLS_TCP_BENCHMARK_INTERVAL_REPORTER_H_

#include <cstdio>
#include <memory>
#include <vector>

#include "netstack/base/time.h"
#include "netstack/eventloop/event_loop.h"
#include "netstack/eventloop/timer_wheel.h"
#include "tools/tcp_benchmark/data_stream.h"

namespace netstack::tools::bench {

class IntervalReporter {
 public:
  // interval_seconds <= 0: no lines. `out` is not owned.
  IntervalReporter(eventloop::EventLoop& loop, double interval_seconds,
                   std::FILE* out);
  // `streams` must outlive Stop().
  void Start(const std::vector<std::unique_ptr<DataStream>>* streams,
             Instant now);
  // Prints the last, partial interval when it is at least a tenth of one.
  void Stop(Instant now);

 private:
  void Report(Instant now, bool rearm);

  eventloop::EventLoop& loop_;
  const Duration interval_;
  std::FILE* out_;
  eventloop::Timer timer_;
  const std::vector<std::unique_ptr<DataStream>>* streams_ = nullptr;
  std::vector<uint64_t> last_retransmits_;
  Instant start_;
  Instant last_;
};

}  // namespace netstack::tools::bench

#endif  // TOOLS_TCP_BENCHMARK_INTERVAL_REPORTER_H_
