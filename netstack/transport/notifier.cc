#include "netstack/transport/notifier.h"

namespace netstack::transport {

Notifiable::~Notifiable() {
  if (queued_in_ != nullptr) queued_in_->Forget(*this);
}

Notifier::~Notifier() {
  for (Notifiable* n : queue_) {
    if (n != nullptr) n->queued_in_ = nullptr;
  }
}

void Notifier::Mark(Notifiable& n, uint32_t events) {
  if (events == 0) return;
  n.pending_ |= events;
  if (n.queued_in_ != nullptr) return;
  n.queued_in_ = this;
  n.index_ = queue_.size();
  queue_.push_back(&n);
  ++live_;
}

void Notifier::Forget(Notifiable& n) {
  queue_[n.index_] = nullptr;
  n.queued_in_ = nullptr;
  --live_;
}

size_t Notifier::Dispatch() {
  size_t ran = 0;
  // Index loop: callbacks may mark more endpoints (appended) or destroy
  // marked ones (their slot becomes nullptr).
  for (size_t i = 0; i < queue_.size(); ++i) {
    Notifiable* n = queue_[i];
    if (n == nullptr) continue;
    queue_[i] = nullptr;
    n->queued_in_ = nullptr;
    --live_;
    const uint32_t events = std::exchange(n->pending_, 0);
    if (n->callback_) {
      ++ran;
      n->callback_(events);  // may destroy *n
    }
  }
  queue_.clear();
  return ran;
}

}  // namespace netstack::transport
