// The iperf3 server role (iperf3 -s): listens on a port and runs one test
// at a time (ServerSession); a second client meanwhile gets ACCESS_DENIED,
// as from stock iperf3. After each test it prints the summary (text, or
// one JSON object per test with --json) and serves the next, unless
// one_off.
#ifndef TOOLS_TCP_BENCHMARK_IPERF3_SERVER_H_
#define TOOLS_TCP_BENCHMARK_IPERF3_SERVER_H_

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "netstack/eventloop/timer_wheel.h"
#include "netstack/transport/address.h"
#include "tools/tcp_benchmark/bench_net.h"
#include "tools/tcp_benchmark/iperf3_server_session.h"
#include "tools/tcp_benchmark/test_summary.h"

namespace netstack::tools::bench {

struct ServerOptions {
  transport::SocketAddress local;  // port; the unspecified address = any
  bool one_off = false;
  bool json = false;
  std::string stack_name;
  StreamOptions stream_options;
  SessionOptions session;
  std::FILE* out = stdout;  // summaries (JSON with --json)
};

class Iperf3Server {
 public:
  // `on_exit(status)` runs once the server is done: after the one test
  // with one_off (0 if it succeeded, 1 if not), or after Stop() (0).
  Iperf3Server(Net& net, ServerOptions options,
               absl::AnyInvocable<void(int exit_status)> on_exit);
  ~Iperf3Server();

  absl::Status Start();
  // SIGINT/SIGTERM: terminates a running test and exits.
  void Stop();

 private:
  void OnAcceptable();
  void OnSessionDone(absl::StatusOr<TestSummary> result);
  void Reap(Instant now);
  void Exit(int status);

  Net& net_;
  eventloop::EventLoop& loop_;
  ServerOptions options_;
  absl::AnyInvocable<void(int)> on_exit_;
  std::unique_ptr<Listener> listener_;
  std::unique_ptr<ServerSession> session_;
  // Finished sessions, destroyed from a timer (not from their handlers).
  std::vector<std::unique_ptr<ServerSession>> finished_;
  eventloop::Timer reaper_;
  bool exiting_ = false;
};

}  // namespace netstack::tools::bench

#endif  // TOOLS_TCP_BENCHMARK_IPERF3_SERVER_H_
