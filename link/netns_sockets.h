// Sockets made in another network namespace, without moving a thread
// there for each one.
//
// A socket keeps the namespace it was made in. netstackd's spliced
// forwards need one in the guest's namespace per connection (and per UDP
// client); making each on a fresh thread that enters the namespace
// (RunInNetnsFd) costs a thread start per connection, and the setns(2) it
// needs would keep CAP_SYS_ADMIN and setns in netstackd's system-call
// filter for its whole life. Instead, one thread enters the namespace
// once, at construction, and keeps a few sockets of each kind ready; the
// caller takes one (a mutex, no wait while the stock lasts) and the
// thread makes the next. Fds are the process's, so a socket made there
// is the caller's to use at once.
//
// Thread-safe. The worker thread lives until the destructor, which closes
// the sockets still in stock.
#ifndef NETSTACK_LINK_NETNS_SOCKETS_H_
#define NETSTACK_LINK_NETNS_SOCKETS_H_

#include <array>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace netstack::link {

class NetnsSockets {
 public:
  // What a socket is for; each has its own stock.
  enum Kind { kTcp4, kTcp6, kUdp4, kUdp6, kKinds };
  // Ready sockets kept per kind.
  static constexpr size_t kStock = 8;

  // Starts the thread in network namespace `netns_fd` (not owned; the
  // caller keeps it open while this lives). Errors as RunInNetnsFd's.
  static absl::StatusOr<std::unique_ptr<NetnsSockets>> Create(int netns_fd);
  NetnsSockets(const NetnsSockets&) = delete;
  NetnsSockets& operator=(const NetnsSockets&) = delete;
  ~NetnsSockets();

  // A non-blocking, close-on-exec socket of `kind` in the namespace; the
  // caller owns it. Waits for the thread only when the stock is out.
  // Errors: socket(2)'s (EMFILE and the like), as a status.
  absl::StatusOr<int> Take(Kind kind);

  // Runs `fn` on the worker thread and returns what it returned; waits
  // for it. For what is per thread in Linux and must reach every thread:
  // the capability sets and the mount namespace (least_privilege.h).
  // Unavailable if the worker has stopped.
  absl::Status RunOnWorker(absl::FunctionRef<absl::Status()> fn);

  static Kind KindOf(bool tcp, bool v4) {
    return tcp ? (v4 ? kTcp4 : kTcp6) : (v4 ? kUdp4 : kUdp6);
  }

 private:
  NetnsSockets() = default;
  void Work();
  // Under mu_: whether some stock is below kStock and the last attempt
  // for it did not fail.
  bool WantsMore() const;

  std::mutex mu_;
  std::condition_variable wake_worker_;
  std::condition_variable wake_taker_;
  std::array<std::vector<int>, kKinds> stock_;
  // The errno of the last failed socket() per kind (0: none); a Take
  // that finds the stock empty after a failure gets it and clears it.
  std::array<int, kKinds> error_{};
  // RunOnWorker's call, while one waits: the worker runs it, stores the
  // result and clears the pointer.
  absl::FunctionRef<absl::Status()>* task_ = nullptr;
  absl::Status task_result_;
  bool stop_ = false;
  bool entered_ = false;
  int enter_errno_ = 0;
  int netns_fd_ = -1;
  std::thread worker_;
};

}  // namespace netstack::link

#endif  // NETSTACK_LINK_NETNS_SOCKETS_H_
