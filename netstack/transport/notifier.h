// Deferred readiness callbacks. Endpoints mark themselves when their state
// changes (data arrived, space freed, connection reset); the embedder calls
// Dispatch() once per event-loop turn, after the stack handled the batch,
// and each marked endpoint's callback runs once with the union of its
// events. Callbacks therefore never run inside a Read/Write/Deliver call
// and may call any API, including closing the endpoint.
#ifndef NETSTACK_TRANSPORT_NOTIFIER_H_
#define NETSTACK_TRANSPORT_NOTIFIER_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "netstack/transport/errors.h"

namespace netstack::transport {

class Notifier;

// Embedded in every endpoint that has a readiness callback.
class Notifiable {
 public:
  Notifiable() = default;
  Notifiable(const Notifiable&) = delete;
  Notifiable& operator=(const Notifiable&) = delete;
  ~Notifiable();

  void set_callback(ReadyCallback cb) { callback_ = std::move(cb); }

 private:
  friend class Notifier;
  ReadyCallback callback_;
  uint32_t pending_ = 0;
  Notifier* queued_in_ = nullptr;  // non-null while in a Notifier's list
  size_t index_ = 0;
};

class Notifier {
 public:
  Notifier() = default;
  Notifier(const Notifier&) = delete;
  Notifier& operator=(const Notifier&) = delete;
  ~Notifier();

  // Records `events` for `n`; its callback runs at the next Dispatch.
  void Mark(Notifiable& n, uint32_t events);
  // Runs the callbacks of everything marked so far (endpoints marked while
  // dispatching run in the same call). Returns the number of callbacks run.
  size_t Dispatch();
  bool empty() const { return live_ == 0; }

 private:
  friend class Notifiable;
  void Forget(Notifiable& n);
  std::vector<Notifiable*> queue_;  // nullptr: forgotten entry
  size_t live_ = 0;
};

}  // namespace netstack::transport

#endif  // NETSTACK_TRANSPORT_NOTIFIER_H_
