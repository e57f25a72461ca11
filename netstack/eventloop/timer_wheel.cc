#include "netstack/eventloop/timer_wheel.h"

#include <algorithm>
#include <bit>
#include <iterator>

#include "netstack/base/dcheck.h"

namespace netstack::eventloop {

namespace {

// Orders the due list; list::sort and list::merge are stable, which turns
// "same deadline" into "first scheduled first".
struct EarlierDeadline {
  bool operator()(const Timer& a, const Timer& b) const {
    return a.deadline() < b.deadline();
  }
};

}  // namespace

Timer::~Timer() {
  if (wheel_ != nullptr) wheel_->Cancel(*this);
}

TimerWheel::TimerWheel(Instant now, TimerWheelOptions options)
    : origin_(now),
      tick_(options.tick),
      mask_(options.slots - 1),
      slots_(new Slot[options.slots]),
      occupied_words_((options.slots + 63) / 64),
      last_now_(now) {
  // Configuration errors are programming errors, not peer input.
  NETSTACK_DCHECK(options.tick > absl::ZeroDuration());
  NETSTACK_DCHECK(options.slots > 0 && std::has_single_bit(options.slots));
  occupied_.reset(new uint64_t[occupied_words_]());
}

TimerWheel::~TimerWheel() {
  auto detach = [](Timer* t) {
    t->wheel_ = nullptr;
    t->due_ = false;
  };
  due_.clear_and_dispose(detach);
  for (size_t i = 0; i <= mask_; ++i) {
    slots_[i].timers.clear_and_dispose(detach);
  }
}

int64_t TimerWheel::TickOf(Instant t) const {
  if (t <= origin_) return 0;
  Duration rem;
  // Saturates (at int64 max) for deadlines too far to count in ticks.
  int64_t tick = absl::IDivDuration(t - origin_, tick_, &rem);
  return std::min(tick, kMaxTick);
}

void TimerWheel::SetOccupied(size_t slot) {
  occupied_[slot / 64] |= uint64_t{1} << (slot % 64);
}

void TimerWheel::ClearOccupied(size_t slot) {
  occupied_[slot / 64] &= ~(uint64_t{1} << (slot % 64));
}

size_t TimerWheel::FindOccupied(size_t from, size_t end) const {
  while (from < end) {
    size_t word = from / 64;
    uint64_t bits = occupied_[word] >> (from % 64);
    if (bits != 0) {
      size_t found = from + static_cast<size_t>(std::countr_zero(bits));
      return std::min(found, end);
    }
    from = (word + 1) * 64;
  }
  return end;
}

void TimerWheel::RefreshSlotMin(Slot& slot) const {
  if (!slot.min_stale) return;
  slot.min_stale = false;
  slot.min_deadline = kNever;
  slot.min_tick = kMaxTick;
  for (const Timer& t : slot.timers) {
    if (t.deadline_ < slot.min_deadline) {
      slot.min_deadline = t.deadline_;
      slot.min_tick = t.tick_;
    }
  }
}

void TimerWheel::ComputeNext() const {
  next_valid_ = true;
  next_deadline_ = kNever;
  next_tick_ = kMaxTick;
  const size_t slots = mask_ + 1;
  const size_t start = static_cast<size_t>(base_) & mask_;
  // Walk one revolution in tick order: [start, slots) then [0, start).
  // Every timer's tick is >= base_, so the slot met at tick `base_ + i`
  // holds nothing earlier than that tick; if its minimum is exactly that
  // tick, no later slot can hold an earlier deadline (deadlines increase
  // with ticks) and the search is over.
  for (int pass = 0; pass < 2; ++pass) {
    size_t from = pass == 0 ? start : 0;
    size_t end = pass == 0 ? slots : start;
    for (size_t s = FindOccupied(from, end); s < end;
         s = FindOccupied(s + 1, end)) {
      Slot& slot = slots_[s];
      RefreshSlotMin(slot);
      int64_t tick = base_ + static_cast<int64_t>((s - start) & mask_);
      NETSTACK_DCHECK(slot.min_tick >= tick);
      if (slot.min_tick == tick) {
        next_deadline_ = slot.min_deadline;
        next_tick_ = slot.min_tick;
        return;
      }
      // A later round only: keep the minimum in case every timer is more
      // than a revolution away.
      if (slot.min_deadline < next_deadline_) {
        next_deadline_ = slot.min_deadline;
        next_tick_ = slot.min_tick;
      }
    }
  }
}

Instant TimerWheel::NextDeadline() const {
  Instant next = SlotsNextDeadline();
  // Inside Advance, timers waiting in the due list are still scheduled;
  // the list is sorted, so its front is its earliest.
  if (!due_.empty()) next = std::min(next, due_.front().deadline_);
  return next;
}

void TimerWheel::Schedule(Timer& timer, Instant deadline) {
  if (deadline == kNever) {
    Cancel(timer);
    return;
  }
  if (timer.wheel_ != nullptr) timer.wheel_->Cancel(timer);
  // A deadline before the current tick goes into the current tick's slot
  // so that the invariant "every tick >= base_" holds; it fires at the next
  // Advance, ordered by its real deadline.
  const int64_t tick = std::max(TickOf(deadline), base_);
  timer.deadline_ = deadline;
  timer.tick_ = tick;
  timer.wheel_ = this;
  timer.due_ = false;
  Slot& slot = SlotOf(tick);
  if (slot.timers.empty()) {
    SetOccupied(static_cast<size_t>(tick) & mask_);
    slot.min_deadline = deadline;
    slot.min_tick = tick;
    slot.min_stale = false;
  } else if (!slot.min_stale && deadline < slot.min_deadline) {
    slot.min_deadline = deadline;
    slot.min_tick = tick;
  }
  slot.timers.push_back(timer);
  if (next_valid_ && deadline < next_deadline_) {
    next_deadline_ = deadline;
    next_tick_ = tick;
  }
  ++size_;
}

void TimerWheel::Cancel(Timer& timer) {
  if (timer.wheel_ == nullptr) return;
  if (timer.wheel_ != this) {
    timer.wheel_->Cancel(timer);
    return;
  }
  Unlink(timer);
}

void TimerWheel::Unlink(Timer& timer) {
  timer.hook_.unlink();
  if (!timer.due_) {
    const size_t index = static_cast<size_t>(timer.tick_) & mask_;
    Slot& slot = slots_[index];
    if (slot.timers.empty()) {
      ClearOccupied(index);
      slot.min_deadline = kNever;
      slot.min_stale = false;
    } else if (!slot.min_stale && timer.deadline_ == slot.min_deadline) {
      // Another timer may share that deadline; the rescan will tell.
      slot.min_stale = true;
    }
    if (next_valid_ && timer.deadline_ == next_deadline_) next_valid_ = false;
  }
  timer.wheel_ = nullptr;
  timer.due_ = false;
  --size_;
}

void TimerWheel::CollectDue(int64_t tick, Instant now) {
  const size_t index = static_cast<size_t>(tick) & mask_;
  Slot& slot = slots_[index];
  // Collect into a local list first, so that the slot walk calls no
  // callback and nothing else can change the slot under the iterator.
  List batch;
  Instant min_deadline = kNever;
  int64_t min_tick = kMaxTick;
  for (auto it = slot.timers.begin(); it != slot.timers.end();) {
    Timer& t = *it;
    if (t.tick_ == tick && t.deadline_ <= now) {
      it = slot.timers.erase(it);
      t.due_ = true;
      batch.push_back(t);
    } else {
      if (t.deadline_ < min_deadline) {
        min_deadline = t.deadline_;
        min_tick = t.tick_;
      }
      ++it;
    }
  }
  if (slot.timers.empty()) ClearOccupied(index);
  slot.min_deadline = min_deadline;
  slot.min_tick = min_tick;
  slot.min_stale = false;
  next_valid_ = false;
  // Usually one or a few timers: skip list::sort's setup when there is
  // nothing to order.
  if (!batch.empty() && std::next(batch.begin()) != batch.end()) {
    batch.sort(EarlierDeadline());
  }
  if (due_.empty()) {
    due_.swap(batch);
  } else {
    // Stable: timers already due (scheduled earlier) stay ahead of equal
    // deadlines from this batch.
    due_.merge(batch, EarlierDeadline());
  }
}

void TimerWheel::FireFront(Instant now) {
  Timer& t = due_.front();
  due_.pop_front();
  t.wheel_ = nullptr;
  t.due_ = false;
  --size_;
  // The callback may destroy `t`; do not touch it afterwards.
  if (t.callback_) t.callback_(now);
}

size_t TimerWheel::Advance(Instant now) {
  NETSTACK_DCHECK(!advancing_);
  now = std::max(now, last_now_);
  last_now_ = now;
  advancing_ = true;
  size_t fired = 0;
  while (true) {
    // Callbacks may schedule timers that are due already and earlier than
    // what is left in the due list, so compare before every fire.
    const Instant slot_next = SlotsNextDeadline();
    if (slot_next <= now && slot_next != kNever &&
        (due_.empty() || slot_next < due_.front().deadline_)) {
      // Every slot timer has a tick >= next_tick_, so base_ may move up.
      base_ = std::max(base_, next_tick_);
      CollectDue(next_tick_, now);
      continue;
    }
    if (due_.empty()) break;
    FireFront(now);
    ++fired;
  }
  // Nothing left is due, so no timer has a tick before now's.
  base_ = std::max(base_, TickOf(now));
  advancing_ = false;
  return fired;
}

}  // namespace netstack::eventloop
