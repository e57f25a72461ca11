// The iperf3 control connection: a bench::Stream with a FrameReader on
// the way in and a queue on the way out. Whatever arrives is appended to
// reader() and the owner is told; writes that the socket cannot take yet
// wait for writability. EOF is remembered (eof()), not an error: whether
// it is one depends on where in the protocol the owner is.
#ifndef TOOLS_TCP_BENCHMARK_CONTROL_CHANNEL_H_
#define TOOLS_TCP_BENCHMARK_CONTROL_CHANNEL_H_

#include <memory>
#include <string>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "tools/tcp_benchmark/bench_net.h"
#include "tools/tcp_benchmark/iperf3_protocol.h"

namespace netstack::tools::bench {

class ControlChannel {
 public:
  // on_input: bytes or EOF arrived (see reader(), eof()). on_failure: the
  // connection failed (reset, a write error); the channel is closed. Both
  // run from the stream's handler and must not destroy the channel.
  // on_connected (optional): an outgoing connect completed.
  struct Callbacks {
    absl::AnyInvocable<void()> on_input;
    absl::AnyInvocable<void(absl::Status)> on_failure;
    absl::AnyInvocable<void()> on_connected;
  };

  ControlChannel(std::unique_ptr<Stream> stream, Callbacks callbacks,
                 bool connecting = false);
  ~ControlChannel();
  ControlChannel(const ControlChannel&) = delete;
  ControlChannel& operator=(const ControlChannel&) = delete;

  iperf3::FrameReader& reader() { return reader_; }
  bool eof() const { return eof_; }
  bool closed() const { return closed_; }

  // Queues `bytes` and writes what the socket takes now. An error closes
  // the channel and is returned (on_failure is not called for it).
  absl::Status Send(const std::string& bytes);
  // Nothing left in the queue.
  bool flushed() const { return out_.empty(); }

  // Closes now, dropping anything still queued. Idempotent.
  void Close();
  std::string Describe() const;

 private:
  void OnReady(uint32_t bits);
  absl::Status ReadAll();
  absl::Status Flush();
  void Fail(absl::Status status);

  std::unique_ptr<Stream> stream_;
  Callbacks callbacks_;
  iperf3::FrameReader reader_;
  std::string out_;
  bool connecting_;
  bool eof_ = false;
  bool closed_ = false;
};

}  // namespace netstack::tools::bench

#endif  // TOOLS_TCP_BENCHMARK_CONTROL_CHANNEL_H_
