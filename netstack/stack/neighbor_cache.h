// Neighbour cache for ARP (IPv4) and NDP (IPv6): IP address -> MAC, plus
// the packets waiting for a resolution.
//
// States (a subset of RFC 4861 section 7.3.2, which ARP uses too):
//   INCOMPLETE  solicitation sent, packets queued (bounded), re-solicited
//               every `retransmit` up to `max_probes` times, then the
//               queued packets are dropped as neighbor_unreachable;
//   REACHABLE   confirmed by a reply within `reachable_time`;
//   STALE       known but unconfirmed for a while: still used to send
//               (as Linux does), refreshed by any ARP/NDP from the peer.
// The cache is small (a sandbox talks to a few neighbours): a flat hash
// map bounded at `capacity` entries; when full, the least recently used
// resolved entry is evicted (an O(n) scan, only on insert when full).
#ifndef NETSTACK_STACK_NEIGHBOR_CACHE_H_
#define NETSTACK_STACK_NEIGHBOR_CACHE_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "netstack/base/time.h"
#include "netstack/buffer/packet.h"
#include "netstack/wire/address.h"

namespace netstack::stack {

struct NeighborOptions {
  size_t capacity = 1024;
  size_t queue_limit = 16;  // packets waiting per unresolved neighbour
  Duration retransmit = absl::Seconds(1);
  int max_probes = 3;
  Duration reachable_time = absl::Seconds(30);
};

template <typename Address>
struct AddressHash {
  size_t operator()(const Address& a) const {
    // FNV-1a over the bytes: addresses are short and this is cheap.
    uint64_t h = 1469598103934665603ull;
    for (uint8_t b : a.bytes) h = (h ^ b) * 1099511628211ull;
    return static_cast<size_t>(h);
  }
};

template <typename Address>
class NeighborCache {
 public:
  enum class State : uint8_t { kIncomplete, kReachable, kStale };
  enum class EnqueueResult : uint8_t {
    kSolicit,  // new entry: send a solicitation now
    kQueued,   // already being resolved
    kDropped,  // queue full or cache full of unresolved entries
  };

  explicit NeighborCache(const NeighborOptions& options) : options_(options) {}

  // The MAC to send to, if resolved (REACHABLE or STALE).
  std::optional<wire::MacAddress> Lookup(const Address& ip, Instant now) {
    auto it = entries_.find(ip);
    if (it == entries_.end() || it->second.state == State::kIncomplete) {
      return std::nullopt;
    }
    Entry& e = it->second;
    e.last_used = now;
    if (e.state == State::kReachable && now >= e.deadline) {
      e.state = State::kStale;
    }
    return e.mac;
  }

  // Records ip -> mac. `confirmed` (a reply to our solicitation, or a
  // solicited NA) makes the entry REACHABLE; otherwise (learned from the
  // peer's own request) it becomes STALE unless already reachable with the
  // same MAC. `create`: false only updates an existing entry (RFC 826 merge
  // rule for ARP not addressed to us; RFC 4861 7.2.5 for unsolicited NA).
  // Returns the packets that were waiting, for the caller to send now.
  buffer::PacketChain Update(const Address& ip, const wire::MacAddress& mac,
                             bool confirmed, bool create, Instant now) {
    auto it = entries_.find(ip);
    if (it == entries_.end()) {
      if (!create || !MakeRoom()) return {};
      it = entries_.emplace(ip, Entry{}).first;
      it->second.last_used = now;
    }
    Entry& e = it->second;
    const bool same_mac = e.state != State::kIncomplete && e.mac == mac;
    e.mac = mac;
    if (confirmed) {
      e.state = State::kReachable;
      e.deadline = now + options_.reachable_time;
    } else if (!(same_mac && e.state == State::kReachable)) {
      e.state = State::kStale;
    }
    e.probes = 0;
    return std::move(e.pending);
  }

  // Queues a packet (IP header and up, no Ethernet header yet) until `ip`
  // is resolved.
  EnqueueResult Enqueue(const Address& ip, buffer::PacketPtr packet,
                        Instant now) {
    auto it = entries_.find(ip);
    if (it == entries_.end()) {
      if (!MakeRoom()) return EnqueueResult::kDropped;
      it = entries_.emplace(ip, Entry{}).first;
      Entry& e = it->second;
      e.state = State::kIncomplete;
      e.probes = 1;
      e.deadline = now + options_.retransmit;
      e.last_used = now;
      e.pending.PushBack(std::move(packet));
      return EnqueueResult::kSolicit;
    }
    Entry& e = it->second;
    if (e.pending.size() >= options_.queue_limit) {
      return EnqueueResult::kDropped;
    }
    e.pending.PushBack(std::move(packet));
    return EnqueueResult::kQueued;
  }

  // Re-solicits unresolved entries whose timer expired (solicit(ip)) and
  // gives up on those out of probes (give_up(ip, chain) receives the
  // dropped packets).
  template <typename SolicitFn, typename GiveUpFn>
  void Poll(Instant now, SolicitFn&& solicit, GiveUpFn&& give_up) {
    for (auto it = entries_.begin(); it != entries_.end();) {
      Entry& e = it->second;
      if (e.state != State::kIncomplete || now < e.deadline) {
        ++it;
        continue;
      }
      if (e.probes >= options_.max_probes) {
        give_up(it->first, std::move(e.pending));
        entries_.erase(it++);
        continue;
      }
      ++e.probes;
      e.deadline = now + options_.retransmit;
      solicit(it->first);
      ++it;
    }
  }

  // Earliest re-solicitation time (O(n)); REACHABLE->STALE needs no timer,
  // it is applied lazily by Lookup.
  Instant NextDeadline() const {
    Instant next = kNever;
    for (const auto& [ip, e] : entries_) {
      if (e.state == State::kIncomplete && e.deadline < next) {
        next = e.deadline;
      }
    }
    return next;
  }

  std::optional<State> StateOf(const Address& ip) const {
    auto it = entries_.find(ip);
    if (it == entries_.end()) return std::nullopt;
    return it->second.state;
  }
  size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    State state = State::kIncomplete;
    wire::MacAddress mac;
    int probes = 0;
    Instant deadline = kNever;
    Instant last_used = absl::InfinitePast();
    buffer::PacketChain pending;
  };

  // Ensures one free slot; false if every entry is unresolved (those are
  // never evicted: they hold packets and a probe budget of their own).
  bool MakeRoom() {
    if (entries_.size() < options_.capacity) return true;
    auto victim = entries_.end();
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
      if (it->second.state == State::kIncomplete) continue;
      if (victim == entries_.end() ||
          it->second.last_used < victim->second.last_used) {
        victim = it;
      }
    }
    if (victim == entries_.end()) return false;
    entries_.erase(victim);
    return true;
  }

  NeighborOptions options_;
  absl::flat_hash_map<Address, Entry, AddressHash<Address>> entries_;
};

}  // namespace netstack::stack

#endif  // NETSTACK_STACK_NEIGHBOR_CACHE_H_
