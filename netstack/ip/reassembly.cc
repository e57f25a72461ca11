#include "netstack/ip/reassembly.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/hash/hash.h"
#include "netstack/base/dcheck.h"

namespace netstack::ip {
namespace {

// RFC 791 section 3.1: Total Length is 16 bits and the header at least 20.
constexpr uint64_t kIpv4MaxTotalLen = 65535;
constexpr size_t kIpv4MinHeaderLen = 20;
// RFC 8200 sections 3 and 4.5: Payload Length is 16 bits; a fragment
// carries at least the fixed header (40) and the Fragment header (8).
constexpr uint64_t kIpv6MaxPayloadLen = 65535;
constexpr size_t kIpv6MinFragmentHeadersLen = 48;
// Both families place fragments on 8-octet boundaries.
constexpr uint32_t kFragmentUnit = 8;

static_assert(kIpv6MaxPayloadLen <= buffer::kChunkSize,
              "a chunk must hold the largest reassembled payload");

// The largest end (offset + length) a fragment may have, given the length
// of the header it arrived with; see "Bounds" in reassembly.h.
uint64_t MaxEnd(IpFamily family, size_t header_len) {
  if (family == IpFamily::kIpv4) {
    const uint64_t h = std::max(header_len, kIpv4MinHeaderLen);
    return h >= kIpv4MaxTotalLen ? 0 : kIpv4MaxTotalLen - h;
  }
  const uint64_t unfragmentable =
      std::max(header_len, kIpv6MinFragmentHeadersLen) -
      kIpv6MinFragmentHeadersLen;
  return unfragmentable >= kIpv6MaxPayloadLen
             ? 0
             : kIpv6MaxPayloadLen - unfragmentable;
}

// Smallest power of two that is at least twice `slots` (and at least 8):
// the table stays at most half full.
size_t TableSizeFor(size_t slots) {
  size_t n = 8;
  while (n < 2 * slots) n <<= 1;
  return n;
}

}  // namespace

ReassemblyKey ReassemblyKey::Ipv4(const wire::Ipv4Address& src,
                                  const wire::Ipv4Address& dst,
                                  uint8_t protocol, uint16_t identification) {
  ReassemblyKey k;
  src.CopyTo(k.src.data());
  dst.CopyTo(k.dst.data());
  k.identification = identification;
  k.protocol = protocol;
  k.family = IpFamily::kIpv4;
  return k;
}

ReassemblyKey ReassemblyKey::Ipv6(const wire::Ipv6Address& src,
                                  const wire::Ipv6Address& dst,
                                  uint32_t identification) {
  ReassemblyKey k;
  src.CopyTo(k.src.data());
  dst.CopyTo(k.dst.data());
  k.identification = identification;
  k.protocol = 0;
  k.family = IpFamily::kIpv6;
  return k;
}

std::string_view DropReasonName(DropReason reason) {
  switch (reason) {
    case DropReason::kEmptyFragment:
      return "empty_fragment";
    case DropReason::kMisaligned:
      return "misaligned";
    case DropReason::kTooBig:
      return "too_big";
    case DropReason::kConflictingEnd:
      return "conflicting_end";
    case DropReason::kOverlap:
      return "overlap";
    case DropReason::kDuplicate:
      return "duplicate";
    case DropReason::kTooManyFragments:
      return "too_many_fragments";
    case DropReason::kMemoryLimit:
      return "memory_limit";
    case DropReason::kNoChunk:
      return "no_chunk";
    case DropReason::kTimeout:
      return "timeout";
  }
  return "unknown";
}

absl::Status Reassembler::ValidateOptions(const ReassemblerOptions& options) {
  if (options.memory_limit_bytes < buffer::kChunkSize) {
    return absl::InvalidArgumentError(
        "memory_limit_bytes is below one chunk: no datagram could be held");
  }
  if (options.ipv4_timeout <= absl::ZeroDuration() ||
      options.ipv6_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("reassembly timeouts must be positive");
  }
  if (options.max_fragments < 1 ||
      options.max_fragments > kMaxFragmentsCapacity) {
    return absl::InvalidArgumentError(
        "max_fragments must be in [1, kMaxFragmentsCapacity]");
  }
  return absl::OkStatus();
}

Reassembler::Reassembler(buffer::ChunkPool& chunks,
                         const ReassemblerOptions& options)
    : chunks_(chunks), options_(options) {
  NETSTACK_DCHECK(ValidateOptions(options).ok());
  options_.max_fragments =
      std::clamp<uint32_t>(options_.max_fragments, 1, kMaxFragmentsCapacity);
  slot_count_ = options_.memory_limit_bytes / buffer::kChunkSize;
  slots_ = std::make_unique<Datagram[]>(slot_count_);
  for (size_t i = 0; i < slot_count_; ++i) free_.push_back(slots_[i]);
  const size_t table_size = TableSizeFor(slot_count_);
  table_ = std::make_unique<Datagram*[]>(table_size);  // all null
  table_mask_ = table_size - 1;
}

Reassembler::~Reassembler() {
  while (!lru_.empty()) Release(lru_.front());
  free_.clear();
}

AddResult Reassembler::Drop(DropReason reason) {
  ++stats_.fragment_drops[static_cast<size_t>(reason)];
  AddResult r;
  r.outcome = AddOutcome::kDropped;
  r.drop_reason = reason;
  return r;
}

bool Reassembler::CheckFragment(const ReassemblyKey& key, uint32_t offset,
                                bool more_fragments, size_t len,
                                size_t header_len, DropReason& reason) const {
  if (len == 0) {
    reason = DropReason::kEmptyFragment;
    return false;
  }
  if (offset % kFragmentUnit != 0 ||
      (more_fragments && len % kFragmentUnit != 0)) {
    reason = DropReason::kMisaligned;
    return false;
  }
  if (uint64_t{offset} + len > MaxEnd(key.family, header_len)) {
    reason = DropReason::kTooBig;
    return false;
  }
  return true;
}

AddResult Reassembler::Add(const ReassemblyKey& key, uint32_t offset_bytes,
                           bool more_fragments, std::span<const uint8_t> data,
                           Instant now, std::span<const uint8_t> header) {
  ++stats_.fragments_received;
  DropReason reason = DropReason::kEmptyFragment;
  if (!CheckFragment(key, offset_bytes, more_fragments, data.size(),
                     header.size(), reason)) {
    return Drop(reason);
  }

  const size_t hash = absl::HashOf(key);
  Datagram* d = Find(key, hash);
  if (d == nullptr) {
    d = StartDatagram(key, hash, now, reason);
    if (d == nullptr) return Drop(reason);
  }
  if (!Insert(*d, offset_bytes, more_fragments, data, reason)) {
    // An exact duplicate leaves the datagram as it was; every other
    // conflict means it cannot be reassembled correctly.
    if (reason != DropReason::kDuplicate) Discard(*d, reason);
    return Drop(reason);
  }
  ++stats_.fragments_accepted;
  if (offset_bytes == 0 && !header.empty()) {
    const size_t n = std::min(header.size(), kMaxKeptHeaderLen);
    std::memcpy(d->header.data(), header.data(), n);
    d->header_len = static_cast<uint8_t>(n);
  }

  AddResult r;
  if (d->last_received && d->bytes_received == d->total_len) {
    // Ranges are disjoint and none ends past total_len, so as many bytes
    // as the datagram has means no hole is left.
    r.outcome = AddOutcome::kComplete;
    r.payload = buffer::PayloadView(std::move(d->chunk), 0, d->total_len);
    ++stats_.datagrams_completed;
    Release(*d);
    return r;
  }
  // Most recently active goes to the back: eviction takes the front.
  lru_.erase(lru_.iterator_to(*d));
  lru_.push_back(*d);
  r.outcome = AddOutcome::kIncomplete;
  return r;
}

Reassembler::Datagram* Reassembler::StartDatagram(const ReassemblyKey& key,
                                                  size_t hash, Instant now,
                                                  DropReason& reason) {
  if (free_.empty()) {
    if (!options_.evict_when_full || lru_.empty()) {
      reason = DropReason::kMemoryLimit;
      return nullptr;
    }
    // Evicting first returns that datagram's chunk to the pool, so the
    // allocation below cannot fail for want of it, and chunk memory held
    // never exceeds the limit, even for a moment.
    Discard(lru_.front(), DropReason::kMemoryLimit);
  }
  buffer::ChunkRef chunk = chunks_.Allocate();
  if (!chunk) {
    reason = DropReason::kNoChunk;
    return nullptr;
  }
  Datagram& d = free_.front();
  free_.pop_front();
  d.key = key;
  d.hash = hash;
  d.chunk = std::move(chunk);
  d.deadline = now + TimeoutFor(key.family);
  d.fragment_count = 0;
  d.bytes_received = 0;
  d.total_len = 0;
  d.last_received = false;
  d.header_len = 0;
  TableInsert(&d);
  lru_.push_back(d);
  // The timeout is constant per family, so appending keeps each expiry
  // list sorted by deadline.
  ExpiryFor(key.family).push_back(d);
  ++stats_.datagrams_started;
  ++stats_.datagrams_held;
  stats_.bytes_held += buffer::kChunkSize;
  stats_.peak_bytes_held = std::max(stats_.peak_bytes_held, stats_.bytes_held);
  return &d;
}

bool Reassembler::Insert(Datagram& d, uint32_t offset, bool more_fragments,
                         std::span<const uint8_t> data, DropReason& reason) {
  // CheckFragment bounded end to 65535, so these fit in 16 bits.
  const uint32_t end = offset + static_cast<uint32_t>(data.size());
  const uint32_t count = d.fragment_count;
  const uint32_t max_end = count == 0 ? 0 : d.ranges[count - 1].end;

  // RFC 791 section 3.2 / RFC 8200 section 4.5: the last fragment fixes
  // the length. A second last fragment must agree with it. Before it, data
  // already received at or past its end conflicts: either past it, or
  // ending exactly there in a fragment that said more data follows (ranges
  // are sorted and disjoint, so the last range ends at max_end). Once the
  // end is known, no fragment may reach past it.
  if (!more_fragments) {
    if (d.last_received ? end != d.total_len : max_end >= end) {
      reason = DropReason::kConflictingEnd;
      return false;
    }
  } else if (d.last_received && end > d.total_len) {
    reason = DropReason::kConflictingEnd;
    return false;
  }

  // First range that starts at or after this one.
  const auto first = d.ranges.begin();
  const auto last = first + count;
  const auto it = std::lower_bound(
      first, last, offset,
      [](const Range& r, uint32_t start) { return r.start < start; });
  const size_t i = static_cast<size_t>(it - first);
  if (i < count && d.ranges[i].start == offset && d.ranges[i].end == end) {
    // Same range: a duplicate if the bytes agree (RFC 8200 section 4.5),
    // otherwise conflicting data, which RFC 5722 treats as an overlap.
    const bool same = std::memcmp(d.chunk->data().data() + offset, data.data(),
                                  data.size()) == 0;
    reason = same ? DropReason::kDuplicate : DropReason::kOverlap;
    return false;
  }
  if ((i > 0 && d.ranges[i - 1].end > offset) ||
      (i < count && d.ranges[i].start < end)) {
    reason = DropReason::kOverlap;  // RFC 5722 section 4
    return false;
  }
  if (count >= options_.max_fragments) {
    reason = DropReason::kTooManyFragments;
    return false;
  }

  std::copy_backward(it, last, last + 1);
  d.ranges[i] =
      Range{static_cast<uint16_t>(offset), static_cast<uint16_t>(end)};
  ++d.fragment_count;
  std::memcpy(d.chunk->mutable_data().data() + offset, data.data(),
              data.size());
  d.bytes_received += static_cast<uint32_t>(data.size());
  stats_.fragment_bytes_held += data.size();
  if (!more_fragments) {
    d.last_received = true;
    d.total_len = end;
  }
  return true;
}

void Reassembler::Release(Datagram& d) {
  TableErase(d);
  lru_.erase(lru_.iterator_to(d));
  ExpiryList& expiry = ExpiryFor(d.key.family);
  expiry.erase(expiry.iterator_to(d));
  d.chunk.Reset();
  stats_.fragment_bytes_held -= d.bytes_received;
  --stats_.datagrams_held;
  stats_.bytes_held -= buffer::kChunkSize;
  d.fragment_count = 0;
  d.bytes_received = 0;
  free_.push_front(d);
}

void Reassembler::Discard(Datagram& d, DropReason reason) {
  ++stats_.datagram_drops[static_cast<size_t>(reason)];
  Release(d);
}

size_t Reassembler::Poll(
    Instant now, absl::FunctionRef<void(const ExpiredDatagram&)> on_expired) {
  size_t expired = 0;
  for (;;) {
    // Oldest first across both families: the earlier of the two fronts.
    Datagram* d = nullptr;
    if (!expiry_v4_.empty()) d = &expiry_v4_.front();
    if (!expiry_v6_.empty() &&
        (d == nullptr || expiry_v6_.front().deadline < d->deadline)) {
      d = &expiry_v6_.front();
    }
    if (d == nullptr || d->deadline > now) break;

    ExpiredDatagram report;
    report.key = d->key;
    report.first_fragment_received =
        d->fragment_count > 0 && d->ranges[0].start == 0;
    if (report.first_fragment_received) {
      report.first_header =
          std::span<const uint8_t>(d->header.data(), d->header_len);
      report.first_data = d->chunk->data().first(d->ranges[0].end);
    }
    on_expired(report);
    Discard(*d, DropReason::kTimeout);
    ++expired;
  }
  return expired;
}

size_t Reassembler::Poll(Instant now) {
  return Poll(now, [](const ExpiredDatagram&) {});
}

Instant Reassembler::NextDeadline() const {
  Instant next = kNever;
  if (!expiry_v4_.empty()) next = std::min(next, expiry_v4_.front().deadline);
  if (!expiry_v6_.empty()) next = std::min(next, expiry_v6_.front().deadline);
  return next;
}

size_t Reassembler::Probe(const ReassemblyKey& key, size_t hash) const {
  // The table is at most half full, so an empty entry ends every probe.
  size_t i = hash & table_mask_;
  while (table_[i] != nullptr &&
         !(table_[i]->hash == hash && table_[i]->key == key)) {
    i = (i + 1) & table_mask_;
  }
  return i;
}

Reassembler::Datagram* Reassembler::Find(const ReassemblyKey& key,
                                         size_t hash) const {
  return table_[Probe(key, hash)];
}

void Reassembler::TableInsert(Datagram* d) {
  const size_t i = Probe(d->key, d->hash);
  NETSTACK_DCHECK(table_[i] == nullptr);
  table_[i] = d;
}

void Reassembler::TableErase(const Datagram& d) {
  size_t hole = Probe(d.key, d.hash);
  NETSTACK_DCHECK(table_[hole] == &d);
  // Backward-shift deletion: move later entries of the probe run into the
  // hole when the hole lies on their probe path, so no tombstones are
  // needed and lookups stay exact.
  size_t j = hole;
  for (;;) {
    j = (j + 1) & table_mask_;
    if (table_[j] == nullptr) break;
    const size_t home = table_[j]->hash & table_mask_;
    if (((j - home) & table_mask_) >= ((j - hole) & table_mask_)) {
      table_[hole] = table_[j];
      hole = j;
    }
  }
  table_[hole] = nullptr;
}

}  // namespace netstack::ip
