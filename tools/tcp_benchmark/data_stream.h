// One iperf3 data stream: a bench::Stream that first writes its greeting
// (the client's cookie), then sends filler with SendBulk when started as
// the sender, and always drains and counts whatever arrives with
// DiscardBulk. Each readiness call moves a bounded amount; when the budget
// runs out the stream resumes itself from a zero-delay timer, so streams
// share the loop fairly and an edge-triggered Stream loses no wake-up.
#ifndef TOOLS_TCP_BENCHMARK_DATA_STREAM_H_
#define TOOLS_TCP_BENCHMARK_DATA_STREAM_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "netstack/base/time.h"
#include "netstack/eventloop/event_loop.h"
#include "netstack/eventloop/timer_wheel.h"
#include "tools/tcp_benchmark/bench_net.h"

namespace netstack::tools::bench {

class DataStream {
 public:
  // The stream failed, or the peer closed it, before Stop(). Runs from the
  // stream's handler or timer; must not destroy the DataStream.
  using FailureCallback = absl::AnyInvocable<void(int id, absl::Status)>;

  // `greeting` is written first (empty: nothing). `block_size` bounds one
  // SendBulk call (iperf3's "len").
  DataStream(int id, std::unique_ptr<Stream> stream,
             eventloop::EventLoop& loop, std::string greeting,
             size_t block_size, FailureCallback on_failure);
  ~DataStream();
  DataStream(const DataStream&) = delete;
  DataStream& operator=(const DataStream&) = delete;

  // Marks the start of the measurement; a sender starts sending.
  void Start(bool sender, Instant now);
  // Marks the end: a sender stops sending. Receiving goes on (a peer
  // blocked in a write must keep moving to read its control connection)
  // and still counts, as iperf3 does, until Close().
  void Stop(Instant now);
  void Close();

  int id() const { return id_; }
  bool sender() const { return sender_; }
  bool greeted() const { return greeting_.empty(); }
  // Bytes this side sent (sender) or received (receiver) since Start.
  uint64_t bytes() const { return sender_ ? sent_ : received_ - received_at_start_; }
  // bytes() since the previous call.
  uint64_t TakeIntervalBytes();
  // Segments retransmitted since Start (the sender's count).
  uint64_t Retransmits() const;
  // Seconds from Start to Stop (to now while running).
  double Seconds(Instant now) const;
  StreamInfo Info() const { return stream_->Info(); }
  std::string Describe() const { return stream_->Describe(); }

 private:
  static constexpr size_t kReceiveChunk = 256 * 1024;
  static constexpr size_t kBudgetBytes = 16 * 1024 * 1024;

  void OnReady(uint32_t bits);
  // Both return false when the stream failed or closed (and was handled).
  bool WriteGreeting();
  bool Drain(bool& budget_left);
  bool Pump(bool& budget_left);
  void Fail(absl::Status status);
  bool running() const { return started_ && !stopped_; }

  const int id_;
  std::unique_ptr<Stream> stream_;
  eventloop::EventLoop& loop_;
  std::string greeting_;
  const size_t block_size_;
  FailureCallback on_failure_;
  eventloop::Timer resume_;

  bool closed_ = false;
  bool started_ = false;
  bool stopped_ = false;
  bool sender_ = false;
  Instant start_time_;
  Instant stop_time_;
  uint64_t sent_ = 0;
  uint64_t received_ = 0;
  uint64_t received_at_start_ = 0;
  uint64_t interval_mark_ = 0;
  uint64_t retransmits_at_start_ = 0;
  uint64_t retransmits_at_stop_ = 0;
};

}  // namespace netstack::tools::bench

#endif  // TOOLS_TCP_BENCHMARK_DATA_STREAM_H_
