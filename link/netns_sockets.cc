#include "link/netns_sockets.h"

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "link/fd_util.h"

namespace netstack::link {
namespace {

int Make(NetnsSockets::Kind kind) {
  const bool v4 = kind == NetnsSockets::kTcp4 || kind == NetnsSockets::kUdp4;
  const bool tcp = kind == NetnsSockets::kTcp4 || kind == NetnsSockets::kTcp6;
  return ::socket(v4 ? AF_INET : AF_INET6,
                  (tcp ? SOCK_STREAM : SOCK_DGRAM) | SOCK_NONBLOCK |
                      SOCK_CLOEXEC,
                  0);
}

}  // namespace

absl::StatusOr<std::unique_ptr<NetnsSockets>> NetnsSockets::Create(
    int netns_fd) {
  std::unique_ptr<NetnsSockets> s(new NetnsSockets());
  s->netns_fd_ = netns_fd;
  s->worker_ = std::thread([p = s.get()] { p->Work(); });
  std::unique_lock<std::mutex> lock(s->mu_);
  s->wake_taker_.wait(lock, [&] { return s->entered_ || s->stop_; });
  if (s->enter_errno_ != 0) {
    const int err = s->enter_errno_;
    lock.unlock();
    s->worker_.join();
    if (err == EPERM) {
      return absl::PermissionDeniedError(absl::StrCat(
          "entering the guest's network namespace needs CAP_SYS_ADMIN over "
          "its user namespace: ",
          std::strerror(err)));
    }
    if (err == EINVAL) {
      return absl::InvalidArgumentError(
          "that file is not a network namespace");
    }
    return ErrnoStatus(err, "setns into the guest's network namespace");
  }
  return s;
}

NetnsSockets::~NetnsSockets() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_worker_.notify_one();
  if (worker_.joinable()) worker_.join();
  for (std::vector<int>& v : stock_) {
    for (int fd : v) ::close(fd);
  }
}

bool NetnsSockets::WantsMore() const {
  for (int k = 0; k < kKinds; ++k) {
    if (stock_[k].size() < kStock && error_[k] == 0) return true;
  }
  return false;
}

void NetnsSockets::Work() {
  // Signals are the main thread's business (its signalfd): a SIGTERM
  // delivered here would take its default action and end the process.
  // SIGSYS stays open for the system-call filter's report.
  sigset_t all;
  sigfillset(&all);
  sigdelset(&all, SIGSYS);
  pthread_sigmask(SIG_BLOCK, &all, nullptr);
  const bool ok = ::setns(netns_fd_, CLONE_NEWNET) == 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    entered_ = true;
    if (!ok) {
      enter_errno_ = errno;
      stop_ = true;
    }
  }
  wake_taker_.notify_all();
  if (!ok) return;
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    wake_worker_.wait(lock, [&] {
      return stop_ || task_ != nullptr || WantsMore();
    });
    if (stop_) return;
    if (task_ != nullptr) {
      absl::FunctionRef<absl::Status()>* task = task_;
      lock.unlock();
      absl::Status result = (*task)();
      lock.lock();
      task_result_ = std::move(result);
      task_ = nullptr;
      wake_taker_.notify_all();
      continue;
    }
    for (int k = 0; k < kKinds; ++k) {
      while (stock_[k].size() < kStock && error_[k] == 0 && !stop_) {
        lock.unlock();
        const int fd = Make(static_cast<Kind>(k));
        const int err = errno;
        lock.lock();
        if (fd < 0) {
          error_[k] = err;
        } else {
          stock_[k].push_back(fd);
        }
        wake_taker_.notify_all();
      }
    }
  }
}

absl::Status NetnsSockets::RunOnWorker(absl::FunctionRef<absl::Status()> fn) {
  std::unique_lock<std::mutex> lock(mu_);
  // One call at a time (the callers are on the main thread).
  wake_taker_.wait(lock, [&] { return stop_ || task_ == nullptr; });
  if (stop_) return absl::UnavailableError("the guest's socket maker has stopped");
  task_ = &fn;
  wake_worker_.notify_one();
  wake_taker_.wait(lock, [&] { return task_ == nullptr || stop_; });
  if (task_ != nullptr) {  // stopped before it ran
    task_ = nullptr;
    return absl::UnavailableError("the guest's socket maker has stopped");
  }
  return std::exchange(task_result_, absl::OkStatus());
}

absl::StatusOr<int> NetnsSockets::Take(Kind kind) {
  std::unique_lock<std::mutex> lock(mu_);
  // An error left from an earlier attempt (fds ran out for a while) is
  // stale: clear it and wait for a fresh attempt, whose outcome counts.
  if (stock_[kind].empty() && error_[kind] != 0) {
    error_[kind] = 0;
    wake_worker_.notify_one();
  }
  wake_taker_.wait(lock, [&] {
    return stop_ || !stock_[kind].empty() || error_[kind] != 0;
  });
  if (!stock_[kind].empty()) {
    const int fd = stock_[kind].back();
    stock_[kind].pop_back();
    lock.unlock();
    wake_worker_.notify_one();
    return fd;
  }
  if (error_[kind] != 0) {
    const int err = error_[kind];
    error_[kind] = 0;  // the next Take tries again
    lock.unlock();
    wake_worker_.notify_one();
    return ErrnoStatus(err, "socket in the guest's network namespace");
  }
  return absl::UnavailableError("the guest's socket maker has stopped");
}

}  // namespace netstack::link
