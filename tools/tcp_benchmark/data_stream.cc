#include "tools/tcp_benchmark/data_stream.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "netstack/transport/errors.h"

namespace netstack::tools::bench {

DataStream::DataStream(int id, std::unique_ptr<Stream> stream,
                       eventloop::EventLoop& loop, std::string greeting,
                       size_t block_size, FailureCallback on_failure)
    : id_(id), stream_(std::move(stream)), loop_(loop),
      greeting_(std::move(greeting)), block_size_(block_size),
      on_failure_(std::move(on_failure)),
      resume_([this](Instant) {
        OnReady(ready::kReadable | ready::kWritable);
      }) {
  stream_->SetHandler([this](uint32_t bits) { OnReady(bits); });
  if (!greeting_.empty()) stream_->WantWritable(true);
}

DataStream::~DataStream() { Close(); }

void DataStream::Close() {
  if (closed_) return;
  closed_ = true;
  loop_.timers().Cancel(resume_);
  stream_->Close();
}

void DataStream::Start(bool sender, Instant now) {
  started_ = true;
  sender_ = sender;
  start_time_ = now;
  received_at_start_ = received_;
  interval_mark_ = 0;
  retransmits_at_start_ = stream_->Info().retransmits;
  if (sender_ && !closed_) {
    stream_->WantWritable(true);
    // Kick the pump: a level-triggered writable socket reports at once,
    // an edge-triggered one may not report again.
    loop_.timers().Schedule(resume_, now);
  }
}

void DataStream::Stop(Instant now) {
  if (!started_ || stopped_) return;
  stopped_ = true;
  stop_time_ = now;
  retransmits_at_stop_ = stream_->Info().retransmits;
  if (sender_ && !closed_) stream_->WantWritable(false);
}

uint64_t DataStream::TakeIntervalBytes() {
  const uint64_t now = bytes();
  const uint64_t delta = now - interval_mark_;
  interval_mark_ = now;
  return delta;
}

uint64_t DataStream::Retransmits() const {
  const uint64_t end = stopped_ ? retransmits_at_stop_ : stream_->Info().retransmits;
  return end >= retransmits_at_start_ ? end - retransmits_at_start_ : 0;
}

double DataStream::Seconds(Instant now) const {
  if (!started_) return 0;
  return absl::ToDoubleSeconds((stopped_ ? stop_time_ : now) - start_time_);
}

void DataStream::Fail(absl::Status status) {
  const bool report = !stopped_;
  Close();
  if (report && on_failure_) on_failure_(id_, std::move(status));
}

void DataStream::OnReady(uint32_t bits) {
  if (closed_) return;
  if (!greeting_.empty() && (bits & ready::kWritable)) {
    if (!WriteGreeting()) return;
  }
  bool budget_left = true;
  if (bits & (ready::kReadable | ready::kError | ready::kHangup)) {
    if (!Drain(budget_left)) return;
  }
  if (greeting_.empty() && sender_ && running() && (bits & ready::kWritable)) {
    if (!Pump(budget_left)) return;
  }
  if (!budget_left) loop_.timers().Schedule(resume_, loop_.Now());
}

bool DataStream::WriteGreeting() {
  absl::StatusOr<size_t> n = stream_->Write(
      {reinterpret_cast<const uint8_t*>(greeting_.data()), greeting_.size()});
  if (!n.ok()) {
    if (transport::IsWouldBlock(n.status())) return true;
    Fail(n.status());
    return false;
  }
  greeting_.erase(0, *n);
  if (greeting_.empty()) stream_->WantWritable(sender_ && running());
  return true;
}

bool DataStream::Drain(bool& budget_left) {
  size_t moved = 0;
  while (moved < kBudgetBytes) {
    absl::StatusOr<size_t> n = stream_->DiscardBulk(kReceiveChunk);
    if (!n.ok()) {
      if (transport::IsWouldBlock(n.status())) return true;
      Fail(n.status());
      return false;
    }
    if (*n == 0) {
      Fail(absl::UnavailableError(
          absl::StrCat("data stream ", id_, " closed by the peer")));
      return false;
    }
    received_ += *n;
    moved += *n;
  }
  budget_left = false;
  return true;
}

bool DataStream::Pump(bool& budget_left) {
  size_t moved = 0;
  while (moved < kBudgetBytes) {
    absl::StatusOr<size_t> n = stream_->SendBulk(block_size_);
    if (!n.ok()) {
      if (transport::IsWouldBlock(n.status())) return true;
      Fail(n.status());
      return false;
    }
    sent_ += *n;
    moved += *n;
  }
  budget_left = false;
  return true;
}

}  // namespace netstack::tools::bench
