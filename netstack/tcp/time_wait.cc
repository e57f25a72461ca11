#include "netstack/tcp/time_wait.h"

#include <iterator>

namespace netstack::tcp {

bool TimeWaitEntry::PawsRejects(const Segment& seg) const {
  // TIME_WAIT lasts minutes, so Linux's 24-day staleness rule (and its
  // 60 s grace for RSTs, which RFC 1337 ignores here anyway) never applies.
  return ts_ok && seg.tcp.timestamps &&
         static_cast<int32_t>(seg.tcp.timestamps->tsval - ts_recent) < 0;
}

bool TimeWaitEntry::AcceptsSyn(const Segment& seg) const {
  using namespace wire::tcp_flag;  // NOLINT
  if (!seg.has(kSyn) || seg.has(kAck) || seg.has(kRst)) return false;
  if (PawsRejects(seg)) return false;
  if (seg.seq() > rcv_nxt) return true;
  return ts_ok && seg.tcp.timestamps &&
         static_cast<int32_t>(seg.tcp.timestamps->tsval - ts_recent) > 0;
}

TimeWaitEntry* TimeWaitTable::Find(const transport::FourTuple& t) {
  auto it = map_.find(t);
  return it != map_.end() ? &it->second : nullptr;
}

TimeWaitEntry* TimeWaitTable::Insert(const TimeWaitEntry& e, Instant now) {
  if (map_.size() >= limit_) return nullptr;
  auto [it, inserted] = map_.try_emplace(e.tuple, e);
  if (!inserted) return nullptr;
  TimeWaitEntry& n = it->second;
  n.deadline = now + absl::Milliseconds(n.two_msl_ms);
  Link(n);
  return &n;
}

void TimeWaitTable::Link(TimeWaitEntry& e) {
  auto pos = list_.end();
  while (pos != list_.begin() && std::prev(pos)->deadline > e.deadline) {
    --pos;
  }
  list_.insert(pos, e);
}

void TimeWaitTable::Restart(TimeWaitEntry& e, Instant now) {
  list_.erase(list_.iterator_to(e));
  e.deadline = now + absl::Milliseconds(e.two_msl_ms);
  Link(e);
}

void TimeWaitTable::Erase(TimeWaitEntry& e) {
  list_.erase(list_.iterator_to(e));
  const transport::FourTuple key = e.tuple;  // erase destroys e
  map_.erase(key);
}

size_t TimeWaitTable::Expire(Instant now) {
  size_t n = 0;
  while (!list_.empty() && list_.front().deadline <= now) {
    Erase(list_.front());
    ++n;
  }
  return n;
}

}  // namespace netstack::tcp
