#include "netstack/policy/flow_log.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "link/fd_util.h"

namespace netstack::policy {
namespace {

// Past this many buffered bytes a Record writes at once rather than
// waiting for the loop turn's Flush.
constexpr size_t kFlushThreshold = 64 * 1024;

// O_APPEND: a line is never written over another process's (logrotate
// copytruncate, an operator's `: > FILE`). The seccomp filter admits
// openat with these flags on the directory's fd, and renameat there
// (netstack/sandbox/least_privilege.h, flow_log_dir_fd).
constexpr int kOpenFlags = O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC;
constexpr mode_t kOpenMode = 0640;

// The reason names straight from policy.h's list, so that the log does
// not depend on the policy library's definitions being linked.
constexpr std::string_view kReasonNames[] = {
#define NETSTACK_POLICY_NAME(e, name, allow) name,
    NETSTACK_POLICY_REASONS(NETSTACK_POLICY_NAME)
#undef NETSTACK_POLICY_NAME
};
static_assert(std::size(kReasonNames) == kReasonCount);

std::string_view EventName(FlowEvent::Kind k) {
  switch (k) {
    case FlowEvent::Kind::kOpened:
      return "opened";
    case FlowEvent::Kind::kRefused:
      return "refused";
    case FlowEvent::Kind::kClosed:
      return "closed";
    case FlowEvent::Kind::kDnsDenied:
      return "dns_denied";
  }
  return "unknown";
}

std::string_view ProtocolName(Protocol p) {
  switch (p) {
    case kTcp:
      return "tcp";
    case kUdp:
      return "udp";
    case kIcmp:
      return "icmp";
    default:
      return "any";
  }
}

// A JSON string. Names come from the guest's DNS queries and may hold
// any byte: control characters and every byte past ASCII are written as
// \u00XX, so the line stays valid JSON (and UTF-8) whatever the guest
// sent; the byte is recoverable as that code point's low 8 bits.
void AppendJsonString(std::string* out, std::string_view s) {
  out->push_back('"');
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out->push_back('\\');
      out->push_back(static_cast<char>(c));
    } else if (c < 0x20 || c >= 0x7f) {
      absl::StrAppendFormat(out, "\\u%04x", c);
    } else {
      out->push_back(static_cast<char>(c));
    }
  }
  out->push_back('"');
}

void AppendMember(std::string* out, std::string_view key,
                  std::string_view value) {
  // (Debian's Abseil: absl::string_view is its own type, not std's.)
  out->append(",\"").append(key).append("\":");
  AppendJsonString(out, value);
}

}  // namespace

struct FlowLog::State {
  link::UniqueFd dir;       // FILE's directory, O_PATH
  std::string name;         // FILE's last component
  std::string rotated;      // FILE.1's
  link::UniqueFd fd;        // FILE, O_APPEND; invalid after a failed reopen
  uint64_t max_bytes = 0;
  double rate = 0;          // lines per second
  double tokens = 0;        // the bucket, at most `rate`
  Instant refilled;         // when `tokens` was last brought up to date
  // Wall-clock time minus the loop's (monotonic) time at Open: the
  // line's "time" is `now` plus this, so that the clock is read once and
  // a test's fake clock gives stable lines.
  absl::Duration wall_offset;
  uint64_t file_bytes = 0;  // FILE's size with the buffer written
  std::string buffer;       // whole lines not yet written
  uint64_t buffered_lines = 0;
  uint64_t dropped_since_line = 0;  // for the next line's "dropped"

  void Write(FlowLogCounters& c);
  void Rotate(FlowLogCounters& c);
};

absl::StatusOr<std::unique_ptr<FlowLog>> FlowLog::Open(const Options& options,
                                                       Instant now) {
  if (options.max_bytes == 0) {
    return absl::InvalidArgumentError("the flow log's size cap must be > 0");
  }
  if (options.max_lines_per_second == 0) {
    return absl::InvalidArgumentError("the flow log's rate must be > 0");
  }
  auto state = std::make_unique<State>();
  const size_t slash = options.path.rfind('/');
  const std::string dir = slash == std::string::npos ? "."
                          : slash == 0              ? "/"
                                        : options.path.substr(0, slash);
  state->name = slash == std::string::npos ? options.path
                                           : options.path.substr(slash + 1);
  if (state->name.empty() || state->name == "." || state->name == "..") {
    return absl::InvalidArgumentError(
        absl::StrCat("'", options.path, "' does not name a file"));
  }
  state->rotated = state->name + ".1";
  // FILE is opened, and reopened after each rotation, relative to its
  // directory's fd: after the sandbox detaches the filesystem no path
  // leads there any more.
  state->dir.reset(::open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!state->dir.valid()) {
    return link::ErrnoStatus(errno, absl::StrCat("open directory '", dir, "'"));
  }
  state->fd.reset(
      ::openat(state->dir.get(), state->name.c_str(), kOpenFlags, kOpenMode));
  if (!state->fd.valid()) {
    return link::ErrnoStatus(errno, absl::StrCat("open '", options.path, "'"));
  }
  struct stat st {};
  if (::fstat(state->fd.get(), &st) != 0) {
    return link::ErrnoStatus(errno, absl::StrCat("stat '", options.path, "'"));
  }
  if (!S_ISREG(st.st_mode)) {
    // A FIFO or /dev/null is fine to write to but cannot be rotated.
    state->max_bytes = UINT64_MAX;
  } else {
    state->max_bytes = options.max_bytes;
  }
  state->file_bytes = static_cast<uint64_t>(st.st_size);
  state->rate = options.max_lines_per_second;
  state->tokens = state->rate;
  state->refilled = now;
  state->wall_offset = absl::Now() - now;
  std::unique_ptr<FlowLog> log(new FlowLog());
  log->state_ = std::move(state);
  return log;
}

FlowLog::~FlowLog() {
  if (state_ != nullptr) Flush();
}

void FlowLog::Record(const FlowEvent& event, Instant now) {
  State& s = *state_;
  // The token bucket: `rate` lines a second, a second's worth of burst.
  if (now > s.refilled) {
    s.tokens = std::min(
        s.rate, s.tokens + absl::ToDoubleSeconds(now - s.refilled) * s.rate);
    s.refilled = now;
  }
  if (s.tokens < 1) {
    ++counters_.dropped_rate;
    ++s.dropped_since_line;
    return;
  }
  s.tokens -= 1;

  std::string line;
  line.reserve(256);
  absl::StrAppend(&line, "{\"time\":\"",
                  absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", now + s.wall_offset,
                                   absl::UTCTimeZone()),
                  "\"");
  AppendMember(&line, "event", EventName(event.kind));
  AppendMember(&line, "proto", ProtocolName(event.protocol));
  AppendMember(&line, "src", event.guest.ToString());
  AppendMember(&line, "dst", event.dst.ip.ToString());
  absl::StrAppend(&line, ",\"port\":", event.dst.port);
  if (!event.name.empty()) AppendMember(&line, "name", event.name);
  AppendMember(&line, "verdict", event.verdict.allow ? "allow" : "deny");
  const size_t reason = static_cast<size_t>(event.verdict.reason);
  AppendMember(&line, "reason",
               reason < kReasonCount ? kReasonNames[reason] : "unknown");
  if (!event.rule.empty()) AppendMember(&line, "rule", event.rule);
  if (event.kind == FlowEvent::Kind::kClosed) {
    absl::StrAppend(&line, ",\"bytes_out\":", event.bytes_out,
                    ",\"bytes_in\":", event.bytes_in, ",\"duration_ms\":",
                    absl::ToInt64Milliseconds(event.duration));
  }
  if (s.dropped_since_line > 0) {
    absl::StrAppend(&line, ",\"dropped\":", s.dropped_since_line);
    s.dropped_since_line = 0;
  }
  line += "}\n";

  // The size cap: FILE never grows past max_bytes, unless one line alone
  // is longer; FILE.1 holds the previous max_bytes at most.
  if (s.file_bytes > 0 && s.file_bytes + line.size() > s.max_bytes) {
    s.Write(counters_);
    s.Rotate(counters_);
  }
  s.buffer += line;
  s.file_bytes += line.size();
  ++s.buffered_lines;
  ++counters_.lines;
  if (s.buffer.size() >= kFlushThreshold) s.Write(counters_);
}

void FlowLog::Flush() { state_->Write(counters_); }

int FlowLog::dir_fd() const { return state_->dir.get(); }

void FlowLog::State::Write(FlowLogCounters& c) {
  State& s = *this;
  if (s.buffer.empty()) return;
  if (!s.fd.valid()) {  // a reopen after rotation failed: try again
    s.fd.reset(::openat(s.dir.get(), s.name.c_str(), kOpenFlags, kOpenMode));
  }
  size_t done = 0;
  bool failed = !s.fd.valid();
  while (!failed && done < s.buffer.size()) {
    const ssize_t n =
        ::write(s.fd.get(), s.buffer.data() + done, s.buffer.size() - done);
    if (n > 0) {
      done += static_cast<size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      failed = true;  // ENOSPC, EIO, EBADF...: the rest is lost
    }
  }
  if (failed) {
    ++c.write_errors;
    // What did not reach the file does not count towards its size; the
    // next line written says that lines are missing before it.
    s.file_bytes -= std::min<uint64_t>(s.file_bytes, s.buffer.size() - done);
    s.dropped_since_line += s.buffered_lines;  // at least partly lost
  }
  s.buffer.clear();
  s.buffered_lines = 0;
}

void FlowLog::State::Rotate(FlowLogCounters& c) {
  State& s = *this;
  const int dir_fd = s.dir.get();
  // FILE.1 is replaced; a failure leaves FILE as it is, and writing goes
  // on past the cap rather than losing lines, counted as an error.
  if (::renameat(dir_fd, s.name.c_str(), dir_fd, s.rotated.c_str()) != 0) {
    ++c.write_errors;
    return;
  }
  s.fd.reset(::openat(dir_fd, s.name.c_str(), kOpenFlags, kOpenMode));
  if (!s.fd.valid()) ++c.write_errors;  // Write tries again
  s.file_bytes = 0;
  ++c.rotations;
}

std::string FlowLog::FormatCounters() const {
  return absl::StrCat("flow_log.lines ", counters_.lines,
                      "\nflow_log.dropped_rate ", counters_.dropped_rate,
                      "\nflow_log.rotations ", counters_.rotations,
                      "\nflow_log.write_errors ", counters_.write_errors,
                      "\n");
}

}  // namespace netstack::policy
