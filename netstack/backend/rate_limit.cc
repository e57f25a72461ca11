#include "netstack/backend/rate_limit.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"

namespace netstack::backend {
namespace {

// Tokens are doubles: a refill computed to land exactly on an amount may
// fall a hair short of it, and a flow resumed for 1,500 bytes must get
// 1,500, not 1,499.
constexpr double kEpsilon = 1e-6;

// The timer never fires sooner than this after it is armed: a flow queued
// with tokens already there (a rounding case) must not spin the wheel.
constexpr Duration kMinTimerDelay = absl::Milliseconds(1);

}  // namespace

void RateBucket::Refill(Instant now) {
  if (refill_at_ == absl::InfinitePast()) {
    tokens_ = burst_;
  } else if (now > refill_at_) {
    tokens_ = std::min(
        burst_, tokens_ + absl::ToDoubleSeconds(now - refill_at_) * rate_);
  }
  refill_at_ = std::max(refill_at_, now);
}

Instant RateBucket::When(double n, Instant now) {
  Refill(now);
  n = std::min(n, burst_);
  if (tokens_ + kEpsilon >= n) return now;
  // Rounded up to the nanosecond, so the tokens are there by then.
  const double ns = std::ceil((n - tokens_) / rate_ * 1e9);
  return now + absl::Nanoseconds(static_cast<int64_t>(ns));
}

EgressLimiter::EgressLimiter(uint64_t rate, uint64_t burst,
                             eventloop::TimerWheel& timers, Resume resume)
    : bucket_(static_cast<double>(rate), static_cast<double>(burst)),
      datagram_share_(static_cast<double>(rate) / 2,
                      static_cast<double>(std::max<uint64_t>(
                          EgressLimiter::kMinWrite, burst / 2))),
      // A hundredth of a second's worth: about 100 wakes a second while
      // flows wait, whatever the rate.
      min_write_(std::min(burst, std::max(kMinWrite, rate / 100))),
      timers_(timers),
      timer_([this](Instant now) { OnTimer(now); }),
      resume_(std::move(resume)) {}

uint64_t EgressLimiter::Allow(Instant now) {
  if (!resuming_ && !waiters_.empty()) return 0;  // their turn first
  return static_cast<uint64_t>(bucket_.Available(now) + kEpsilon);
}

void EgressLimiter::Sent(uint64_t n) {
  bucket_.Consume(static_cast<double>(n));
  counters_.bytes += n;
  if (resuming_) counters_.bytes_delayed += n;
}

void EgressLimiter::Wait(const transport::FourTuple& flow, Instant now) {
  ++counters_.waits;
  if (resuming_) {
    // OnTimer arms the timer once the batch is done.
    (counters_.bytes > bytes_at_resume_ ? served_ : waiters_).push_back(flow);
    return;
  }
  waiters_.push_back(flow);
  Arm(now);
}

bool EgressLimiter::TakeDatagram(size_t n, Instant now) {
  // Taken from the share only while TCP flows wait: otherwise datagrams
  // may have the whole rate, and the share refills meanwhile.
  const double want = static_cast<double>(n) - kEpsilon;
  const bool share = waiters_.empty() || datagram_share_.Available(now) >= want;
  if (share && bucket_.Take(want, now)) {
    if (!waiters_.empty()) datagram_share_.Consume(want);
    bucket_.Consume(kEpsilon);
    counters_.bytes += n;
    return true;
  }
  ++counters_.datagrams_dropped;
  counters_.bytes_dropped += n;
  return false;
}

void EgressLimiter::Arm(Instant now) {
  if (timer_.scheduled() || waiters_.empty()) return;
  timers_.Schedule(timer_,
                   std::max(bucket_.When(static_cast<double>(min_write_), now),
                            now + kMinTimerDelay));
}

void EgressLimiter::OnTimer(Instant now) {
  batch_.swap(waiters_);
  resuming_ = true;
  for (const transport::FourTuple& flow : batch_) {
    bytes_at_resume_ = counters_.bytes;
    resume_(flow);
  }
  batch_.clear();
  resuming_ = false;
  waiters_.insert(waiters_.end(), served_.begin(), served_.end());
  served_.clear();
  Arm(now);
}

namespace {

absl::Status BadNewFlowRate(absl::string_view text) {
  return absl::InvalidArgumentError(
      absl::StrCat("'", text,
                   "': want N[/s][,burst=M], N new flows a second (0: no "
                   "limit)"));
}

// A whole number in [0, 1,000,000].
bool ParseCount(absl::string_view s, uint32_t* out) {
  if (s.empty() || s.size() > 7 ||
      !std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return false;
  }
  uint64_t v = 0;
  if (!absl::SimpleAtoi(s, &v) || v > 1000000) return false;
  *out = static_cast<uint32_t>(v);
  return true;
}

// Splits "VALUE[,burst=B]" into VALUE and B (empty if none); false if
// what follows the comma is not burst=.
bool SplitBurst(absl::string_view text, absl::string_view* value,
                absl::string_view* burst, bool* has_burst) {
  const size_t comma = text.find(',');
  *value = text.substr(0, comma);
  *has_burst = comma != absl::string_view::npos;
  if (!*has_burst) return true;
  absl::string_view rest = text.substr(comma + 1);
  constexpr absl::string_view kBurst = "burst=";
  if (rest.substr(0, kBurst.size()) != kBurst) return false;
  *burst = rest.substr(kBurst.size());
  return true;
}

// "/s" or nothing at the end of `value`; false for another "/...".
bool StripPerSecond(absl::string_view* value) {
  const size_t slash = value->find('/');
  if (slash == absl::string_view::npos) return true;
  if (value->substr(slash) != "/s") return false;
  *value = value->substr(0, slash);
  return true;
}

constexpr char kUnits[] =
    "bit, kbit, Mbit, Gbit (bits a second) or B, kB, MB, GB, KiB, MiB, GiB "
    "(bytes a second)";

// A number (digits and at most one '.') and its unit; false if there is
// no number.
bool SplitNumber(absl::string_view s, double* number, absl::string_view* unit) {
  size_t i = 0;
  bool dot = false;
  while (i < s.size() && ((s[i] >= '0' && s[i] <= '9') || (s[i] == '.' && !dot))) {
    dot = dot || s[i] == '.';
    ++i;
  }
  if (i == 0 || (i == 1 && dot)) return false;
  if (!absl::SimpleAtod(s.substr(0, i), number)) return false;
  *unit = s.substr(i);
  return true;
}

// Bytes per unit of a byte unit, 0 if `unit` is not one.
double ByteUnit(absl::string_view unit) {
  if (unit == "B") return 1;
  if (unit == "kB" || unit == "KB") return 1e3;
  if (unit == "MB") return 1e6;
  if (unit == "GB") return 1e9;
  if (unit == "KiB") return 1024;
  if (unit == "MiB") return 1024.0 * 1024;
  if (unit == "GiB") return 1024.0 * 1024 * 1024;
  return 0;
}

// Bits per unit of a bit unit, 0 if `unit` is not one.
double BitUnit(absl::string_view unit) {
  std::string u(unit);
  for (char& c : u) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (u == "bit") return 1;
  if (u == "kbit") return 1e3;
  if (u == "mbit") return 1e6;
  if (u == "gbit") return 1e9;
  return 0;
}

bool Ambiguous(absl::string_view unit) {
  return unit == "b" || unit == "kb" || unit == "Kb" || unit == "mb" ||
         unit == "Mb" || unit == "gb" || unit == "Gb";
}

constexpr uint64_t kMinEgressRate = 125;             // 1 kbit/s
constexpr uint64_t kMaxEgressRate = 12500000000ull;  // 100 Gbit/s
constexpr uint64_t kMaxEgressBurst = 1ull << 30;     // 1 GiB
constexpr uint64_t kMinDefaultBurst = 64 << 10;

}  // namespace

absl::StatusOr<NewFlowRate> ParseNewFlowRate(std::string_view text_in) {
  const absl::string_view text(text_in.data(), text_in.size());
  absl::string_view value, burst;
  bool has_burst = false;
  if (!SplitBurst(text, &value, &burst, &has_burst) ||
      !StripPerSecond(&value)) {
    return BadNewFlowRate(text);
  }
  NewFlowRate r;
  if (!ParseCount(value, &r.per_second)) return BadNewFlowRate(text);
  r.burst = r.per_second;
  if (has_burst && (!ParseCount(burst, &r.burst) || r.burst == 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", text, "': burst=M wants M in [1, 1000000] flows"));
  }
  return r;
}

absl::StatusOr<EgressRate> ParseEgressRate(std::string_view text_in) {
  const absl::string_view text(text_in.data(), text_in.size());
  absl::string_view value, burst;
  bool has_burst = false;
  if (!SplitBurst(text, &value, &burst, &has_burst) ||
      !StripPerSecond(&value)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", text, "': want RATE[/s][,burst=SIZE], e.g. 10Mbit or "
        "1MB,burst=256KiB"));
  }
  EgressRate r;
  if (value == "0" && !has_burst) return r;  // no limit
  double number = 0;
  absl::string_view unit;
  if (!SplitNumber(value, &number, &unit)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", text, "': want RATE[/s][,burst=SIZE], RATE a number and its "
        "unit, e.g. 10Mbit"));
  }
  if (unit.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", text, "': a rate needs its unit: ", kUnits, ", e.g. 10Mbit"));
  }
  if (Ambiguous(unit)) {
    const absl::string_view prefix = unit.substr(0, unit.size() - 1);
    const absl::string_view bytes_prefix = prefix == "m"   ? "M"
                                          : prefix == "g" ? "G"
                                                          : prefix;
    return absl::InvalidArgumentError(absl::StrCat(
        "'", text, "': '", unit, "' is ambiguous: say ", prefix,
        "bit (bits) or ", bytes_prefix, "B (bytes) a second"));
  }
  double bytes = 0;
  if (const double b = ByteUnit(unit); b > 0) {
    bytes = number * b;
  } else if (const double bits = BitUnit(unit); bits > 0) {
    bytes = number * bits / 8;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", text, "': unknown unit '", unit, "': want ", kUnits));
  }
  if (bytes < kMinEgressRate || bytes > kMaxEgressRate) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", text, "' out of range [1kbit, 100Gbit] a second"));
  }
  r.bytes_per_second = static_cast<uint64_t>(std::llround(bytes));
  r.burst = std::max(kMinDefaultBurst, r.bytes_per_second / 10);
  if (has_burst) {
    double size = 0;
    absl::string_view size_unit;
    const double b = SplitNumber(burst, &size, &size_unit) ? ByteUnit(size_unit)
                                                           : 0;
    const double burst_bytes = size * b;
    if (b == 0 || burst_bytes < EgressLimiter::kMinWrite ||
        burst_bytes > kMaxEgressBurst) {
      return absl::InvalidArgumentError(absl::StrCat(
          "'", text, "': burst=SIZE wants bytes with their unit (B, kB, "
          "KiB, MB, MiB, GB, GiB), from 1500B to 1GiB"));
    }
    r.burst = static_cast<uint64_t>(std::llround(burst_bytes));
  }
  return r;
}

std::string FormatEgressRate(const EgressRate& r) {
  return absl::StrFormat("%g Mbit/s (%d B/s), burst %d B",
                         static_cast<double>(r.bytes_per_second) * 8 / 1e6,
                         r.bytes_per_second, r.burst);
}

}  // namespace netstack::backend
