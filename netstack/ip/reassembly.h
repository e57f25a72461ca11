// IP reassembly, shared by IPv4 (RFC 791 section 3.2, RFC 815) and IPv6
// (RFC 8200 section 4.5, RFC 5722).
//
// Design: one 64 KiB chunk per datagram.
//   Each datagram being reassembled owns one buffer::Chunk from the
//   caller's ChunkPool, and every accepted fragment's data is copied to its
//   offset in that chunk. When the last hole closes, the caller gets a
//   PayloadView of [0, total length) of the chunk: one contiguous view.
//   Reassembly is a slow path (fragmentation is rare, RFC 8900), and a
//   contiguous result keeps every upper layer simple: TCP, UDP and ICMP
//   never see a datagram spread over many views, and checksum and parsing
//   code runs over one span. The copy costs one memcpy per fragment; the
//   alternative (keeping the fragments' own views and stitching them) would
//   pin one receive chunk per fragment and hand a 45-view datagram upward.
//   A chunk (65536 bytes) holds the largest payload either family can
//   reassemble (65535 bytes, see "Bounds" below).
//
// What is kept per datagram, from a fixed array of slots made at
// construction (no heap allocation per fragment or per datagram):
//   - the key, the chunk, the first fragment's arrival time + timeout;
//   - a sorted array of the received fragments' [start, end) ranges, at
//     most ReassemblerOptions::max_fragments of them. Ranges are kept as
//     received (not merged) so an exact duplicate can be recognized
//     (RFC 8200 section 4.5) and any overlap detected (RFC 5722);
//   - optionally a copy of the first fragment's IP header, for the ICMP
//     Time Exceeded message the caller sends when the datagram expires.
//   Slots sit on two Boost.Intrusive lists: a per-family expiry list in
//   arrival order of the first fragment (the timeout is constant per
//   family, so that order is deadline order and NextDeadline() is O(1)),
//   and one least-recently-used list (by last accepted fragment) that
//   chooses whom to evict when memory is full.
//   Lookup is a fixed open-addressing table (linear probing, backward-shift
//   deletion, no tombstones) with at least twice as many entries as slots,
//   so it is at most half full, never grows and never allocates after
//   construction. A probe walks at most the table size, so even keys
//   chosen to collide cost a bounded amount of work.
//
// Fixed overhead, allocated by the constructor: one Datagram record per
// slot (about 760 bytes: the 128-entry range array and the 128-byte kept
// header dominate) and 8 bytes per table entry; about 50 KiB for the
// default 64 slots.
//
// Memory bound: at most ReassemblerOptions::memory_limit_bytes / kChunkSize
// datagrams are in progress at once (64 with the 4 MiB default), so at most
// memory_limit_bytes of chunk memory is held, whatever a peer sends. When a
// new datagram needs a slot and all are taken, the least recently active
// datagram is evicted (counted as a datagram drop kMemoryLimit), unless
// evict_when_full is false, in which case the new fragment is refused
// (fragment drop kMemoryLimit). Completed datagrams are handed to the
// caller and no longer counted: the caller owns that chunk reference.
//
// Bounds (end = offset + length of a fragment's data, in bytes):
//   - IPv4: header_len + end <= 65535, since the reassembled datagram's
//     Total Length is a 16-bit field (RFC 791 section 3.1). header_len is
//     the length of the `header` passed to Add, or 20 (the minimum) when
//     none is passed: a caller that passes no header and has options must
//     check the reassembled header + payload against 65535 itself.
//   - IPv6: (header_len - 48) + end <= 65535, where header_len counts the
//     fixed header (40), the unfragmentable extension headers and the
//     Fragment header (8): the reassembled packet's Payload Length (16
//     bits) covers the unfragmentable headers and the fragmentable part,
//     but not the Fragment header, which reassembly removes (RFC 8200
//     section 4.5, "the Payload Length of the packet reassembled from that
//     fragment would exceed 65,535 octets"). With no header, 48 is assumed:
//     end <= 65535.
//   The caller, which parses the header, also owns the ICMP Parameter
//   Problem that RFC 8200 asks for on a too-big IPv6 fragment.
//
// Refusals. Every call to Add accepts the fragment (kIncomplete or
// kComplete) or drops it for exactly one DropReason, counted in
// Stats::fragment_drops; so the fragments received always equal the
// fragments accepted plus the sum of the fragment drops. Some refusals
// also discard the datagram the fragment belongs to, counted in
// Stats::datagram_drops:
//   kEmptyFragment     fragment only: no data. Nothing to add; RFC 8200
//                      section 4.5 atomic fragments (offset 0, M 0) are
//                      processed without reassembly (RFC 6946) by the
//                      caller, never passed here.
//   kMisaligned        fragment only: a non-last fragment whose length is
//                      not a multiple of 8 (RFC 8200 section 4.5; RFC 791
//                      fragments on 8-octet boundaries), or an offset that
//                      is not (the wire cannot express it: a caller bug).
//   kTooBig            fragment only: end beyond the bound above.
//   kConflictingEnd    fragment and datagram: a last fragment whose end
//                      differs from a last fragment already received; a
//                      first-seen last fragment that ends before data
//                      already received, or exactly where an earlier
//                      non-last fragment ended (that one said more
//                      follows); or a non-last fragment with data beyond
//                      the known end. The datagram cannot be right; it is
//                      discarded, as Linux does.
//   kOverlap           fragment and datagram: the fragment overlaps one
//                      already received and is not an exact duplicate.
//                      RFC 5722 section 4: the whole datagram is silently
//                      discarded. Applied to IPv4 too (RFC 791 allowed
//                      overlaps; teardrop-style attacks made every modern
//                      stack refuse them). Nothing is remembered about the
//                      discarded datagram: later fragments with its key
//                      start a new one, which expires unless completed.
//   kDuplicate         fragment only: the same range as a fragment already
//                      received, with the same bytes. RFC 8200 section 4.5
//                      lets an implementation drop exact duplicates and
//                      keep the datagram; the network does duplicate
//                      packets. Same range with different bytes is
//                      kOverlap: the data conflicts.
//   kTooManyFragments  fragment and datagram: the datagram already holds
//                      max_fragments fragments (checked after the duplicate
//                      and overlap checks). It could never complete, so its
//                      memory is freed now rather than at the timeout.
//   kMemoryLimit       fragment: no slot is free and evict_when_full is
//                      false. Datagram: evicted to make room for a new one.
//   kNoChunk           fragment only: the ChunkPool is exhausted. Pool
//                      exhaustion is stack-wide pressure, so reassembly
//                      sheds load rather than evicting to get a chunk.
//   kTimeout           datagram only: not complete within the family's
//                      timeout of its first fragment's arrival (Poll).
//
// Time is an argument: Add and Poll take `now`; NextDeadline() tells the
// event loop when Poll has work. Add does not expire anything itself, so
// the loop runs Poll (timers) before it feeds a batch of fragments.
//
// Threading: one Reassembler belongs to one event loop, like its ChunkPool.
#ifndef NETSTACK_IP_REASSEMBLY_H_
#define NETSTACK_IP_REASSEMBLY_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "boost/intrusive/list.hpp"
#include "netstack/base/time.h"
#include "netstack/buffer/chunk.h"
#include "netstack/buffer/payload_view.h"
#include "netstack/wire/address.h"

namespace netstack::ip {

enum class IpFamily : uint8_t { kIpv4 = 4, kIpv6 = 6 };

// Identifies the datagram a fragment belongs to.
//   IPv4 (RFC 791 section 3.2): source, destination, protocol and
//     identification; the addresses use the first 4 bytes of `src`/`dst`.
//   IPv6 (RFC 8200 section 4.5): source, destination and identification;
//     `protocol` is 0.
// A plain value of fixed size: comparing and hashing touch no heap.
struct ReassemblyKey {
  std::array<uint8_t, 16> src{};
  std::array<uint8_t, 16> dst{};
  uint32_t identification = 0;
  uint8_t protocol = 0;
  IpFamily family = IpFamily::kIpv4;

  static ReassemblyKey Ipv4(const wire::Ipv4Address& src,
                            const wire::Ipv4Address& dst, uint8_t protocol,
                            uint16_t identification);
  static ReassemblyKey Ipv6(const wire::Ipv6Address& src,
                            const wire::Ipv6Address& dst,
                            uint32_t identification);

  friend bool operator==(const ReassemblyKey&, const ReassemblyKey&) = default;
  template <typename H>
  friend H AbslHashValue(H h, const ReassemblyKey& k) {
    return H::combine(std::move(h), k.src, k.dst, k.identification, k.protocol,
                      k.family);
  }
};

// Why a fragment was refused or a datagram discarded; see the table at the
// top of this file for which apply to fragments and which to datagrams.
enum class DropReason : uint8_t {
  kEmptyFragment,
  kMisaligned,
  kTooBig,
  kConflictingEnd,
  kOverlap,
  kDuplicate,
  kTooManyFragments,
  kMemoryLimit,
  kNoChunk,
  kTimeout,
};
inline constexpr size_t kDropReasonCount =
    static_cast<size_t>(DropReason::kTimeout) + 1;

// "overlap", "too_many_fragments", ...: for counters and logs.
std::string_view DropReasonName(DropReason reason);

// What happened to one fragment.
enum class AddOutcome : uint8_t {
  kIncomplete,  // accepted; the datagram still has holes
  kComplete,    // accepted, and it completed the datagram: see payload
  kDropped,     // refused: see drop_reason
};

struct [[nodiscard]] AddResult {
  AddOutcome outcome = AddOutcome::kDropped;
  // Meaningful only when outcome is kDropped.
  DropReason drop_reason = DropReason::kEmptyFragment;
  // When outcome is kComplete: the reassembled data (the fragmentable part:
  // for IPv4 the payload after the header, for IPv6 what followed the
  // Fragment header), one contiguous view of a chunk. The caller owns this
  // reference; dropping the view returns the chunk to its pool.
  buffer::PayloadView payload;

  bool accepted() const { return outcome != AddOutcome::kDropped; }
};

struct ReassemblerOptions {
  // Chunk memory that datagrams in progress may hold. Divided by
  // buffer::kChunkSize, it is the number of datagram slots: 4 MiB gives 64
  // (Linux's ipfrag_high_thresh default is also 4 MiB).
  size_t memory_limit_bytes = size_t{4} << 20;
  // RFC 791 section 3.2 leaves the timer to the implementation (15 s as a
  // lower bound); 30 s is Linux's ipfrag_time. RFC 8200 section 4.5: 60 s.
  Duration ipv4_timeout = absl::Seconds(30);
  Duration ipv6_timeout = absl::Seconds(60);
  // Per datagram. 64 covers a 65535-byte datagram at any MTU of 1100 bytes
  // or more (45 fragments at 1500, 54 at IPv6's minimum of 1280).
  uint32_t max_fragments = 64;
  // When all slots are taken: evict the least recently active datagram
  // (true), or refuse the fragment that would start a new one (false).
  bool evict_when_full = true;
};

// What Poll reports for each datagram that timed out.
struct ExpiredDatagram {
  ReassemblyKey key;
  // Whether the fragment with offset 0 arrived: RFC 792 / RFC 1122 section
  // 3.3.2 (IPv4) and RFC 8200 section 4.5 (IPv6) send ICMP Time Exceeded,
  // code 1 (fragment reassembly time exceeded), only then.
  bool first_fragment_received = false;
  // The header bytes passed to Add with the first fragment (up to
  // kMaxKeptHeaderLen), empty if none. Valid only during the callback.
  std::span<const uint8_t> first_header;
  // The first fragment's data, empty if it did not arrive. Valid only during
  // the callback: copy what the ICMP message quotes.
  std::span<const uint8_t> first_data;
};

class Reassembler {
 public:
  // Compile-time capacity of the per-datagram fragment array; the option
  // max_fragments may lower it.
  static constexpr uint32_t kMaxFragmentsCapacity = 128;
  // Bytes of the first fragment's header kept for ExpiredDatagram: the
  // largest IPv4 header (60) and an IPv6 header with some extension headers.
  static constexpr size_t kMaxKeptHeaderLen = 128;

  struct Stats {
    uint64_t fragments_received = 0;  // Add() calls
    uint64_t fragments_accepted = 0;  // kIncomplete or kComplete
    std::array<uint64_t, kDropReasonCount> fragment_drops{};
    uint64_t datagrams_started = 0;
    uint64_t datagrams_completed = 0;
    std::array<uint64_t, kDropReasonCount> datagram_drops{};
    // Datagrams in progress right now.
    size_t datagrams_held = 0;
    // Chunk memory held by datagrams in progress (datagrams_held *
    // kChunkSize), and the highest it has been. Never above the limit.
    size_t bytes_held = 0;
    size_t peak_bytes_held = 0;
    // Fragment data copied into those chunks.
    size_t fragment_bytes_held = 0;

    uint64_t fragment_drop(DropReason r) const {
      return fragment_drops[static_cast<size_t>(r)];
    }
    uint64_t datagram_drop(DropReason r) const {
      return datagram_drops[static_cast<size_t>(r)];
    }
  };

  // InvalidArgument for a memory limit below one chunk, a non-positive
  // timeout, or max_fragments outside [1, kMaxFragmentsCapacity].
  static absl::Status ValidateOptions(const ReassemblerOptions& options);

  // Allocates every slot and the lookup table now. `chunks` must outlive
  // the Reassembler. Options must pass ValidateOptions (DCHECK); out-of-
  // range values are clamped in release builds.
  Reassembler(buffer::ChunkPool& chunks, const ReassemblerOptions& options);
  Reassembler(const Reassembler&) = delete;
  Reassembler& operator=(const Reassembler&) = delete;
  // Releases every datagram in progress (not counted as drops).
  ~Reassembler();

  // Adds one fragment: `data` goes at byte `offset_bytes` of the datagram's
  // fragmentable part; `more_fragments` is the MF / M flag. `header`, which
  // may be empty, is the fragment's IP header as received (IPv4: with
  // options; IPv6: fixed header through the Fragment header): its length
  // sets the exact size bound (see the top of this file), and the first
  // fragment's header is kept for ExpiredDatagram. `data` is copied; the
  // caller keeps its buffer.
  AddResult Add(const ReassemblyKey& key, uint32_t offset_bytes,
                bool more_fragments, std::span<const uint8_t> data, Instant now,
                std::span<const uint8_t> header = {});

  // Discards every datagram whose deadline is at or before `now` (counted
  // as kTimeout) and calls `on_expired` for each, oldest first, just before
  // discarding it. The callback must not call Add or Poll on this
  // Reassembler. Returns how many expired.
  size_t Poll(Instant now,
              absl::FunctionRef<void(const ExpiredDatagram&)> on_expired);
  size_t Poll(Instant now);

  // The earliest deadline of a datagram in progress (its first fragment's
  // arrival plus the family's timeout), or kNever.
  Instant NextDeadline() const;

  const Stats& stats() const { return stats_; }
  const ReassemblerOptions& options() const { return options_; }
  // Datagram slots: memory_limit_bytes / kChunkSize.
  size_t max_datagrams() const { return slot_count_; }

 private:
  struct Datagram;
  using ListHook = boost::intrusive::list_member_hook<
      boost::intrusive::link_mode<boost::intrusive::normal_link>>;
  template <ListHook Datagram::*Hook>
  using List = boost::intrusive::list<
      Datagram, boost::intrusive::member_hook<Datagram, ListHook, Hook>,
      boost::intrusive::constant_time_size<false>>;

  struct Range {
    uint16_t start;
    uint16_t end;  // exclusive; <= 65535 by the bounds above
  };

  struct Datagram {
    ReassemblyKey key;
    size_t hash = 0;
    buffer::ChunkRef chunk;
    Instant deadline;
    uint32_t fragment_count = 0;
    uint32_t bytes_received = 0;
    // The end of the data (set by the last fragment), or 0 if unknown.
    uint32_t total_len = 0;
    bool last_received = false;
    uint8_t header_len = 0;
    // Sorted by start; disjoint.
    std::array<Range, kMaxFragmentsCapacity> ranges;
    std::array<uint8_t, kMaxKeptHeaderLen> header;
    // On `lru_` while in progress, on `free_` while unused.
    ListHook lru_hook;
    // On the family's expiry list while in progress.
    ListHook expiry_hook;
  };

  using LruList = List<&Datagram::lru_hook>;
  using ExpiryList = List<&Datagram::expiry_hook>;

  // Checks that need no state: empty, misaligned, too big.
  bool CheckFragment(const ReassemblyKey& key, uint32_t offset,
                     bool more_fragments, size_t len, size_t header_len,
                     DropReason& reason) const;
  // Slot for a new datagram (evicting if allowed), or null with `reason`.
  Datagram* StartDatagram(const ReassemblyKey& key, size_t hash, Instant now,
                          DropReason& reason);
  // Places the fragment in `d` or says why not; on kOverlap,
  // kConflictingEnd and kTooManyFragments the caller discards `d`.
  bool Insert(Datagram& d, uint32_t offset, bool more_fragments,
              std::span<const uint8_t> data, DropReason& reason);
  // Unlinks `d` from the table and lists, drops its chunk, frees the slot.
  void Release(Datagram& d);
  void Discard(Datagram& d, DropReason reason);
  AddResult Drop(DropReason reason);
  ExpiryList& ExpiryFor(IpFamily family) {
    return family == IpFamily::kIpv4 ? expiry_v4_ : expiry_v6_;
  }
  Duration TimeoutFor(IpFamily family) const {
    return family == IpFamily::kIpv4 ? options_.ipv4_timeout
                                     : options_.ipv6_timeout;
  }

  // Open-addressing table of Datagram pointers.
  size_t Probe(const ReassemblyKey& key, size_t hash) const;
  Datagram* Find(const ReassemblyKey& key, size_t hash) const;
  void TableInsert(Datagram* d);
  void TableErase(const Datagram& d);

  buffer::ChunkPool& chunks_;
  ReassemblerOptions options_;
  size_t slot_count_ = 0;
  std::unique_ptr<Datagram[]> slots_;
  std::unique_ptr<Datagram*[]> table_;
  size_t table_mask_ = 0;
  LruList free_;
  LruList lru_;  // least recently active first
  ExpiryList expiry_v4_;
  ExpiryList expiry_v6_;
  Stats stats_;
};

}  // namespace netstack::ip

#endif  // NETSTACK_IP_REASSEMBLY_H_
