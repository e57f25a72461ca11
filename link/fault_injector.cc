#include "link/fault_injector.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "link/frame_util.h"
#include "netstack/buffer/payload_view.h"
#include "netstack/buffer/prependable.h"
#include "netstack/wire/ethernet.h"

namespace netstack::link {

namespace {

constexpr size_t kEthernetHeaderLen = wire::EthernetFrame::kHeaderLen;
constexpr uint64_t kMaxRateBps = 1'000'000'000'000'000;  // 10^15 bit/s
// Longest delay, jitter or hold limit accepted: keeps every sum of
// instants and durations finite and 2 * jitter in nanoseconds in range.
constexpr Duration kMaxDuration = absl::Hours(24);

enum Effect { kLoss, kDuplicate, kCorrupt, kJitter, kReorder };

// SplitMix64's finalizer (Steele et al., 2014): decorrelates the streams
// derived from one seed.
uint64_t Mix(uint64_t x) {
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

uint64_t StreamSeed(uint64_t seed, int direction, Effect effect) {
  return Mix(seed + 0x9e3779b97f4a7c15ULL *
                        static_cast<uint64_t>(1 + direction * 8 + effect));
}

absl::Status CheckProfile(const FaultProfile& p, const char* direction) {
  const std::pair<const char*, double> probabilities[] = {
      {"loss", p.loss},
      {"duplicate", p.duplicate},
      {"reorder", p.reorder},
      {"corrupt", p.corrupt}};
  for (const auto& [name, value] : probabilities) {
    // Written so that NaN fails too.
    if (!(value >= 0 && value <= 1)) {
      return absl::InvalidArgumentError(
          absl::StrCat("fault injector: ", direction, ".", name, " = ", value,
                       " is not a probability in [0, 1]"));
    }
  }
  const std::pair<const char*, Duration> durations[] = {
      {"delay", p.delay},
      {"jitter", p.jitter},
      {"reorder_hold_limit", p.reorder_hold_limit}};
  for (const auto& [name, value] : durations) {
    if (value < absl::ZeroDuration() || value > kMaxDuration) {
      return absl::InvalidArgumentError(
          absl::StrCat("fault injector: ", direction, ".", name, " = ",
                       absl::FormatDuration(value), " is outside 0..",
                       absl::FormatDuration(kMaxDuration)));
    }
  }
  if (p.reorder_distance == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "fault injector: ", direction, ".reorder_distance must be at least 1"));
  }
  if (p.rate_bps > kMaxRateBps) {
    return absl::InvalidArgumentError(
        absl::StrCat("fault injector: ", direction, ".rate_bps = ", p.rate_bps,
                     " exceeds 10^15 bit/s"));
  }
  return absl::OkStatus();
}

}  // namespace

bool FaultProfile::Active() const {
  return loss > 0 || duplicate > 0 || reorder > 0 || corrupt > 0 ||
         delay > absl::ZeroDuration() || jitter > absl::ZeroDuration() ||
         rate_bps > 0;
}

std::string FaultProfile::ToString() const {
  std::vector<std::string> parts;
  if (loss > 0) parts.push_back(absl::StrCat("loss=", loss));
  if (duplicate > 0) parts.push_back(absl::StrCat("duplicate=", duplicate));
  if (reorder > 0) {
    parts.push_back(absl::StrCat("reorder=", reorder, "/", reorder_distance));
  }
  if (corrupt > 0) parts.push_back(absl::StrCat("corrupt=", corrupt));
  if (delay > absl::ZeroDuration()) {
    parts.push_back(absl::StrCat("delay=", absl::FormatDuration(delay)));
  }
  if (jitter > absl::ZeroDuration()) {
    parts.push_back(absl::StrCat("jitter=", absl::FormatDuration(jitter)));
  }
  if (rate_bps > 0) parts.push_back(absl::StrCat("rate=", rate_bps, "bit/s"));
  if (parts.empty()) return "none";
  return absl::StrJoin(parts, " ");
}

namespace internal {

FaultPipeline::FaultPipeline(const FaultProfile& profile, uint64_t seed,
                             int direction, size_t queue_limit,
                             buffer::PacketPool& packets,
                             buffer::ChunkPool& chunks)
    : profile_(profile),
      active_(profile.Active()),
      queue_limit_(queue_limit),
      packets_(packets),
      chunks_(chunks),
      loss_rng_(StreamSeed(seed, direction, kLoss)),
      duplicate_rng_(StreamSeed(seed, direction, kDuplicate)),
      corrupt_rng_(StreamSeed(seed, direction, kCorrupt)),
      jitter_rng_(StreamSeed(seed, direction, kJitter)),
      reorder_rng_(StreamSeed(seed, direction, kReorder)),
      queue_meta_(queue_limit),
      reorder_meta_(queue_limit) {}

double FaultPipeline::Uniform01(std::mt19937_64& rng) {
  // The top 53 bits, scaled exactly into [0, 1).
  return static_cast<double>(rng() >> 11) * 0x1.0p-53;
}

bool FaultPipeline::Chance(std::mt19937_64& rng, double p) {
  if (p <= 0) return false;
  return Uniform01(rng) < p;
}

uint64_t FaultPipeline::Below(std::mt19937_64& rng, uint64_t n) {
  return static_cast<uint64_t>((static_cast<unsigned __int128>(rng()) * n) >>
                               64);
}

void FaultPipeline::Admit(buffer::PacketPtr packet, FrameFlags flags,
                          Instant now) {
  ++stats_.packets_in;
  if (Chance(loss_rng_, profile_.loss)) {
    ++stats_.dropped;
    return;
  }
  buffer::PacketPtr copy;
  if (Chance(duplicate_rng_, profile_.duplicate)) {
    copy = ClonePacket(*packet, packets_);
    if (copy != nullptr) {
      ++stats_.duplicated;
    } else {
      ++stats_.no_buffer;
    }
  }
  Enqueue(std::move(packet), flags, now);
  if (copy != nullptr) Enqueue(std::move(copy), flags, now);
}

void FaultPipeline::CountUnbuffered() {
  ++stats_.packets_in;
  ++stats_.no_buffer;
}

void FaultPipeline::Enqueue(buffer::PacketPtr packet, FrameFlags flags,
                            Instant now) {
  if (held() >= queue_limit_) {
    ++stats_.overflow;
    return;
  }
  if (Chance(corrupt_rng_, profile_.corrupt) && packet->size() > 0) {
    if (Corrupt(*packet)) {
      ++stats_.corrupted;
      flags.checksum_verified = false;
    } else {
      ++stats_.no_buffer;
    }
  }
  const Instant release = ReleaseTime(packet->size(), now);
  if (Chance(reorder_rng_, profile_.reorder)) {
    // Released right after the reorder_distance-th packet admitted to the
    // queue from now on, or at the hold limit past its own release time.
    const Instant own = std::max(release, last_release_);
    last_hold_deadline_ =
        std::max(own + profile_.reorder_hold_limit, last_hold_deadline_);
    reorder_meta_.push_back(Held{next_seq_,
                                 next_seq_ + profile_.reorder_distance - 1,
                                 last_hold_deadline_, flags});
    reorder_.PushBack(std::move(packet));
    return;
  }
  last_release_ = std::max(release, last_release_);
  if (last_release_ > now) ++stats_.delayed;
  queue_meta_.push_back(Queued{last_release_, next_seq_++, flags});
  queue_.PushBack(std::move(packet));
}

Instant FaultPipeline::ReleaseTime(size_t frame_len, Instant now) {
  Instant done = now;
  if (profile_.rate_bps > 0) {
    if (link_free_ > now) ++stats_.rate_limited;
    const Instant start = std::max(now, link_free_);
    // Duration keeps quarter nanoseconds, so the rounding error is at most
    // 0.25 ns per packet.
    done = start + absl::Seconds(static_cast<int64_t>(frame_len) * 8) /
                       static_cast<int64_t>(profile_.rate_bps);
    link_free_ = done;
  }
  Instant release = done + profile_.delay;
  if (profile_.jitter > absl::ZeroDuration()) {
    const int64_t j = absl::ToInt64Nanoseconds(profile_.jitter);
    const uint64_t choices = 2 * static_cast<uint64_t>(j) + 1;
    const int64_t offset =
        static_cast<int64_t>(Below(jitter_rng_, choices)) - j;
    release += absl::Nanoseconds(offset);
  }
  return std::max(release, now);
}

bool FaultPipeline::Corrupt(buffer::PacketBuffer& packet) {
  const size_t size = packet.size();
  const size_t skip = size > kEthernetHeaderLen ? kEthernetHeaderLen : 0;
  const uint64_t bit = skip * 8 + Below(corrupt_rng_, (size - skip) * 8);
  size_t byte = bit / 8;
  const uint8_t mask = static_cast<uint8_t>(1u << (bit % 8));

  // The headers are this packet's own memory: flip in place.
  const std::span<uint8_t> headers = packet.headers().mutable_data();
  if (byte < headers.size()) {
    headers[byte] ^= mask;
    return true;
  }
  byte -= headers.size();

  // The payload is shared: copy the one view that holds the bit into a
  // fresh chunk, flip it there, and rebuild the packet around the copy.
  std::array<buffer::PayloadView, buffer::PacketBuffer::kMaxPayloadViews> views;
  const std::span<const buffer::PayloadView> payload = packet.payload();
  size_t target = payload.size();
  for (size_t i = 0; i < payload.size(); ++i) {
    views[i] = payload[i];
    if (target == payload.size()) {
      if (byte < payload[i].size()) {
        target = i;
      } else {
        byte -= payload[i].size();
      }
    }
  }
  if (target == payload.size()) return false;  // unreachable: bit < size
  buffer::ChunkRef chunk = chunks_.Allocate();
  if (!chunk) return false;
  const std::span<const uint8_t> original = views[target].bytes();
  const uint32_t len = static_cast<uint32_t>(original.size());
  std::span<uint8_t> fresh = chunk->mutable_data();
  std::memcpy(fresh.data(), original.data(), len);
  fresh[byte] ^= mask;
  views[target] = buffer::PayloadView(std::move(chunk), 0, len);

  const size_t count = payload.size();
  uint8_t saved[buffer::kMaxHeaderLen];
  const size_t header_len = headers.size();
  std::memcpy(saved, headers.data(), header_len);
  packet.Reset();
  if (header_len > 0) {
    std::optional<std::span<uint8_t>> room =
        packet.headers().Prepend(header_len);
    if (room.has_value()) std::memcpy(room->data(), saved, header_len);
  }
  for (size_t i = 0; i < count; ++i) {
    // As many views as the packet had, so every one fits again.
    if (!packet.AppendPayload(std::move(views[i]))) return false;
  }
  return true;
}

template <typename Sink>
void FaultPipeline::Release(Instant now, Sink&& sink) {
  for (;;) {
    const bool queued_due =
        !queue_meta_.empty() && queue_meta_.front().release <= now;
    const bool held_due =
        !reorder_meta_.empty() && reorder_meta_.front().deadline <= now;
    if (!queued_due && !held_due) return;
    if (queued_due && (!held_due || queue_meta_.front().release <=
                                        reorder_meta_.front().deadline)) {
      const Queued q = queue_meta_.front();
      queue_meta_.pop_front();
      released_seq_ = q.seq + 1;
      ++stats_.packets_out;
      sink(queue_.PopFront(), q.flags);
      // Packets held back behind this one follow it now.
      while (!reorder_meta_.empty() &&
             reorder_meta_.front().release_after_seq <= q.seq) {
        const Held h = reorder_meta_.front();
        reorder_meta_.pop_front();
        ++stats_.reordered;
        ++stats_.packets_out;
        sink(reorder_.PopFront(), h.flags);
      }
    } else {
      // The hold limit passed before reorder_distance packets overtook it.
      const Held h = reorder_meta_.front();
      reorder_meta_.pop_front();
      if (released_seq_ > h.first_successor_seq) ++stats_.reordered;
      ++stats_.packets_out;
      sink(reorder_.PopFront(), h.flags);
    }
  }
}

Instant FaultPipeline::NextRelease() const {
  Instant next = kNever;
  if (!queue_meta_.empty()) next = queue_meta_.front().release;
  if (!reorder_meta_.empty()) {
    next = std::min(next, reorder_meta_.front().deadline);
  }
  return next;
}

}  // namespace internal

absl::StatusOr<std::unique_ptr<FaultInjector>> FaultInjector::Create(
    std::unique_ptr<LinkEndpoint> inner, buffer::PacketPool& packets,
    buffer::ChunkPool& chunks, const FaultInjectorOptions& options) {
  if (inner == nullptr) {
    return absl::InvalidArgumentError(
        "fault injector: no inner endpoint to wrap");
  }
  if (absl::Status s = CheckProfile(options.egress, "egress"); !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckProfile(options.ingress, "ingress"); !s.ok()) {
    return s;
  }
  if (options.queue_limit == 0) {
    return absl::InvalidArgumentError(
        "fault injector: queue_limit must be at least 1 packet");
  }
  return std::unique_ptr<FaultInjector>(
      new FaultInjector(std::move(inner), packets, chunks, options));
}

FaultInjector::FaultInjector(std::unique_ptr<LinkEndpoint> inner,
                             buffer::PacketPool& packets,
                             buffer::ChunkPool& chunks,
                             const FaultInjectorOptions& options)
    : inner_(std::move(inner)),
      packets_(packets),
      options_(options),
      egress_(options.egress, options.seed, 0, options.queue_limit, packets,
              chunks),
      ingress_(options.ingress, options.seed, 1, options.queue_limit, packets,
               chunks) {
  inner_->Attach(&tap_);
}

FaultInjector::~FaultInjector() { inner_->Attach(nullptr); }

LinkCapabilities FaultInjector::Capabilities() const {
  return inner_->Capabilities();
}

void FaultInjector::Attach(LinkReceiver* receiver) { receiver_ = receiver; }

size_t FaultInjector::Transmit(buffer::PacketChain& chain, Instant now) {
  if (!egress_.active()) return inner_->Transmit(chain, now);
  FlushPending(now);
  if (!pending_.empty()) return 0;
  size_t taken = 0;
  const uint64_t overflow_before = egress_.stats().overflow;
  while (buffer::PacketPtr packet = chain.PopFront()) {
    egress_.Admit(std::move(packet), internal::FrameFlags{}, now);
    ++taken;
    // Release as we go, so packets that are due at once (no delay) never
    // occupy the queue and a long chain cannot overflow it by itself.
    CollectEgress(now);
  }
  taken -= static_cast<size_t>(egress_.stats().overflow - overflow_before);
  FlushPending(now);
  return taken;
}

void FaultInjector::CollectEgress(Instant now) {
  egress_.Release(now, [this](buffer::PacketPtr packet, internal::FrameFlags) {
    pending_.PushBack(std::move(packet));
  });
}

void FaultInjector::FlushPending(Instant now) {
  if (!pending_.empty()) inner_->Transmit(pending_, now);
  retry_at_ = pending_.empty() ? kNever : now + kRetryInterval;
}

void FaultInjector::Tap::DeliverFrames(std::span<InboundFrame> frames,
                                       Instant now) {
  FaultInjector& f = *owner_;
  if (!f.ingress_.active()) {
    if (f.receiver_ != nullptr) f.receiver_->DeliverFrames(frames, now);
    return;
  }
  for (const InboundFrame& frame : frames) {
    buffer::PacketPtr packet = f.packets_.Allocate();
    if (packet == nullptr || !packet->AppendPayload(frame.frame)) {
      f.ingress_.CountUnbuffered();
      continue;
    }
    f.ingress_.Admit(
        std::move(packet),
        internal::FrameFlags{frame.checksum_verified, frame.checksum_partial},
        now);
    f.CollectIngress(now);
  }
  f.DeliverBatch(now);
}

void FaultInjector::CollectIngress(Instant now) {
  // While the receiver runs, batch_ is the span it was given: frames that
  // arrive meanwhile wait in the queue for the next Poll.
  if (delivering_) return;
  ingress_.Release(
      now, [this, now](buffer::PacketPtr packet, internal::FrameFlags flags) {
        InboundFrame& frame = batch_[batch_count_++];
        if (!packet->payload().empty()) frame.frame = packet->payload()[0];
        frame.checksum_verified = flags.checksum_verified;
        frame.checksum_partial = flags.checksum_partial;
        if (batch_count_ == kDeliverBatch) DeliverBatch(now);
      });
}

void FaultInjector::DeliverBatch(Instant now) {
  if (delivering_ || batch_count_ == 0) return;
  delivering_ = true;
  if (receiver_ != nullptr) {
    receiver_->DeliverFrames(
        std::span<InboundFrame>(batch_.data(), batch_count_), now);
  }
  for (size_t i = 0; i < batch_count_; ++i) batch_[i] = InboundFrame{};
  batch_count_ = 0;
  delivering_ = false;
}

int FaultInjector::ReadFd() const { return inner_->ReadFd(); }

void FaultInjector::OnReadable(Instant now) { inner_->OnReadable(now); }

int FaultInjector::WriteFd() const { return inner_->WriteFd(); }

Instant FaultInjector::NextDeadline() const {
  return std::min({inner_->NextDeadline(), egress_.NextRelease(),
                   ingress_.NextRelease(), retry_at_});
}

void FaultInjector::Poll(Instant now) {
  if (polling_) return;
  polling_ = true;
  inner_->Poll(now);
  if (egress_.active()) {
    CollectEgress(now);
    FlushPending(now);
  }
  if (ingress_.active()) {
    CollectIngress(now);
    DeliverBatch(now);
  }
  polling_ = false;
}

LinkStats FaultInjector::Stats() const { return inner_->Stats(); }

std::string FaultInjector::Name() const {
  return absl::StrCat("faults(egress: ", options_.egress.ToString(),
                      ", ingress: ", options_.ingress.ToString(), ") -> ",
                      inner_->Name());
}

}  // namespace netstack::link
