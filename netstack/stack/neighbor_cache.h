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
  // Packets waiting across all neighbours, and unresolved entries: bounds
  // what a flood of packets from spoofed on-link sources can pin (each
  // reply we cannot send yet holds a packet and its request's chunk).
  size_t max_pending_total = 256;
  size_t max_incomplete = 64;
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

  explicit NeighborCache(const NeighborOptions& options) : options_(options) {
    entries_.reserve(options_.capacity);
  }

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
    bool was_incomplete = false;
    if (it == entries_.end()) {
      if (!create || !MakeRoom()) return {};
      it = entries_.emplace(ip, Entry{}).first;
      it->second.last_used = now;
    } else {
      was_incomplete = it->second.state == State::kIncomplete;
    }
    Entry& e = it->second;
    if (was_incomplete) LeaveIncomplete();
    const bool same_mac = !was_incomplete && e.mac == mac;
    e.mac = mac;
    if (confirmed) {
      e.state = State::kReachable;
      e.deadline = now + options_.reachable_time;
    } else if (!(same_mac && e.state == State::kReachable)) {
      e.state = State::kStale;
    }
    e.probes = 0;
    return TakePending(e);
  }

  // A Neighbor Advertisement for `ip` (RFC 4861 section 7.2.5). Never
  // creates an entry. Returns the packets released for sending.
  buffer::PacketChain Advertise(const Address& ip,
                                const std::optional<wire::MacAddress>& tlla,
                                bool solicited, bool override_flag,
                                Instant now) {
    auto it = entries_.find(ip);
    if (it == entries_.end()) return {};
    Entry& e = it->second;
    if (e.state == State::kIncomplete) {
      if (!tlla) return {};
      LeaveIncomplete();
      e.mac = *tlla;
      e.state = solicited ? State::kReachable : State::kStale;
      e.deadline = now + options_.reachable_time;
      e.probes = 0;
      return TakePending(e);
    }
    const bool different = tlla && *tlla != e.mac;
    if (!override_flag && different) {
      // Keep the address we have, but no longer trust it.
      if (e.state == State::kReachable) e.state = State::kStale;
      return {};
    }
    if (tlla) e.mac = *tlla;
    if (solicited) {
      e.state = State::kReachable;
      e.deadline = now + options_.reachable_time;
    } else if (different) {
      e.state = State::kStale;
    }
    return {};
  }

  // How many more packets may wait for `ip` right now.
  size_t QueueRoom(const Address& ip) const {
    const size_t global = options_.max_pending_total > pending_total_
                              ? options_.max_pending_total - pending_total_
                              : 0;
    auto it = entries_.find(ip);
    size_t local = options_.queue_limit;
    if (it != entries_.end()) {
      if (it->second.state != State::kIncomplete) return global;
      local = options_.queue_limit > it->second.pending.size()
                  ? options_.queue_limit - it->second.pending.size()
                  : 0;
    }
    return std::min(local, global);
  }

  // Queues a packet (IP header and up, no Ethernet header yet) until `ip`
  // is resolved. When the unresolved entries are at their limit, the
  // oldest one is evicted and its packets are moved to `evicted` for the
  // caller to count.
  EnqueueResult Enqueue(const Address& ip, buffer::PacketPtr packet,
                        Instant now, buffer::PacketChain& evicted) {
    if (pending_total_ >= options_.max_pending_total) {
      return EnqueueResult::kDropped;
    }
    auto it = entries_.find(ip);
    if (it == entries_.end()) {
      if (incomplete_ >= options_.max_incomplete) EvictOldestIncomplete(evicted);
      if (!MakeRoom()) return EnqueueResult::kDropped;
      it = entries_.emplace(ip, Entry{}).first;
      Entry& e = it->second;
      e.state = State::kIncomplete;
      e.probes = 1;
      e.deadline = now + options_.retransmit;
      e.last_used = now;
      ++incomplete_;
      if (next_valid_) next_ = std::min(next_, e.deadline);
      e.pending.PushBack(std::move(packet));
      ++pending_total_;
      return EnqueueResult::kSolicit;
    }
    Entry& e = it->second;
    if (e.pending.size() >= options_.queue_limit) {
      return EnqueueResult::kDropped;
    }
    e.pending.PushBack(std::move(packet));
    ++pending_total_;
    return EnqueueResult::kQueued;
  }

  // Re-solicits unresolved entries whose timer expired (solicit(ip)) and
  // gives up on those out of probes (give_up(ip, chain) receives the
  // dropped packets).
  template <typename SolicitFn, typename GiveUpFn>
  void Poll(Instant now, SolicitFn&& solicit, GiveUpFn&& give_up) {
    // Every loop turn calls this: nothing due is O(1).
    if (now < NextDeadline()) return;
    next_valid_ = false;  // deadlines move below; recomputed on demand
    for (auto it = entries_.begin(); it != entries_.end();) {
      Entry& e = it->second;
      if (e.state != State::kIncomplete || now < e.deadline) {
        ++it;
        continue;
      }
      if (e.probes >= options_.max_probes) {
        give_up(it->first, TakePending(e));
        LeaveIncomplete();
        entries_.erase(it++);
        continue;
      }
      ++e.probes;
      e.deadline = now + options_.retransmit;
      solicit(it->first);
      ++it;
    }
  }

  // Earliest re-solicitation time; REACHABLE->STALE needs no timer, it is
  // applied lazily by Lookup. The event loop asks every turn, so the
  // minimum is cached: O(1) while no unresolved entry changed (and always
  // when none is unresolved, the usual case); one walk after a change
  // (unresolved entries are few: max_incomplete).
  Instant NextDeadline() const {
    if (incomplete_ == 0) return kNever;
    if (!next_valid_) {
      next_ = kNever;
      for (const auto& [ip, e] : entries_) {
        if (e.state == State::kIncomplete && e.deadline < next_) {
          next_ = e.deadline;
        }
      }
      next_valid_ = true;
    }
    return next_;
  }

  size_t pending_total() const { return pending_total_; }
  size_t incomplete() const { return incomplete_; }

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

  // An unresolved entry was resolved or erased: the cached minimum may
  // have been its deadline.
  void LeaveIncomplete() {
    --incomplete_;
    next_valid_ = false;
  }

  buffer::PacketChain TakePending(Entry& e) {
    pending_total_ -= e.pending.size();
    return std::move(e.pending);
  }

  void EvictOldestIncomplete(buffer::PacketChain& evicted) {
    auto victim = entries_.end();
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
      if (it->second.state != State::kIncomplete) continue;
      if (victim == entries_.end() ||
          it->second.last_used < victim->second.last_used) {
        victim = it;
      }
    }
    if (victim == entries_.end()) return;
    evicted.Append(TakePending(victim->second));
    LeaveIncomplete();
    entries_.erase(victim);
  }

  // Ensures one free slot; false if every entry is unresolved (those are
  // never evicted here: they hold packets and a probe budget of their own,
  // and are bounded by max_incomplete instead).
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
  size_t pending_total_ = 0;
  size_t incomplete_ = 0;
  // NextDeadline's cache (the earliest deadline of an unresolved entry).
  mutable Instant next_ = kNever;
  mutable bool next_valid_ = false;
};

}  // namespace netstack::stack

#endif  // NETSTACK_STACK_NEIGHBOR_CACHE_H_
