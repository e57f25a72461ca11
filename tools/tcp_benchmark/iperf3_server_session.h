// One test on the iperf3 server: from the client's control connection
// (its cookie) through parameters, the data streams, the measurement and
// the results exchange, to IPERF_DONE. Anything the client does wrong
// (bad cookie or JSON, an unexpected state, closing early, going silent)
// ends the session with an error and closes all its connections; the
// server itself carries on.
#ifndef TOOLS_TCP_BENCHMARK_IPERF3_SERVER_SESSION_H_
#define TOOLS_TCP_BENCHMARK_IPERF3_SERVER_SESSION_H_

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "netstack/eventloop/timer_wheel.h"
#include "tools/tcp_benchmark/bench_net.h"
#include "tools/tcp_benchmark/control_channel.h"
#include "tools/tcp_benchmark/cpu_usage.h"
#include "tools/tcp_benchmark/data_stream.h"
#include "tools/tcp_benchmark/interval_reporter.h"
#include "tools/tcp_benchmark/iperf3_protocol.h"
#include "tools/tcp_benchmark/test_summary.h"

namespace netstack::tools::bench {

struct SessionOptions {
  double interval = 1;
  Duration phase_timeout = absl::Seconds(10);
  std::FILE* progress = stdout;
};

class ServerSession {
 public:
  // Called once, from the loop, when the session ends: the summary or the
  // error. The session may be destroyed only after this returned (defer
  // it: the call comes from one of the session's own handlers).
  using DoneCallback = absl::AnyInvocable<void(absl::StatusOr<TestSummary>)>;

  ServerSession(eventloop::EventLoop& loop, std::unique_ptr<Stream> control,
                SessionOptions options, DoneCallback on_done);
  ~ServerSession();

  // True while the session waits for its data connections.
  bool accepting_streams() const { return phase_ == Phase::kCreateStreams; }
  // A new connection during CREATE_STREAMS: it becomes a data stream if
  // it starts with our cookie, and is refused (ACCESS_DENIED) otherwise.
  void OfferConnection(std::unique_ptr<Stream> stream);
  // Ends the test: SERVER_TERMINATE to the client.
  void Terminate();

  bool reverse() const { return params_.reverse; }
  // The client closed without sending a byte (a port probe): not a test.
  bool empty_connection() const { return empty_connection_; }
  std::string peer() const { return peer_; }

 private:
  enum class Phase { kCookie, kParams, kCreateStreams, kRunning, kResults,
                     kDone, kFinished };
  static const char* PhaseName(Phase phase);
  struct Pending;

  void OnControlInput();
  absl::Status Step(bool& progressed);
  absl::Status HandleCookie(const std::string& cookie);
  absl::Status HandleParams(const JsonValue& json);
  absl::Status HandleRunningState(int8_t state);
  absl::Status HandleClientResults(const JsonValue& json);
  void OnPendingReadable(Pending* pending);
  void PromotePending(Instant now);
  absl::Status StartTest();
  void SetPhase(Phase phase);
  // Ends the session; with an error, tells the client first when it can
  // (SERVER_ERROR with `iperf_errno`, 0: nothing).
  void Finish(absl::StatusOr<TestSummary> result, int32_t iperf_errno = 0);

  eventloop::EventLoop& loop_;
  SessionOptions options_;
  DoneCallback on_done_;
  std::unique_ptr<ControlChannel> control_;
  std::string peer_;
  std::string cookie_;
  iperf3::TestParams params_;
  std::vector<std::unique_ptr<Pending>> pending_;
  std::vector<std::unique_ptr<DataStream>> streams_;
  Phase phase_ = Phase::kCookie;
  CpuMeter cpu_;
  IntervalReporter intervals_;
  eventloop::Timer watchdog_;
  eventloop::Timer promote_;
  // A data stream that ends during the test is reported only if the
  // control connection does not explain it soon after: a client stopped
  // by Ctrl-C closes its data streams and sends CLIENT_TERMINATE on the
  // control connection, and the two reach us in either order.
  void OnStreamFailed(int id, absl::Status status);
  absl::Status stream_failure_;
  eventloop::Timer stream_grace_;
  iperf3::TestResults local_results_;
  TestSummary summary_;  // once the client's results are in
  bool empty_connection_ = false;
};

}  // namespace netstack::tools::bench

#endif  // TOOLS_TCP_BENCHMARK_IPERF3_SERVER_SESSION_H_
