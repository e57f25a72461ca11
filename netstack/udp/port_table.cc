#include "netstack/udp/port_table.h"

#include <algorithm>

#include "netstack/base/dcheck.h"

namespace netstack::udp {

using transport::IpAddress;
using transport::SocketAddress;

bool PortTable::Conflicts(const IpAddress& ip, uint16_t port,
                          bool reuse_address) const {
  auto it = ports_.find(port);
  if (it == ports_.end()) return false;
  for (const PortBinding* b : it->second) {
    const bool overlap =
        ip.IsUnspecified() || b->local_ip.IsUnspecified() || ip == b->local_ip;
    if (overlap && !(reuse_address && b->reuse_address)) return true;
  }
  return false;
}

void PortTable::Insert(PortBinding* b) {
  NETSTACK_DCHECK(!Conflicts(b->local_ip, b->local_port, b->reuse_address));
  auto& bucket = ports_[b->local_port];
  NETSTACK_DCHECK(std::find(bucket.begin(), bucket.end(), b) == bucket.end());
  bucket.push_back(b);
  ++size_;
}

void PortTable::Remove(PortBinding* b) {
  auto it = ports_.find(b->local_port);
  NETSTACK_DCHECK(it != ports_.end());
  if (it == ports_.end()) return;
  auto& bucket = it->second;
  auto pos = std::find(bucket.begin(), bucket.end(), b);
  NETSTACK_DCHECK(pos != bucket.end());
  if (pos == bucket.end()) return;
  bucket.erase(pos);  // keeps binding order: ties go to the earliest
  --size_;
  if (bucket.empty()) ports_.erase(it);
}

int PortTable::Score(const PortBinding& b, const IpAddress& dst,
                     const SocketAddress& src) {
  int score = 0;
  if (!b.local_ip.IsUnspecified()) {
    if (b.local_ip != dst) return -1;
    score += 1;
  }
  if (b.remote) {
    if (*b.remote != src) return -1;
    score += 2;
  }
  return score;
}

PortBinding* PortTable::Lookup(const IpAddress& dst, uint16_t dst_port,
                               const SocketAddress& src) const {
  auto it = ports_.find(dst_port);
  if (it == ports_.end()) return nullptr;
  PortBinding* best = nullptr;
  int best_score = -1;
  for (PortBinding* b : it->second) {
    const int score = Score(*b, dst, src);
    if (score > best_score) {
      best = b;
      best_score = score;
    }
  }
  return best;
}

std::optional<uint16_t> PortTable::FindFreePort(uint16_t lo, uint16_t hi,
                                                uint16_t start) const {
  NETSTACK_DCHECK(lo <= hi && start >= lo && start <= hi);
  const uint32_t count = uint32_t{hi} - lo + 1;
  uint32_t offset = uint32_t{start} - lo;
  for (uint32_t i = 0; i < count; ++i) {
    const uint16_t port = static_cast<uint16_t>(lo + offset);
    if (IsFree(port)) return port;
    offset = offset + 1 == count ? 0 : offset + 1;
  }
  return std::nullopt;
}

}  // namespace netstack::udp
