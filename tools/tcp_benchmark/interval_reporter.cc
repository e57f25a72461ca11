#include "tools/tcp_benchmark/interval_reporter.h"

#include <optional>
#include <string>

#include "tools/tcp_benchmark/report.h"

namespace netstack::tools::bench {

IntervalReporter::IntervalReporter(eventloop::EventLoop& loop,
                                   double interval_seconds, std::FILE* out)
    : loop_(loop),
      interval_(interval_seconds > 0 ? absl::Seconds(interval_seconds)
                                     : absl::ZeroDuration()),
      out_(out),
      timer_([this](Instant now) { Report(now, /*rearm=*/true); }) {}

void IntervalReporter::Start(
    const std::vector<std::unique_ptr<DataStream>>* streams, Instant now) {
  streams_ = streams;
  start_ = last_ = now;
  last_retransmits_.assign(streams->size(), 0);
  if (interval_ <= absl::ZeroDuration()) return;
  std::fprintf(out_, "%s         Retr\n", kHeader);
  loop_.timers().Schedule(timer_, now + interval_);
}

void IntervalReporter::Stop(Instant now) {
  if (streams_ == nullptr || interval_ <= absl::ZeroDuration()) return;
  loop_.timers().Cancel(timer_);
  if (now - last_ >= interval_ / 10) Report(now, /*rearm=*/false);
  streams_ = nullptr;
}

void IntervalReporter::Report(Instant now, bool rearm) {
  const double from = absl::ToDoubleSeconds(last_ - start_);
  const double to = absl::ToDoubleSeconds(now - start_);
  uint64_t sum_bytes = 0, sum_retransmits = 0;
  bool sender = false;
  for (size_t i = 0; i < streams_->size(); ++i) {
    DataStream& s = *(*streams_)[i];
    const uint64_t bytes = s.TakeIntervalBytes();
    std::optional<uint64_t> retransmits;
    if (s.sender()) {
      sender = true;
      const uint64_t total = s.Retransmits();
      retransmits = total - std::min(total, last_retransmits_[i]);
      last_retransmits_[i] = total;
      sum_retransmits += *retransmits;
    }
    sum_bytes += bytes;
    std::fprintf(out_, "%s\n",
                 FormatLine(StreamLabel(s.id()), from, to, bytes, retransmits)
                     .c_str());
  }
  if (streams_->size() > 1) {
    std::optional<uint64_t> retransmits;
    if (sender) retransmits = sum_retransmits;
    std::fprintf(out_, "%s\n",
                 FormatLine("SUM", from, to, sum_bytes, retransmits).c_str());
  }
  std::fflush(out_);
  last_ = now;
  // Re-arm from the schedule, not from `now`, so lines do not drift.
  const Instant next = start_ + interval_ * (static_cast<int64_t>(
                                                 (now - start_) / interval_) + 1);
  if (rearm) loop_.timers().Schedule(timer_, next);
}

}  // namespace netstack::tools::bench
