// The end-of-test summary both roles print: the sender's and the
// receiver's results (iperf3::TestResults, one of them from the peer)
// matched stream by stream, as iperf3-style text or as one JSON object.
#ifndef TOOLS_TCP_BENCHMARK_TEST_SUMMARY_H_
#define TOOLS_TCP_BENCHMARK_TEST_SUMMARY_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "netstack/base/time.h"
#include "tools/tcp_benchmark/cpu_usage.h"
#include "tools/tcp_benchmark/data_stream.h"
#include "tools/tcp_benchmark/iperf3_protocol.h"

namespace netstack::tools::bench {

// This side's results document from its streams (what it sends at
// EXCHANGE_RESULTS).
iperf3::TestResults LocalResults(
    const std::vector<std::unique_ptr<DataStream>>& streams, bool sender,
    const CpuUtil& cpu, Instant now);

struct StreamSummary {
  int id = 0;
  uint64_t sender_bytes = 0;
  double sender_seconds = 0;
  uint64_t retransmits = 0;
  uint64_t receiver_bytes = 0;
  double receiver_seconds = 0;
};

struct TestSummary {
  std::vector<StreamSummary> streams;
  uint64_t sender_bytes = 0;
  uint64_t receiver_bytes = 0;
  double sender_seconds = 0;    // the longest stream's
  double receiver_seconds = 0;
  uint64_t retransmits = 0;
  CpuUtil sender_cpu;
  CpuUtil receiver_cpu;
};

// Error when the two documents do not name the same streams.
absl::StatusOr<TestSummary> Summarize(const iperf3::TestResults& sender,
                                      const iperf3::TestResults& receiver);

// "- - - ...", the header, a sender and a receiver line per stream, [SUM]
// lines with several streams, and the CPU line. `local_is_sender` decides
// which CPU figures are "local".
std::string FormatSummaryText(const TestSummary& summary, bool local_is_sender);

struct SummaryContext {
  std::string role;   // "client" or "server"
  std::string stack;  // "kernel" or "netstack"
  std::string net;    // Net::Describe()
  std::string peer;   // the control connection
  bool reverse = false;
};
// One JSON object: role, stack, net, peer, reverse, streams, bytes (the
// receiver's), sender_bytes, seconds, gbps, retransmits, sender_cpu_util,
// receiver_cpu_util.
std::string FormatSummaryJson(const TestSummary& summary,
                              const SummaryContext& context);

}  // namespace netstack::tools::bench

#endif  // TOOLS_TCP_BENCHMARK_TEST_SUMMARY_H_
