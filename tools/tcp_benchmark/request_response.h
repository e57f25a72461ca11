// Request/response latency tests in netperf's style, on any bench::Net:
//
//   RR   (TCP_RR):  one connection; a 1-byte request, a 1-byte response,
//                   the next request at once, for the duration.
//   CRR  (TCP_CRR): connect, a 1-byte request, a 1-byte response, close,
//                   the next connect at once, for the duration.
//
// RrServer answers both: every byte it reads is answered with one byte,
// on any number of connections, until Stop(). RrClient runs one test and
// ends with RrResult or an error; it never waits forever: a response (or,
// in CRR, a connect) that takes longer than `response_timeout` ends the
// test with DeadlineExceeded, and a server that closes the connection or
// resets it ends it with Unavailable. This is not iperf3's protocol: a
// stock iperf3 cannot be either end.
//
//   UDP_RR (netperf's UDP_RR, kernel sockets only): RunUdpRrClient sends
//   a 1-byte datagram and waits, blocking, for the same byte back, the
//   next request at once, for the duration. The byte is a sequence
//   number: an answer with another byte (a late answer to an earlier
//   request) is dropped, and a request not answered within
//   `response_timeout` is lost and the next one goes. UdpRrServer sends
//   every datagram back to its sender, on an EventLoop.
#ifndef TOOLS_TCP_BENCHMARK_REQUEST_RESPONSE_H_
#define TOOLS_TCP_BENCHMARK_REQUEST_RESPONSE_H_

#include <cstdint>
#include <cstdio>
#include <list>
#include <memory>
#include <string>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "netstack/base/time.h"
#include "netstack/eventloop/event_loop.h"
#include "netstack/eventloop/timer_wheel.h"
#include "netstack/transport/address.h"
#include "tools/tcp_benchmark/bench_net.h"

namespace netstack::tools::bench {

enum class RrMode { kRr, kCrr, kUdpRr };
const char* RrModeName(RrMode mode);  // "rr", "crr", "udp-rr"

// The nearest-rank percentile of latencies in nanoseconds, in
// microseconds: the value at index floor(q * n) of the sorted samples (the
// last when q * n >= n); 0 when there are none. Reorders `ns`.
double PercentileUs(std::vector<uint32_t>& ns, double q);

struct RrClientOptions {
  transport::SocketAddress server;
  RrMode mode = RrMode::kRr;
  double duration = 10;  // seconds
  Duration response_timeout = absl::Seconds(5);
  StreamOptions stream_options;  // no_delay matters: Nagle would add 40 ms
};

struct RrResult {
  RrMode mode = RrMode::kRr;
  uint64_t transactions = 0;  // completed within the duration
  uint64_t connections = 0;   // connects started (RR: 1)
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
  uint64_t lost = 0;   // UDP_RR: requests not answered within the timeout
  double seconds = 0;  // from the first connect to the end
  // Per transaction (RR: request written to response read; CRR: connect
  // started to response read), microseconds.
  double p50_us = 0;
  double p99_us = 0;
  double max_us = 0;

  double transactions_per_second() const {
    return seconds > 0 ? transactions / seconds : 0;
  }
  // netperf's figure: the duration over the transactions.
  double mean_us() const {
    return transactions > 0 ? seconds * 1e6 / transactions : 0;
  }
};

// "rr: 41523 transactions in 5.00 s (1 connection): 8304.6 trans/s,
// mean 120.4 us, p50 112.0 us, p99 210.0 us, max 1503.0 us\n"; UDP_RR
// adds ", 3 lost".
std::string FormatRrText(const RrResult& r);
// One JSON object: mode, transactions, connections, bytes_sent,
// bytes_received, lost, seconds, transactions_per_second, mean_us,
// p50_us, p99_us, max_us, plus "server" and "stack".
std::string FormatRrJson(const RrResult& r, const std::string& server,
                         const std::string& stack);

class RrClient {
 public:
  // `on_done` runs (from the loop) once the test ended either way.
  RrClient(Net& net, RrClientOptions options,
           absl::AnyInvocable<void()> on_done);

  absl::Status Start();
  // Ends the test now (Ctrl-C): an Aborted error.
  void Interrupt();

  bool done() const { return done_; }
  // After done(): the figures, or why the test failed.
  const absl::StatusOr<RrResult>& result() const { return result_; }

 private:
  absl::Status Connect();
  void OnReady(uint32_t bits);
  absl::Status Step(uint32_t bits);
  absl::Status SendRequest();
  void OnTick(Instant now);
  void Finish(absl::Status status);

  Net& net_;
  eventloop::EventLoop& loop_;
  RrClientOptions options_;
  absl::AnyInvocable<void()> on_done_;
  std::unique_ptr<Stream> stream_;
  // The CRR connection just closed: it may be the one whose handler is
  // running, so it is destroyed at the next connection's end, not now.
  std::unique_ptr<Stream> retired_;
  bool connected_ = false;
  bool awaiting_response_ = false;
  Instant start_;
  Instant end_;
  Instant transaction_start_;
  std::vector<uint32_t> latencies_ns_;
  RrResult figures_;
  eventloop::Timer tick_;  // the end of the duration and the timeout
  bool done_ = false;
  absl::StatusOr<RrResult> result_ = absl::UnknownError("not finished");
};

struct UdpRrOptions {
  transport::SocketAddress server;
  double duration = 10;  // seconds
  Duration response_timeout = absl::Milliseconds(200);
};

// Runs UDP_RR to its end (it blocks for the duration). Unavailable when
// no request was answered or the server's port is closed (ICMP port
// unreachable).
absl::StatusOr<RrResult> RunUdpRrClient(const UdpRrOptions& options);

class UdpRrServer : public eventloop::Handler {
 public:
  UdpRrServer(eventloop::EventLoop& loop, transport::SocketAddress local);
  ~UdpRrServer() override;
  UdpRrServer(const UdpRrServer&) = delete;
  UdpRrServer& operator=(const UdpRrServer&) = delete;

  absl::Status Start();
  void Stop();

  uint64_t datagrams() const { return datagrams_; }  // sent back

  void OnReadable(Instant now) override;

 private:
  eventloop::EventLoop& loop_;
  transport::SocketAddress local_;
  int fd_ = -1;
  uint64_t datagrams_ = 0;
};

class RrServer {
 public:
  RrServer(Net& net, transport::SocketAddress local, StreamOptions options,
           std::FILE* progress);
  ~RrServer();

  absl::Status Start();
  void Stop();  // closes the listener and every connection

  uint64_t connections() const { return connections_; }
  uint64_t bytes_answered() const { return bytes_answered_; }

 private:
  struct Session {
    std::unique_ptr<Stream> stream;
    uint64_t owed = 0;  // bytes read, not yet answered (a full send buffer)
  };
  void OnAccept();
  void OnReady(std::list<Session>::iterator it, uint32_t bits);
  void Retire(std::list<Session>::iterator it);

  Net& net_;
  transport::SocketAddress local_;
  StreamOptions options_;
  std::FILE* progress_;
  std::unique_ptr<Listener> listener_;
  std::list<Session> sessions_;
  // Closed sessions, destroyed from the listener's handler or Stop(), never
  // from their own.
  std::list<Session> retired_;
  uint64_t connections_ = 0;
  uint64_t bytes_answered_ = 0;
};

}  // namespace netstack::tools::bench

#endif  // TOOLS_TCP_BENCHMARK_REQUEST_RESPONSE_H_
