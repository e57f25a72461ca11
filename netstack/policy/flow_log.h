// --flow-log FILE (issue #33): one JSON object per line for each flow
// opened or refused, each flow closed (bytes each way, duration), and
// each DNS query the policy denied. docs/POLICY.md documents the schema.
//
// Bounded, so that a guest making 100,000 denied attempts a second can
// neither fill the disk nor slow the loop:
//   - size: past `max_bytes` the file is renamed to FILE.1 (replacing the
//     previous one) and a new FILE is started: at most 2 * max_bytes on
//     disk;
//   - rate: at most `max_lines_per_second` lines (a token bucket with a
//     second's burst); past it lines are dropped and counted, and the next
//     line written says how many were dropped since the last one
//     ("dropped": N).
// Lines are formatted into a buffer and written once per loop turn
// (Flush), or when the buffer holds 64 KiB; a write error is counted and
// the line dropped, never fatal.
//
// The file and its directory are opened at Open, before the sandbox
// detaches the filesystem: rotation uses renameat/openat on the
// directory's fd.
#ifndef NETSTACK_POLICY_FLOW_LOG_H_
#define NETSTACK_POLICY_FLOW_LOG_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "netstack/base/time.h"
#include "netstack/policy/policy.h"
#include "netstack/transport/address.h"

namespace netstack::policy {

struct FlowEvent {
  enum class Kind : uint8_t { kOpened, kRefused, kClosed, kDnsDenied };
  Kind kind = Kind::kOpened;
  Protocol protocol = kTcp;
  transport::SocketAddress guest;  // the guest's source
  transport::SocketAddress dst;    // the destination (port 0 for ICMP)
  // The name the destination was pinned for (kOpened, kRefused,
  // kClosed), or the query's name (kDnsDenied); empty if none.
  std::string_view name;
  Verdict verdict;           // kOpened, kRefused, kDnsDenied
  std::string_view rule;     // the deciding rule's text, if any
  uint64_t bytes_out = 0;    // kClosed: guest -> host
  uint64_t bytes_in = 0;     // kClosed: host -> guest
  absl::Duration duration;   // kClosed
};

struct FlowLogCounters {
  uint64_t lines = 0;
  uint64_t dropped_rate = 0;
  uint64_t rotations = 0;
  uint64_t write_errors = 0;
};

class FlowLog {
 public:
  struct Options {
    std::string path;
    uint64_t max_bytes = 64ull << 20;
    uint32_t max_lines_per_second = 1000;
  };
  static absl::StatusOr<std::unique_ptr<FlowLog>> Open(const Options& options,
                                                       Instant now);
  ~FlowLog();  // flushes

  void Record(const FlowEvent& event, Instant now);
  void Flush();

  const FlowLogCounters& counters() const { return counters_; }
  // The directory's O_PATH fd, which the sandbox's seccomp filter must let
  // openat (O_WRONLY | O_CREAT | O_APPEND) and renameat use.
  int dir_fd() const;
  std::string FormatCounters() const;  // "flow_log.lines N\n..."

 private:
  FlowLog() = default;
  FlowLogCounters counters_;
  // The implementation's state (fds, buffer, bucket) lives in the .cc.
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace netstack::policy

#endif  // NETSTACK_POLICY_FLOW_LOG_H_
