#include "netstack/tcp/rtt_estimator.h"

#include <algorithm>
#include <cstdint>

namespace netstack::tcp {

RttEstimator::RttEstimator(const RttOptions& options) : options_(options) {}

void RttEstimator::Sample(Duration rtt, Instant now) {
  // An RTT from a timestamp echo is as good as the peer's TSecr; a
  // negative one can only come from a broken or lying peer.
  if (rtt < absl::ZeroDuration()) return;
  latest_ = rtt;
  if (!has_sample_) {
    // RFC 6298 section 2.2.
    srtt_ = rtt;
    rttvar_ = rtt / 2;
    has_sample_ = true;
  } else {
    // RFC 6298 section 2.3, alpha = 1/8 and beta = 1/4; RTTVAR first, from
    // the old SRTT.
    rttvar_ = rttvar_ * 3 / 4 + absl::AbsDuration(srtt_ - rtt) / 4;
    srtt_ = srtt_ * 7 / 8 + rtt / 8;
  }
  backoff_ = 0;
  UpdateMinRtt(rtt, now);
}

Duration RttEstimator::Rto() const {
  // RFC 6298 sections 2.1 (before any sample), 2.2-2.4 and 5.5 (backoff).
  Duration rto = has_sample_
                     ? srtt_ + std::max(options_.granularity, 4 * rttvar_)
                     : options_.initial_rto;
  rto = std::clamp(rto, options_.min_rto, options_.max_rto);
  for (uint32_t i = 0; i < backoff_ && rto < options_.max_rto; ++i) rto *= 2;
  return std::min(rto, options_.max_rto);
}

void RttEstimator::Backoff() {
  // Counts every expiry (callers give up after N); Rto() caps the value.
  if (backoff_ < UINT32_MAX) ++backoff_;
}

void RttEstimator::UpdateMinRtt(Duration rtt, Instant now) {
  const Duration window = options_.min_rtt_window;
  const MinRttSample sample{rtt, now};
  auto& m = min_rtt_;
  // A new minimum, or even the newest candidate has aged out: start over.
  if (rtt <= m[0].rtt || now - m[2].at > window) {
    m = {sample, sample, sample};
    return;
  }
  if (rtt <= m[1].rtt) {
    m[1] = m[2] = sample;
  } else if (rtt <= m[2].rtt) {
    m[2] = sample;
  }
  if (now - m[0].at > window) {
    // The minimum aged out: the candidates move up.
    m[0] = m[1];
    m[1] = m[2];
    m[2] = sample;
    if (now - m[0].at > window) {
      m[0] = m[1];
      m[1] = m[2];
    }
  } else if (m[1].at == m[0].at && now - m[1].at > window / 4) {
    // No distinct second candidate after a quarter window: take this one,
    // so that one exists when the minimum ages out.
    m[1] = m[2] = sample;
  } else if (m[2].at == m[1].at && now - m[2].at > window / 2) {
    m[2] = sample;
  }
}

}  // namespace netstack::tcp
