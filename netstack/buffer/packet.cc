#include "netstack/buffer/packet.h"

#include <new>
#include <utility>

#include "netstack/base/dcheck.h"

namespace netstack::buffer {

PacketBuffer::PacketBuffer(PacketBuffer&& o) noexcept { *this = std::move(o); }

PacketBuffer& PacketBuffer::operator=(PacketBuffer&& o) noexcept {
  if (this == &o) return *this;
  headers_ = std::move(o.headers_);
  for (uint32_t i = 0; i < payload_count_; ++i) payload_[i] = PayloadView();
  for (uint32_t i = 0; i < o.payload_count_; ++i) {
    payload_[i] = std::move(o.payload_[i]);
  }
  payload_count_ = std::exchange(o.payload_count_, 0);
  payload_size_ = std::exchange(o.payload_size_, 0);
  gso_ = std::exchange(o.gso_, GsoInfo{});
  csum_ = std::exchange(o.csum_, PartialChecksum{});
  return *this;
}

bool PacketBuffer::AppendPayload(PayloadView view) {
  if (view.empty()) return true;
  if (payload_count_ == kMaxPayloadViews) return false;
  payload_size_ += view.size();
  payload_[payload_count_++] = std::move(view);
  return true;
}

size_t PacketBuffer::ToIovecs(std::span<iovec> out) const {
  if (out.size() < iovec_count()) return 0;
  size_t n = 0;
  if (headers_.size() > 0) {
    const auto h = headers_.data();
    out[n++] = iovec{const_cast<uint8_t*>(h.data()), h.size()};
  }
  for (uint32_t i = 0; i < payload_count_; ++i) {
    const auto b = payload_[i].bytes();
    out[n++] = iovec{const_cast<uint8_t*>(b.data()), b.size()};
  }
  return n;
}

void PacketBuffer::Reset() {
  headers_.Reset();
  for (uint32_t i = 0; i < payload_count_; ++i) payload_[i] = PayloadView();
  payload_count_ = 0;
  payload_size_ = 0;
  gso_ = GsoInfo{};
  csum_ = PartialChecksum{};
}

void PacketDeleter::operator()(PacketBuffer* p) const {
  if (p->pool_ != nullptr) {
    p->pool_->Release(p);
  } else {
    delete p;
  }
}

PacketPool::PacketPool(size_t max_packets) : max_packets_(max_packets) {}

PacketPool::~PacketPool() {
  NETSTACK_DCHECK(stats_.in_use == 0);
  free_.clear_and_dispose([](PacketBuffer* p) { delete p; });
}

void PacketPool::Reserve(size_t count) {
  while (stats_.created < count && stats_.created < max_packets_) {
    auto* p = new (std::nothrow) PacketBuffer();
    if (p == nullptr) return;
    p->pool_ = this;
    ++stats_.created;
    ++stats_.free;
    free_.push_front(*p);
  }
}

PacketPtr PacketPool::Allocate() {
  PacketBuffer* p = nullptr;
  if (!free_.empty()) {
    p = &free_.front();
    free_.pop_front();
    --stats_.free;
  } else if (stats_.created < max_packets_) {
    p = new (std::nothrow) PacketBuffer();
    if (p != nullptr) {
      p->pool_ = this;
      ++stats_.created;
    }
  }
  if (p == nullptr) {
    ++stats_.exhausted;
    return nullptr;
  }
  ++stats_.in_use;
  ++stats_.allocations;
  return PacketPtr(p);
}

void PacketPool::Release(PacketBuffer* p) {
  NETSTACK_DCHECK(!p->next.is_linked());
  // Drop chunk references now, not when the packet is reused, so chunk
  // memory is recycled as soon as the packet is done.
  p->Reset();
  --stats_.in_use;
  ++stats_.free;
  free_.push_front(*p);
}

PacketPtr PacketChain::PopFront() {
  if (list_.empty()) return nullptr;
  PacketBuffer& p = list_.front();
  list_.pop_front();
  return PacketPtr(&p);
}

void PacketChain::Clear() {
  list_.clear_and_dispose([](PacketBuffer* p) { PacketDeleter()(p); });
}

size_t PacketChain::TotalBytes() const {
  size_t total = 0;
  for (const PacketBuffer& p : list_) total += p.size();
  return total;
}

}  // namespace netstack::buffer
