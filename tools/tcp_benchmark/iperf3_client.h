// The iperf3 client role (iperf3 -c): one test against any iperf3 server
// (stock iperf3 -s or our own), TCP, with --reverse and --streams. It
// drives the control protocol (iperf3_protocol.h), owns the data streams,
// prints interval lines and the summary, and ends with the summary or an
// error; it never waits forever: every phase has a deadline.
#ifndef TOOLS_TCP_BENCHMARK_IPERF3_CLIENT_H_
#define TOOLS_TCP_BENCHMARK_IPERF3_CLIENT_H_

#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "netstack/eventloop/timer_wheel.h"
#include "netstack/transport/address.h"
#include "tools/tcp_benchmark/bench_net.h"
#include "tools/tcp_benchmark/control_channel.h"
#include "tools/tcp_benchmark/cpu_usage.h"
#include "tools/tcp_benchmark/data_stream.h"
#include "tools/tcp_benchmark/interval_reporter.h"
#include "tools/tcp_benchmark/test_summary.h"

namespace netstack::tools::bench {

struct ClientOptions {
  transport::SocketAddress server;
  double duration = 10;
  double interval = 1;
  int streams = 1;
  bool reverse = false;
  size_t block_size = iperf3::kDefaultBlockSize;
  StreamOptions stream_options;
  // How long the server may take to answer in each phase.
  Duration phase_timeout = absl::Seconds(10);
  std::FILE* progress = stdout;  // interval lines and connection notes
  uint64_t seed = 0;             // for the cookie; 0 = from the clock
};

class Iperf3Client {
 public:
  // `on_done` runs (from the loop) once the test ended either way.
  Iperf3Client(Net& net, ClientOptions options, absl::AnyInvocable<void()> on_done);
  ~Iperf3Client();

  absl::Status Start();
  // Ends the test now (Ctrl-C): CLIENT_TERMINATE to the server, an error.
  void Interrupt();

  bool done() const { return done_; }
  // After done(): the summary, or why the test failed.
  const absl::StatusOr<TestSummary>& result() const { return result_; }

 private:
  enum class Phase {
    kConnecting,
    kParamExchange,   // waiting for PARAM_EXCHANGE
    kCreateStreams,   // waiting for CREATE_STREAMS
    kTestStart,       // waiting for TEST_START
    kTestRunning,     // waiting for TEST_RUNNING
    kRunning,         // sending/receiving until the duration ends
    kExchangeResults, // TEST_END sent, waiting for EXCHANGE_RESULTS
    kResults,         // our results sent, waiting for the server's
    kDisplayResults,  // waiting for DISPLAY_RESULTS
    kServerError,     // SERVER_ERROR read, waiting for its two int32s
    kDone,
  };
  static const char* PhaseName(Phase phase);

  void OnControlInput();
  absl::Status Step(bool& progressed);
  absl::Status HandleState(int8_t state);
  absl::Status CreateStreams();
  void StartTest();
  void EndTest(Instant now);
  absl::Status SendResults();
  absl::Status HandleServerResults(const JsonValue& json);
  void SetPhase(Phase phase);
  void Finish(absl::Status status);

  Net& net_;
  eventloop::EventLoop& loop_;
  ClientOptions options_;
  absl::AnyInvocable<void()> on_done_;
  std::mt19937_64 rng_;
  std::string cookie_;
  std::unique_ptr<ControlChannel> control_;
  std::vector<std::unique_ptr<DataStream>> streams_;
  Phase phase_ = Phase::kConnecting;
  CpuMeter cpu_;
  IntervalReporter intervals_;
  eventloop::Timer end_timer_;
  eventloop::Timer watchdog_;
  iperf3::TestResults local_results_;
  bool done_ = false;
  absl::StatusOr<TestSummary> result_ = absl::UnknownError("not finished");
};

}  // namespace netstack::tools::bench

#endif  // TOOLS_TCP_BENCHMARK_IPERF3_CLIENT_H_
