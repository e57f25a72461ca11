// A hashed timer wheel: O(1) Schedule and Cancel, firing in exact deadline
// order, and an exact NextDeadline() for the event loop's epoll timeout.
//
// Timers are intrusive: a `Timer` embeds its list hook, its deadline and its
// callback, so scheduling, rescheduling and cancelling never touch the heap
// (timer_wheel_test counts operator new to prove it). TCP connections embed
// their retransmit, delayed-ACK and keepalive timers directly.
//
// Threading: a wheel and its timers belong to one event loop thread.
#ifndef NETSTACK_EVENTLOOP_TIMER_WHEEL_H_
#define NETSTACK_EVENTLOOP_TIMER_WHEEL_H_

#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <utility>

#include "absl/functional/any_invocable.h"
#include "boost/intrusive/list.hpp"
#include "netstack/base/time.h"

namespace netstack::eventloop {

class TimerWheel;

// One timer. Its callback is set once (at construction or with
// set_callback) and is reused by every Schedule, which is why a Schedule
// never allocates: absl::AnyInvocable stores callables of up to two
// pointers (a lambda capturing `this`, say) inline, and even a larger
// capture is allocated only when the callback is set, never per Schedule.
// We chose a callback over a virtual OnTimer() so that one object can own
// several timers (retransmit, delayed ACK, keepalive) without a helper
// class per timer.
//
// A Timer is neither copyable nor movable: the wheel links its address.
// Destroying a scheduled Timer cancels it. A callback may reschedule or
// cancel any timer, including its own, and may destroy its own Timer
// (the wheel does not touch a timer after calling it), as long as it does
// not use its own captures after that.
class Timer {
 public:
  // `now` is the time passed to TimerWheel::Advance, >= the deadline.
  using Callback = absl::AnyInvocable<void(Instant now)>;

  Timer() = default;
  explicit Timer(Callback callback) : callback_(std::move(callback)) {}
  Timer(const Timer&) = delete;
  Timer& operator=(const Timer&) = delete;
  ~Timer();

  // Replaces the callback; allowed while scheduled, but not from inside
  // this timer's own callback (that would destroy the running callable).
  void set_callback(Callback callback) { callback_ = std::move(callback); }

  bool scheduled() const { return wheel_ != nullptr; }
  // The deadline while scheduled, kNever otherwise.
  Instant deadline() const { return wheel_ != nullptr ? deadline_ : kNever; }

 private:
  friend class TimerWheel;

  // auto_unlink makes unlinking O(1) without knowing the list (a slot or
  // the wheel's due list) and keeps a dying timer out of any list even if
  // a bookkeeping bug skipped Cancel. The wheel still cancels explicitly,
  // to keep its counters and minima right.
  using Hook = boost::intrusive::list_member_hook<
      boost::intrusive::link_mode<boost::intrusive::auto_unlink>>;

  Hook hook_;
  Callback callback_;
  Instant deadline_ = kNever;
  int64_t tick_ = 0;             // slot = tick_ & mask; >= the wheel's base
  TimerWheel* wheel_ = nullptr;  // non-null exactly while scheduled
  bool due_ = false;             // in the wheel's due list, not in a slot
};

struct TimerWheelOptions {
  // Granularity of the hash: deadlines within one tick share a slot (they
  // still fire in exact deadline order). Must be positive.
  Duration tick = absl::Milliseconds(1);
  // Number of slots, a power of two; one revolution is slots * tick
  // (512 ms by default). Deadlines further away share slots with nearer
  // ones and wait their round (see "Far deadlines" below).
  size_t slots = 512;
};

// The wheel. Semantics:
//   - A timer fires exactly when Advance(now) is called with now >=
//     deadline, never earlier; the tick only decides which slot holds it.
//   - Advance fires timers in (deadline, order of Schedule) order: equal
//     deadlines fire first-scheduled first. Timers that callbacks schedule
//     with a deadline <= now fire in the same Advance, in their place in
//     that order. Hence after Advance(now) returns, NextDeadline() > now.
//     (So a callback that keeps re-arming itself at or before `now` keeps
//     Advance from returning, like any other infinite loop.)
//   - A deadline already in the past when scheduled fires at the next
//     Advance. Schedule(timer, kNever) is Cancel(timer).
//   - Time never goes backwards: Advance with an earlier `now` than last
//     time acts as the last `now`.
//
// Far deadlines: a slot holds every timer whose tick maps to it, whatever
// the round (each timer records its absolute tick, so there is no rounds
// counter to decrement). Firing a tick walks only its slot and takes the
// timers of that tick; timers of later rounds stay put.
//
// Cost:
//   - Schedule, Cancel: O(1).
//   - Advance(now) with nothing due: O(1) (NextDeadline is cached).
//   - Firing: each fired tick walks its slot once (its timers of this and
//     of later rounds) and stable-sorts the due ones.
//   - NextDeadline(): O(1) while cached. Schedule keeps the cache exact;
//     cancelling or firing the earliest timer invalidates it, and the next
//     call scans the slot bitmap from the current tick over at most one
//     revolution (slots/64 words) and recomputes the minimum of each
//     non-empty slot it meets whose own minimum was cancelled (a walk of
//     that slot). When every timer is more than a revolution away, it
//     takes the minimum over all non-empty slots.
class TimerWheel {
 public:
  explicit TimerWheel(Instant now, TimerWheelOptions options = {});
  TimerWheel(const TimerWheel&) = delete;
  TimerWheel& operator=(const TimerWheel&) = delete;
  // Timers still scheduled are unlinked and become unscheduled.
  ~TimerWheel();

  // Arms `timer` for `deadline`; an armed timer moves (it fires once, at
  // the new deadline, and counts as scheduled now for the FIFO order).
  // A timer armed on another wheel is cancelled there first.
  void Schedule(Timer& timer, Instant deadline);
  // Disarms `timer`; does nothing if it is not scheduled.
  void Cancel(Timer& timer);

  // Fires every timer whose deadline is <= now; returns how many fired.
  // Must not be called from inside a timer callback.
  size_t Advance(Instant now);

  // The earliest deadline of all scheduled timers (possibly in the past),
  // or kNever when none is scheduled. Exact, not rounded to a tick.
  Instant NextDeadline() const;

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  Duration tick() const { return tick_; }
  size_t slot_count() const { return mask_ + 1; }

 private:
  using List = boost::intrusive::list<
      Timer, boost::intrusive::member_hook<Timer, Timer::Hook, &Timer::hook_>,
      boost::intrusive::constant_time_size<false>>;

  struct Slot {
    List timers;
    // The earliest timer of the slot (deadline and its tick), unless
    // min_stale: that timer was cancelled and the slot must be rescanned.
    Instant min_deadline = kNever;
    int64_t min_tick = 0;
    bool min_stale = false;
  };

  // Ticks are capped so that base_ + slots cannot overflow; a deadline
  // centuries away shares the last tick (it still fires by its deadline).
  static constexpr int64_t kMaxTick = std::numeric_limits<int64_t>::max() / 4;

  int64_t TickOf(Instant t) const;
  Slot& SlotOf(int64_t tick) { return slots_[tick & mask_]; }
  void SetOccupied(size_t slot);
  void ClearOccupied(size_t slot);
  // First occupied slot index in [from, end), or end.
  size_t FindOccupied(size_t from, size_t end) const;
  // Recomputes a stale slot minimum.
  void RefreshSlotMin(Slot& slot) const;
  // Recomputes next_deadline_/next_tick_ over the slots (not the due list).
  void ComputeNext() const;
  Instant SlotsNextDeadline() const {
    if (!next_valid_) ComputeNext();
    return next_deadline_;
  }
  // Unlinks a scheduled timer from its slot or the due list.
  void Unlink(Timer& timer);
  // Moves the timers of `tick` with deadline <= now from their slot into
  // due_, keeping due_ sorted by (deadline, schedule order).
  void CollectDue(int64_t tick, Instant now);
  // Fires due_.front().
  void FireFront(Instant now);

  const Instant origin_;
  const Duration tick_;
  const size_t mask_;
  std::unique_ptr<Slot[]> slots_;
  std::unique_ptr<uint64_t[]> occupied_;  // one bit per non-empty slot
  size_t occupied_words_;
  // Every timer in a slot has tick >= base_; base_ <= tick of last_now_.
  int64_t base_ = 0;
  Instant last_now_;
  // Timers being fired by Advance, sorted; not in any slot.
  List due_;
  size_t size_ = 0;
  bool advancing_ = false;
  // Cache of the earliest slot timer (deadline and tick); kNever when the
  // slots are empty. Mutable: NextDeadline() is logically const.
  mutable bool next_valid_ = true;
  mutable Instant next_deadline_ = kNever;
  mutable int64_t next_tick_ = 0;
};

}  // namespace netstack::eventloop

#endif  // NETSTACK_EVENTLOOP_TIMER_WHEEL_H_
