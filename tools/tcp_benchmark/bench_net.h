// The network a tcp_benchmark role runs on: the host kernel's sockets
// (kernel_net.h) or a netstack Stack on a link (netstack_net.h). The
// iperf3 protocol code (iperf3_*.h) sees only these interfaces, so the
// same client and server logic measures both stacks.
//
// Everything is non-blocking and runs on one EventLoop. A stream reports
// readiness through its handler; the handler may call Read/Write/Close on
// the stream (but must not destroy it from inside the call).
#ifndef TOOLS_TCP_BENCHMARK_BENCH_NET_H_
#define TOOLS_TCP_BENCHMARK_BENCH_NET_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "netstack/base/time.h"
#include "netstack/eventloop/event_loop.h"
#include "netstack/transport/address.h"

namespace netstack::tools::bench {

// Readiness bits passed to a handler (the same values as
// transport::event::kReadable/kWritable/kError/kHangup).
namespace ready {
inline constexpr uint32_t kReadable = 1u << 0;
inline constexpr uint32_t kWritable = 1u << 1;
inline constexpr uint32_t kError = 1u << 2;
inline constexpr uint32_t kHangup = 1u << 3;
}  // namespace ready

// Transfer counters a stream can report (iperf3's "retransmits").
struct StreamInfo {
  uint64_t retransmits = 0;   // segments retransmitted by this side
  uint32_t snd_cwnd_bytes = 0;
  uint32_t rtt_us = 0;
};

class Stream {
 public:
  using Handler = std::function<void(uint32_t ready_bits)>;
  virtual ~Stream() = default;

  // Non-blocking. Errors carry an errno (netstack/transport/errors.h):
  // transport::IsWouldBlock(status) when nothing can move now. Read
  // returns 0 at end of stream.
  virtual absl::StatusOr<size_t> Read(std::span<uint8_t> out) = 0;
  virtual absl::StatusOr<size_t> Write(std::span<const uint8_t> in) = 0;

  // Bulk data for the measurement: send up to `max` bytes of filler, or
  // consume and drop up to `max` received bytes, the cheapest way the
  // stack allows (netstack: WriteView of shared chunks and ReadViews;
  // kernel: send/recv, or splice/vmsplice/sendfile as configured). Same
  // return conventions as Write/Read.
  virtual absl::StatusOr<size_t> SendBulk(size_t max) = 0;
  virtual absl::StatusOr<size_t> DiscardBulk(size_t max) = 0;

  // Called when the stream may have become readable/writable or failed.
  // Writability is reported only while WantWritable(true).
  virtual void SetHandler(Handler handler) = 0;
  virtual void WantWritable(bool want) = 0;

  // Half-close (FIN after queued data) and full close. Close() is final:
  // no handler call follows it.
  virtual void ShutdownWrite() = 0;
  virtual void Close() = 0;

  virtual StreamInfo Info() const = 0;
  // "10.9.0.2:5201 -> 10.9.0.1:41234"
  virtual std::string Describe() const = 0;
};

class Listener {
 public:
  using Handler = std::function<void()>;  // a connection may be waiting
  virtual ~Listener() = default;
  // WouldBlock when no connection is waiting.
  virtual absl::StatusOr<std::unique_ptr<Stream>> Accept() = 0;
  virtual void SetHandler(Handler handler) = 0;
};

// Socket options the benchmark sets on every data stream.
struct StreamOptions {
  bool no_delay = true;
  // Congestion control: "" = the stack's default, "reno", "cubic".
  std::string congestion_control;
  // 0 = the stack's default.
  int send_buffer = 0;
  int receive_buffer = 0;
};

class Net {
 public:
  virtual ~Net() = default;
  virtual eventloop::EventLoop& loop() = 0;
  virtual absl::StatusOr<std::unique_ptr<Listener>> Listen(
      const transport::SocketAddress& local, const StreamOptions& options) = 0;
  // Starts a connect; the stream reports kWritable once established, or
  // kError (and Read/Write then return the error, e.g. ECONNREFUSED).
  virtual absl::StatusOr<std::unique_ptr<Stream>> Connect(
      const transport::SocketAddress& remote, const StreamOptions& options) = 0;
  // "kernel" or "netstack (packet:veth1@b, sw GSO 65535)".
  virtual std::string Describe() const = 0;
  // Called before the process exits, after every stream was closed:
  // keeps the network running until what the streams wrote (and their
  // FINs) is acknowledged, at most `max`. The kernel does this by itself;
  // a userspace stack dies with its process.
  virtual void Linger(Duration max) {}
  // Counters worth printing at exit (drops with their reasons, link
  // stats); empty when there is nothing to say.
  virtual std::string FormatCounters() const { return {}; }
};

}  // namespace netstack::tools::bench

#endif  // TOOLS_TCP_BENCHMARK_BENCH_NET_H_
