#include "netstack/eventloop/event_loop.h"

#include <errno.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <utility>

#include "netstack/base/dcheck.h"

namespace netstack::eventloop {

namespace {

constexpr uint32_t kInterestMask =
    EventLoop::kReadable | EventLoop::kWritable | EventLoop::kEdgeTriggered;

// What wakes OnReadable / OnWritable: besides plain readiness, the
// conditions under which read() or write() returns EOF or an error, so
// that the handler learns about them from the call it makes anyway.
constexpr uint32_t kReadableWake =
    EPOLLIN | EPOLLPRI | EPOLLRDHUP | EPOLLHUP | EPOLLERR;
constexpr uint32_t kWritableWake = EPOLLOUT | EPOLLHUP | EPOLLERR;

}  // namespace

// One signalfd and the callback for its signals. Owns the fd and undoes
// its part of the signal mask when destroyed.
class EventLoop::SignalSource final : public Handler {
 public:
  SignalSource(EventLoop* loop, int fd, const sigset_t& unblock,
               SignalCallback callback)
      : loop_(loop),
        fd_(fd),
        unblock_(unblock),
        callback_(std::move(callback)) {}
  SignalSource(const SignalSource&) = delete;
  SignalSource& operator=(const SignalSource&) = delete;

  ~SignalSource() override {
    // Consume what is pending before unblocking: a SIGUSR1 that the loop
    // never read must not kill the process (its default action) just
    // because the loop went away.
    signalfd_siginfo info[8];
    while (read(fd_, info, sizeof(info)) > 0) {
    }
    close(fd_);
    pthread_sigmask(SIG_UNBLOCK, &unblock_, nullptr);
  }

  int fd() const { return fd_; }

  void OnReadable(Instant now) override {
    // A bounded batch per turn, like any handler; level-triggered epoll
    // brings us back for the rest.
    signalfd_siginfo info[8];
    const ssize_t n = read(fd_, info, sizeof(info));
    // EAGAIN (another reader was faster) or EINTR: nothing to do now.
    if (n <= 0) return;
    const size_t count = static_cast<size_t>(n) / sizeof(info[0]);
    for (size_t i = 0; i < count; ++i) {
      ++loop_->stats_.signals;
      callback_(static_cast<int>(info[i].ssi_signo), now);
    }
  }

 private:
  EventLoop* const loop_;
  const int fd_;
  const sigset_t unblock_;  // signals that were not blocked before us
  SignalCallback callback_;
};

absl::StatusOr<std::unique_ptr<EventLoop>> EventLoop::Create(
    TimerWheelOptions timer_options, Clock clock) {
  const int fd = epoll_create1(EPOLL_CLOEXEC);
  if (fd < 0) return absl::ErrnoToStatus(errno, "epoll_create1");
  return std::unique_ptr<EventLoop>(
      new EventLoop(fd, timer_options, std::move(clock)));
}

EventLoop::EventLoop(int epoll_fd, TimerWheelOptions timer_options,
                     Clock clock)
    : epoll_fd_(epoll_fd),
      clock_(std::move(clock)),
      timers_(Now(), timer_options) {}

EventLoop::~EventLoop() {
  signal_sources_.clear();
  close(epoll_fd_);
}

Instant EventLoop::MonotonicNow() {
  timespec ts;
  // CLOCK_MONOTONIC cannot fail with a valid pointer.
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return absl::UnixEpoch() + absl::DurationFromTimespec(ts);
}

absl::Status EventLoop::EpollCtl(int op, int fd, uint32_t events,
                                 uint32_t generation) {
  epoll_event ev = {};
  ev.events = events;
  ev.data.u64 = EventData(fd, generation);
  if (epoll_ctl(epoll_fd_, op, fd, &ev) != 0) {
    return absl::ErrnoToStatus(errno, "epoll_ctl");
  }
  return absl::OkStatus();
}

absl::Status EventLoop::Add(int fd, uint32_t events, Handler* handler) {
  if (fd < 0) return absl::InvalidArgumentError("Add: negative fd");
  if (handler == nullptr) return absl::InvalidArgumentError("Add: no handler");
  if ((events & ~kInterestMask) != 0) {
    return absl::InvalidArgumentError("Add: unknown event bits");
  }
  const size_t index = static_cast<size_t>(fd);
  if (index >= fds_.size()) fds_.resize(index + 1);
  if (fds_[index].handler != nullptr) {
    return absl::AlreadyExistsError("Add: fd already registered");
  }
  const uint32_t generation = ++next_generation_;
  if (absl::Status s = EpollCtl(EPOLL_CTL_ADD, fd, events, generation);
      !s.ok()) {
    return s;
  }
  fds_[index] = FdEntry{handler, events, generation};
  ++registered_;
  return absl::OkStatus();
}

absl::Status EventLoop::Modify(int fd, uint32_t events) {
  if (!IsRegistered(fd)) {
    return absl::NotFoundError("Modify: fd not registered");
  }
  if ((events & ~kInterestMask) != 0) {
    return absl::InvalidArgumentError("Modify: unknown event bits");
  }
  FdEntry& entry = fds_[static_cast<size_t>(fd)];
  if (absl::Status s = EpollCtl(EPOLL_CTL_MOD, fd, events, entry.generation);
      !s.ok()) {
    return s;
  }
  entry.events = events;
  return absl::OkStatus();
}

absl::Status EventLoop::Remove(int fd) {
  if (!IsRegistered(fd)) {
    return absl::NotFoundError("Remove: fd not registered");
  }
  // Forget the registration first: whatever epoll says, no further event
  // of this batch may reach the handler (it may be deleted right after).
  fds_[static_cast<size_t>(fd)] = FdEntry{};
  --registered_;
  epoll_event ev = {};
  if (epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, &ev) != 0 && errno != EBADF &&
      errno != ENOENT) {
    // EBADF/ENOENT: the fd was closed before Remove, and epoll dropped it
    // on its own; anything else is worth reporting.
    return absl::ErrnoToStatus(errno, "epoll_ctl(EPOLL_CTL_DEL)");
  }
  return absl::OkStatus();
}

bool EventLoop::IsRegistered(int fd) const {
  return fd >= 0 && static_cast<size_t>(fd) < fds_.size() &&
         fds_[static_cast<size_t>(fd)].handler != nullptr;
}

EventLoop::FdEntry* EventLoop::Live(int fd, uint32_t generation) {
  if (fd < 0 || static_cast<size_t>(fd) >= fds_.size()) return nullptr;
  FdEntry& entry = fds_[static_cast<size_t>(fd)];
  if (entry.handler == nullptr || entry.generation != generation) {
    return nullptr;
  }
  return &entry;
}

void EventLoop::AddPoller(Poller* poller) {
  NETSTACK_DCHECK(poller != nullptr);
  if (std::find(pollers_.begin(), pollers_.end(), poller) != pollers_.end()) {
    return;
  }
  pollers_.push_back(poller);
}

void EventLoop::RemovePoller(Poller* poller) {
  auto it = std::find(pollers_.begin(), pollers_.end(), poller);
  if (it == pollers_.end()) return;
  if (running_) {
    // RunPollers may be walking the vector: leave a hole, compact later.
    *it = nullptr;
    pollers_dirty_ = true;
  } else {
    pollers_.erase(it);
  }
}

EventLoop::HookId EventLoop::AddTurnEndHook(TurnEndHook hook) {
  const HookId id = next_hook_id_++;
  // Heap entries, so that growing the vector from inside a hook never
  // moves the callable that is running.
  hooks_.push_back(std::make_unique<HookEntry>(HookEntry{id, std::move(hook)}));
  return id;
}

void EventLoop::RemoveTurnEndHook(HookId id) {
  if (id == 0) return;
  auto it = std::find_if(hooks_.begin(), hooks_.end(),
                         [id](const auto& e) { return e->id == id; });
  if (it == hooks_.end()) return;
  if (running_) {
    // The hook may be the one running: destroy it after the turn.
    (*it)->id = 0;
    hooks_dirty_ = true;
  } else {
    hooks_.erase(it);
  }
}

absl::Status EventLoop::HandleSignals(absl::Span<const int> signals,
                                      SignalCallback callback) {
  if (signals.empty()) return absl::InvalidArgumentError("no signals");
  sigset_t set;
  sigemptyset(&set);
  for (int signo : signals) {
    if (signo <= 0 || signo >= NSIG || signo == SIGKILL || signo == SIGSTOP) {
      return absl::InvalidArgumentError("signal cannot be handled");
    }
    sigaddset(&set, signo);
  }
  sigset_t old;
  if (int err = pthread_sigmask(SIG_BLOCK, &set, &old); err != 0) {
    return absl::ErrnoToStatus(err, "pthread_sigmask");
  }
  // Remember which of them we blocked, to unblock only those later.
  sigset_t unblock;
  sigemptyset(&unblock);
  for (int signo : signals) {
    if (sigismember(&old, signo) == 0) sigaddset(&unblock, signo);
  }
  const int fd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    pthread_sigmask(SIG_UNBLOCK, &unblock, nullptr);
    return absl::ErrnoToStatus(err, "signalfd");
  }
  auto source =
      std::make_unique<SignalSource>(this, fd, unblock, std::move(callback));
  // On failure the source closes the fd and restores the mask.
  if (absl::Status s = Add(fd, kReadable, source.get()); !s.ok()) return s;
  signal_sources_.push_back(std::move(source));
  return absl::OkStatus();
}

absl::StatusOr<int> EventLoop::Wait(Instant now, Instant deadline) {
  const Duration timeout = std::max(deadline - now, absl::ZeroDuration());
  // Nothing registered and nothing to wait for: epoll could only say so.
  // A loop of in-memory links and timers (a fuzzer's runtime, turned once
  // per input step) saves the system call.
  if (registered_ == 0 && timeout == absl::ZeroDuration()) return 0;
  if (use_epoll_pwait2_) {
    // Nanosecond timeout (Linux 5.11): a pacing or RTO deadline is not
    // rounded up to the next millisecond.
    timespec ts = absl::ToTimespec(timeout);
    const int n = epoll_pwait2(epoll_fd_, events_.data(), kMaxEventsPerTurn,
                               deadline == kNever ? nullptr : &ts, nullptr);
    if (n >= 0) return n;
    if (errno == EINTR) return 0;
    if (errno != ENOSYS) return absl::ErrnoToStatus(errno, "epoll_pwait2");
    use_epoll_pwait2_ = false;
  }
  int timeout_ms = -1;
  if (deadline != kNever) {
    // Round up: waking before the deadline would only cost an empty turn.
    const int64_t ms =
        absl::ToInt64Milliseconds(absl::Ceil(timeout, absl::Milliseconds(1)));
    timeout_ms = static_cast<int>(std::min<int64_t>(ms, INT_MAX));
  }
  const int n =
      epoll_wait(epoll_fd_, events_.data(), kMaxEventsPerTurn, timeout_ms);
  if (n >= 0) return n;
  if (errno == EINTR) return 0;
  return absl::ErrnoToStatus(errno, "epoll_wait");
}

void EventLoop::Dispatch(int count, Instant now) {
  for (int i = 0; i < count; ++i) {
    const uint64_t data = events_[static_cast<size_t>(i)].data.u64;
    const uint32_t ready = events_[static_cast<size_t>(i)].events;
    const int fd = static_cast<int>(static_cast<uint32_t>(data));
    const uint32_t generation = static_cast<uint32_t>(data >> 32);
    // Every callback may change the table (Add grows it, Remove clears an
    // entry, Modify changes the interest), so look the entry up again
    // before each one; never keep a pointer or a handler across a call.
    FdEntry* entry = Live(fd, generation);
    if (entry != nullptr && (ready & kReadableWake) != 0 &&
        (entry->events & kReadable) != 0) {
      entry->handler->OnReadable(now);
      entry = Live(fd, generation);
    }
    if (entry != nullptr && (ready & kWritableWake) != 0 &&
        (entry->events & kWritable) != 0) {
      entry->handler->OnWritable(now);
      entry = Live(fd, generation);
    }
    if (entry != nullptr && (ready & (EPOLLERR | EPOLLHUP)) != 0) {
      entry->handler->OnError(now, ready);
    }
  }
}

void EventLoop::RunPollers(Instant now) {
  // By index: a poller may add pollers (appended, polled this turn if
  // due) or remove any (a hole, skipped).
  for (size_t i = 0; i < pollers_.size(); ++i) {
    Poller* poller = pollers_[i];
    if (poller != nullptr && poller->NextDeadline() <= now) {
      ++stats_.polls;
      poller->Poll(now);
    }
  }
}

void EventLoop::RunTurnEndHooks(Instant now) {
  for (size_t i = 0; i < hooks_.size(); ++i) {
    HookEntry* entry = hooks_[i].get();
    if (entry->id != 0) entry->hook(now);
  }
}

Instant EventLoop::NextDeadline() const {
  Instant deadline = timers_.NextDeadline();
  for (const Poller* poller : pollers_) {
    if (poller != nullptr) deadline = std::min(deadline, poller->NextDeadline());
  }
  return deadline;
}

absl::Status EventLoop::RunOnce(Duration max_wait) {
  NETSTACK_DCHECK(!running_);
  running_ = true;
  Instant now = Now();
  Instant deadline = max_wait == absl::InfiniteDuration()
                         ? kNever
                         : now + std::max(max_wait, absl::ZeroDuration());
  deadline = std::min(deadline, NextDeadline());
  absl::StatusOr<int> ready = Wait(now, deadline);
  if (!ready.ok()) {
    running_ = false;
    return ready.status();
  }
  // One clock read per turn: everything in the turn agrees on `now`.
  now = Now();
  stats_.events += static_cast<uint64_t>(*ready);
  Dispatch(*ready, now);
  stats_.timers_fired += timers_.Advance(now);
  RunPollers(now);
  RunTurnEndHooks(now);
  ++stats_.turns;
  running_ = false;
  if (pollers_dirty_) {
    pollers_.erase(std::remove(pollers_.begin(), pollers_.end(), nullptr),
                   pollers_.end());
    pollers_dirty_ = false;
  }
  if (hooks_dirty_) {
    hooks_.erase(std::remove_if(hooks_.begin(), hooks_.end(),
                                [](const auto& e) { return e->id == 0; }),
                 hooks_.end());
    hooks_dirty_ = false;
  }
  return absl::OkStatus();
}

absl::Status EventLoop::Run() {
  while (!stop_) {
    if (absl::Status s = RunOnce(absl::InfiniteDuration()); !s.ok()) {
      stop_ = false;
      return s;
    }
  }
  stop_ = false;
  return absl::OkStatus();
}

}  // namespace netstack::eventloop
