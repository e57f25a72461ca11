// A token bucket: `rate` tokens a second, at most `burst` saved up, full
// at its first use. Time is passed in (docs/ARCHITECTURE.md, "Time and
// I/O"); an instant earlier than one already seen counts as no time
// passed. Used for the ICMP errors the stack sends (StackOptions) and the
// backend's new host connections (BackendLimits::busy_connect_rate).
#ifndef NETSTACK_BASE_TOKEN_BUCKET_H_
#define NETSTACK_BASE_TOKEN_BUCKET_H_

#include <algorithm>

#include "netstack/base/time.h"

namespace netstack {

class TokenBucket {
 public:
  TokenBucket(double rate, double burst) : rate_(rate), burst_(burst) {}

  // Takes one token; false when there is none.
  bool Take(Instant now) {
    if (refill_at_ == absl::InfinitePast()) {
      tokens_ = burst_;
    } else if (now > refill_at_) {
      tokens_ = std::min(
          burst_, tokens_ + absl::ToDoubleSeconds(now - refill_at_) * rate_);
    }
    refill_at_ = std::max(refill_at_, now);
    if (tokens_ < 1) return false;
    tokens_ -= 1;
    return true;
  }

 private:
  double rate_;
  double burst_;
  double tokens_ = 0;
  Instant refill_at_ = absl::InfinitePast();
};

}  // namespace netstack

#endif  // NETSTACK_BASE_TOKEN_BUCKET_H_
