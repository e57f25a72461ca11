#include "netstack/udp/datagram_queue.h"

#include <utility>

#include "netstack/base/dcheck.h"

namespace netstack::udp {

bool DatagramQueue::Push(buffer::PayloadView payload,
                         const transport::SocketAddress& from) {
  const size_t charge = Charge(payload.size());
  if (count_ > 0 && bytes_ + charge > limit_) return false;
  if (count_ == ring_.size()) Grow();
  Entry& e = ring_[(head_ + count_) % ring_.size()];
  e.payload = std::move(payload);
  e.from = from;
  ++count_;
  bytes_ += charge;
  return true;
}

const DatagramQueue::Entry& DatagramQueue::Front() const {
  NETSTACK_DCHECK(count_ > 0);
  return ring_[head_];
}

DatagramQueue::Entry DatagramQueue::Pop() {
  NETSTACK_DCHECK(count_ > 0);
  Entry e = std::move(ring_[head_]);
  ring_[head_].payload = buffer::PayloadView();  // release the chunk now
  head_ = head_ + 1 == ring_.size() ? 0 : head_ + 1;
  --count_;
  bytes_ -= Charge(e.payload.size());
  return e;
}

void DatagramQueue::Clear() {
  while (count_ > 0) Pop();
}

void DatagramQueue::Grow() {
  std::vector<Entry> bigger(ring_.empty() ? 4 : ring_.size() * 2);
  for (size_t i = 0; i < count_; ++i) {
    bigger[i] = std::move(ring_[(head_ + i) % ring_.size()]);
  }
  ring_ = std::move(bigger);
  head_ = 0;
}

}  // namespace netstack::udp
