// The production event loop: epoll for fds, a TimerWheel for timers,
// "pollers" for the stack's own deadlines, signalfd for signals, and
// end-of-turn hooks for batched writes. Single-threaded: one loop per
// stack instance (docs/ARCHITECTURE.md, "Time and I/O").
//
// One turn (RunOnce):
//   1. timeout = earliest of the timer wheel's NextDeadline(), every
//      poller's NextDeadline(), and now + max_wait;
//   2. epoll_wait for at most kMaxEventsPerTurn events;
//   3. read the clock once: that `now` is passed to everything below;
//   4. dispatch the events to their handlers;
//   5. fire the timers due by `now` (TimerWheel::Advance);
//   6. Poll(now) every poller whose NextDeadline() <= now;
//   7. call the end-of-turn hooks (the link's Flush: one sendmmsg per turn
//      for everything the turn queued).
#ifndef NETSTACK_EVENTLOOP_EVENT_LOOP_H_
#define NETSTACK_EVENTLOOP_EVENT_LOOP_H_

#include <sys/epoll.h>

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "netstack/base/time.h"
#include "netstack/eventloop/timer_wheel.h"

namespace netstack::eventloop {

// Receives readiness for one registered fd. The loop does not own it.
//
// Level-triggered by default: a handler that leaves data unread is called
// again next turn, so a handler may read a bounded batch and return
// (fairness between fds). EOF and errors count as readable and writable,
// because that is how a read() or write() gets to see them; OnError tells
// a handler with neither interest.
class Handler {
 public:
  virtual ~Handler() = default;
  // EPOLLIN, or EOF/error (EPOLLRDHUP, EPOLLHUP, EPOLLERR), with readable
  // interest.
  virtual void OnReadable(Instant now) {}
  // EPOLLOUT, or EPOLLHUP/EPOLLERR, with writable interest.
  virtual void OnWritable(Instant now) {}
  // Called last for an event with EPOLLERR or EPOLLHUP, whatever the
  // interest (epoll always reports them), with the raw epoll bits. These
  // conditions are level-triggered and persist: a handler must Remove (or
  // fix) its fd, or the loop wakes up for it every turn.
  virtual void OnError(Instant now, uint32_t epoll_events) {}
};

// Something with its own deadline that the loop polls: the network stack
// and the timer-driven link decorators (delay queue, channel). Exactly the
// NextDeadline()/Poll() pair that link::LinkEndpoint and the stack expose.
class Poller {
 public:
  virtual ~Poller() = default;
  // kNever when there is nothing to do.
  virtual Instant NextDeadline() const = 0;
  virtual void Poll(Instant now) = 0;
};

// Adapts any object with `Instant NextDeadline() const` and
// `void Poll(Instant)` (a link::LinkEndpoint, the stack) without making it
// inherit from Poller. Does not own the target.
template <typename T>
class PollerRef final : public Poller {
 public:
  explicit PollerRef(T* target) : target_(target) {}
  Instant NextDeadline() const override { return target_->NextDeadline(); }
  void Poll(Instant now) override { target_->Poll(now); }

 private:
  T* target_;
};

class EventLoop {
 public:
  // Interest bits for Add/Modify; they are the epoll bits.
  static constexpr uint32_t kReadable = EPOLLIN;
  static constexpr uint32_t kWritable = EPOLLOUT;
  // Edge-triggered: the handler must drain until EAGAIN.
  static constexpr uint32_t kEdgeTriggered = EPOLLET;
  // Events handled per epoll_wait: bounds the work of one turn so that
  // timers and pollers run between batches even under a flood.
  static constexpr int kMaxEventsPerTurn = 64;

  using HookId = uint64_t;
  using TurnEndHook = absl::AnyInvocable<void(Instant now)>;
  using SignalCallback = absl::AnyInvocable<void(int signo, Instant now)>;

  struct Stats {
    uint64_t turns = 0;
    uint64_t events = 0;  // epoll events returned
    uint64_t timers_fired = 0;
    uint64_t polls = 0;    // Poller::Poll calls
    uint64_t signals = 0;  // signals delivered to callbacks
  };

  // What Now() reads. Unset: CLOCK_MONOTONIC (MonotonicNow).
  using Clock = absl::AnyInvocable<Instant() const>;

  // The timer wheel starts at Now(); `timer_options` sets its tick and size.
  //
  // `clock` is for tests and fuzzers that drive a loop on a fake clock
  // (fuzz/dns_forwarder_fuzzer.cc): every `now` the loop hands out (to
  // handlers, timers, pollers, hooks, and Now() itself) is then the
  // clock's, so a component that takes its time from the loop agrees with
  // a stack polled at the same fake instant. It must not go backwards.
  // epoll still waits in real time: RunOnce(max_wait) waits at most
  // max_wait for fds, or less when a timer or poller is due by the fake
  // clock's reading (at once when it is already due).
  static absl::StatusOr<std::unique_ptr<EventLoop>> Create(
      TimerWheelOptions timer_options = {}, Clock clock = nullptr);
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;
  // Closes the epoll fd and the signalfds (pending handled signals are
  // discarded and the signals unblocked again). Registered fds are not
  // closed: the loop never owns them.
  ~EventLoop();

  // Registers `fd` with `events` (kReadable | kWritable | kEdgeTriggered,
  // or 0 to watch only for errors). The handler must stay alive until
  // Remove. Remove before close(): epoll forgets a closed fd by itself,
  // but this table would not, and a new fd with that number could not be
  // added.
  //
  // Safe during dispatch: a handler may Add, Modify or Remove any fd,
  // including its own, and may delete a removed handler at once. Each
  // registration has a generation, carried in the epoll event data with
  // the fd; an event of the current batch whose fd was removed (or removed
  // and added again) no longer matches and is skipped, and each callback
  // for an event re-checks the registration and the interest.
  absl::Status Add(int fd, uint32_t events, Handler* handler);
  absl::Status Modify(int fd, uint32_t events);
  absl::Status Remove(int fd);
  bool IsRegistered(int fd) const;

  TimerWheel& timers() { return timers_; }

  // CLOCK_MONOTONIC as an Instant: absl::UnixEpoch() plus the monotonic
  // clock's reading. Only differences mean something (printed, it looks
  // like a date in 1970 plus the uptime), and it never jumps with the wall
  // clock, which is what timers and RTOs need.
  static Instant MonotonicNow();
  // MonotonicNow(), or the clock given to Create.
  Instant Now() const { return clock_ ? clock_() : MonotonicNow(); }

  // Pollers are not owned; Remove before destroying one. Adding an
  // already added poller does nothing. Safe from inside callbacks.
  void AddPoller(Poller* poller);
  void RemovePoller(Poller* poller);

  // Called at the end of every turn, in the order added. Safe to add or
  // remove (also itself) from inside callbacks; a hook added during a turn
  // first runs at the end of that turn.
  HookId AddTurnEndHook(TurnEndHook hook);
  void RemoveTurnEndHook(HookId id);

  // Blocks `signals` in the calling thread (call it before starting other
  // threads, so that they inherit the mask and the signals stay pending
  // for us) and watches them with a signalfd: `callback` runs from the
  // loop, like any handler, once per delivered signal. Standard signals
  // that arrive twice before the loop reads them are merged by the kernel.
  // Blocked signals stay blocked across fork() and execve(): a child that
  // should see SIGTERM must unblock it before exec.
  // Errors: InvalidArgument for an empty list, an invalid signal, SIGKILL
  // or SIGSTOP; the errno of sigprocmask/signalfd/epoll_ctl otherwise.
  absl::Status HandleSignals(absl::Span<const int> signals,
                             SignalCallback callback);

  // One turn (see the top of this file), waiting at most `max_wait` for
  // I/O (absl::InfiniteDuration() to wait only for fds, timers and
  // pollers). EINTR counts as a turn without events. Must not be called
  // from inside a callback.
  absl::Status RunOnce(Duration max_wait);
  // Turns until Stop(). Returns OK after a Stop, or the first error.
  absl::Status Run();
  // For a caller's own loop (runtime.h): the epoll fd, readable when a
  // registered fd (or a handled signal) has an event, and the earliest
  // deadline of the timers and pollers (kNever: none). Wait for either,
  // then RunOnce(absl::ZeroDuration()).
  int fd() const { return epoll_fd_; }
  Instant NextDeadline() const;
  // Makes Run() return after the current turn. For the loop's own thread
  // (handlers, timers, pollers, signal callbacks); not async-signal-safe
  // and not thread-safe: use HandleSignals. A Stop() before Run() makes
  // the next Run() return at once, without a turn.
  void Stop() { stop_ = true; }

  const Stats& stats() const { return stats_; }

 private:
  struct FdEntry {
    Handler* handler = nullptr;  // null when not registered
    uint32_t events = 0;
    uint32_t generation = 0;
  };
  struct HookEntry {
    HookId id;  // 0 once removed during a turn, erased after it
    TurnEndHook hook;
  };
  class SignalSource;

  EventLoop(int epoll_fd, TimerWheelOptions timer_options, Clock clock);

  static uint64_t EventData(int fd, uint32_t generation) {
    return (uint64_t{generation} << 32) | static_cast<uint32_t>(fd);
  }
  // Entry of `fd` if it is still the registration of `generation`.
  FdEntry* Live(int fd, uint32_t generation);
  absl::Status EpollCtl(int op, int fd, uint32_t events, uint32_t generation);
  // epoll_wait until `deadline`; returns the event count (0 on EINTR) or
  // an error.
  absl::StatusOr<int> Wait(Instant now, Instant deadline);
  void Dispatch(int count, Instant now);
  void RunPollers(Instant now);
  void RunTurnEndHooks(Instant now);

  const int epoll_fd_;
  const Clock clock_;  // before timers_, which starts at Now()
  TimerWheel timers_;
  std::vector<FdEntry> fds_;  // indexed by fd
  size_t registered_ = 0;     // entries with a handler
  uint32_t next_generation_ = 0;
  std::array<epoll_event, kMaxEventsPerTurn> events_;
  bool use_epoll_pwait2_ = true;  // until the kernel says ENOSYS

  std::vector<Poller*> pollers_;  // null: removed during a turn
  bool pollers_dirty_ = false;
  std::vector<std::unique_ptr<HookEntry>> hooks_;
  bool hooks_dirty_ = false;
  HookId next_hook_id_ = 1;

  std::vector<std::unique_ptr<SignalSource>> signal_sources_;

  bool running_ = false;  // inside RunOnce
  bool stop_ = false;
  Stats stats_;
};

}  // namespace netstack::eventloop

#endif  // NETSTACK_EVENTLOOP_EVENT_LOOP_H_
