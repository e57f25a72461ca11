// A decorator that impairs a link the way Linux's netem would (the kernel
// here has no sch_netem): random loss, duplication, reordering and bit
// corruption, delay with jitter, and a rate limit. Reproducible: the same
// seed, options and input sequence (frames and the `now` of each call) give
// the same output sequence, byte for byte and instant for instant.
//
//   FaultInjectorOptions options;
//   options.egress.loss = 0.01;
//   options.egress.delay = absl::Milliseconds(20);
//   auto link = FaultInjector::Create(std::move(tap), packets, chunks,
//                                     options);
//
// Directions. Each direction has its own FaultProfile: `egress` applies to
// what the stack transmits (Transmit), `ingress` to what the inner endpoint
// receives before it reaches the stack's receiver. Both default to no
// faults, and a direction without faults costs nothing: packets pass
// straight through. Testing a TCP stack against the kernel needs both:
// egress faults exercise our sender (retransmission, RACK, recovery) and
// the kernel's receiver; ingress faults exercise our receiver (out-of-order
// queue, SACK and duplicate ACK generation) and the kernel's sender; and
// loss in one direction of a bulk transfer hits data, in the other ACKs.
// So netstackd's --loss/--delay/... should configure both directions (a
// lossy path, like netem on both ends of a veth), with per-direction flags
// to impair only one.
//
// What happens to each packet of a direction, in this order:
//   1. loss: dropped with probability `loss`.
//   2. duplicate: with probability `duplicate`, a second packet with the
//      same content follows it (a pooled PacketBuffer with copied headers
//      and shared payload views). Both copies then go through steps 3-6 on
//      their own; a copy is never lost or duplicated again.
//   3. queue limit: a packet that finds `queue_limit` packets held in its
//      direction is dropped (tail drop, `overflow`), like netem's limit.
//   4. corrupt: with probability `corrupt`, one uniformly chosen bit after
//      the 14-byte Ethernet header (anywhere in a frame of 14 bytes or
//      less) is flipped, so the damage lands where IP/TCP/UDP checksums
//      must catch it rather than making the frame unaddressable. Shared
//      chunk memory is never written: a bit in the headers is flipped in
//      the packet's own header buffer, a bit in the payload in a copy of
//      that payload view in a fresh chunk. A corrupted inbound frame loses
//      its checksum_verified flag (the kernel vouched for other bytes).
//   5. timing: the rate limiter serializes packets at `rate_bps` bits per
//      second, counting the whole Ethernet frame (no preamble or FCS): a
//      packet starts when the previous one is done (`rate_limited` counts
//      those that had to wait) and takes size*8/rate_bps. Then it is
//      delayed by `delay` plus a jitter drawn uniformly from
//      [-jitter, +jitter] (to the nanosecond; never before it arrived).
//      Jitter does not reorder: a packet is never released before the one
//      admitted ahead of it, so its release time is
//        max(arrival + serialization + delay + jitter, previous release),
//      which still lies in [arrival + delay - jitter, arrival + delay +
//      jitter] when there is no rate limit. Reordering is step 6 alone.
//   6. reorder: with probability `reorder`, the packet is held back and
//      released immediately after the `reorder_distance`-th packet that is
//      admitted (not held) after it, so it arrives that many places late.
//      If they have not all left `reorder_hold_limit` after its own release
//      time, it is released then, behind those that did (fewer places
//      late, or in order if none did), so the tail of a burst is not held
//      forever. `reordered` counts the held packets that some later packet
//      overtook.
// Packets are released in Poll(now) once due (NextDeadline() says when);
// packets due at once (no delay, no rate limit) pass through in the same
// Transmit or delivery. Held packets wait in PacketChains (pooled, no
// allocation per packet), their release times in preallocated rings.
//
// Randomness: every effect and direction has its own std::mt19937_64
// stream derived from the seed, mapped to [0, 1) and to integer ranges by
// our own exact arithmetic (not the standard distributions, whose output
// is implementation-defined). Enabling one effect therefore does not change
// which packets another effect picks.
//
// Backpressure: if the inner endpoint leaves egress packets unsent, they
// are retried first on the next Transmit or Poll; while any are left,
// Transmit takes nothing from the caller's chain (so the caller waits for
// WriteFd like with any endpoint), and NextDeadline() asks for a retry 1 ms
// later.
//
// Ownership: the injector owns the inner endpoint; the PacketPool (for
// duplicates and held inbound frames) and ChunkPool (for corrupted copies)
// must outlive it, and so must the pools of any egress packets it holds
// (they go back to their pools when released or when it is destroyed). Stats()
// forwards the inner endpoint's LinkStats; the injector's own counters are
// egress_stats() and ingress_stats().
#ifndef NETSTACK_LINK_FAULT_INJECTOR_H_
#define NETSTACK_LINK_FAULT_INJECTOR_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "netstack/base/time.h"
#include "netstack/buffer/chunk.h"
#include "netstack/buffer/packet.h"
#include "netstack/link/link_endpoint.h"

namespace netstack::link {

// The impairments of one direction. Probabilities are fractions in [0, 1].
struct FaultProfile {
  double loss = 0;
  double duplicate = 0;
  double reorder = 0;
  double corrupt = 0;
  Duration delay = absl::ZeroDuration();
  Duration jitter = absl::ZeroDuration();
  // Bits per second of the whole Ethernet frame; 0 is no limit.
  uint64_t rate_bps = 0;
  // A reordered packet arrives this many places late (at least 1).
  uint32_t reorder_distance = 1;
  Duration reorder_hold_limit = absl::Milliseconds(10);

  // True if any effect is configured.
  bool Active() const;
  // "loss=0.05 delay=10ms ..." listing the active effects, or "none".
  std::string ToString() const;
};

struct FaultInjectorOptions {
  FaultProfile egress;
  FaultProfile ingress;
  uint64_t seed = 1;
  // Packets held (delayed, rate-limited or reordered) per direction.
  size_t queue_limit = 1000;
};

// Counters of one direction.
struct FaultStats {
  uint64_t packets_in = 0;    // entered the injector
  uint64_t packets_out = 0;   // left it (to the inner endpoint or receiver)
  uint64_t dropped = 0;       // random loss
  uint64_t duplicated = 0;    // extra copies made
  uint64_t reordered = 0;     // overtaken by a later packet
  uint64_t corrupted = 0;     // one bit flipped
  uint64_t delayed = 0;       // released later than they arrived
  uint64_t rate_limited = 0;  // waited for the rate limiter
  uint64_t overflow = 0;      // tail-dropped at queue_limit
  uint64_t no_buffer = 0;     // pool exhausted: duplicate or corruption
                              // skipped, or inbound frame dropped
};

namespace internal {

// A fixed-capacity FIFO of trivially copyable metadata, allocated once.
template <typename T>
class FixedRing {
 public:
  explicit FixedRing(size_t capacity) : items_(capacity) {}
  bool full() const { return size_ == items_.size(); }
  bool empty() const { return size_ == 0; }
  size_t size() const { return size_; }
  // The caller checks full() first.
  void push_back(const T& item) {
    items_[(head_ + size_) % items_.size()] = item;
    ++size_;
  }
  const T& front() const { return items_[head_]; }
  void pop_front() {
    head_ = (head_ + 1) % items_.size();
    --size_;
  }

 private:
  std::vector<T> items_;
  size_t head_ = 0;
  size_t size_ = 0;
};

// Inbound-only flags that must survive while a frame is held.
struct FrameFlags {
  bool checksum_verified = false;
  bool checksum_partial = false;
};

// The fault pipeline of one direction (steps 1-6 above).
class FaultPipeline {
 public:
  FaultPipeline(const FaultProfile& profile, uint64_t seed, int direction,
                size_t queue_limit, buffer::PacketPool& packets,
                buffer::ChunkPool& chunks);

  bool active() const { return active_; }
  // Runs steps 1-6 on `packet`, which arrived at `now`.
  void Admit(buffer::PacketPtr packet, FrameFlags flags, Instant now);
  // Counts a packet that could not even be admitted (no PacketBuffer).
  void CountUnbuffered();
  // Moves every packet due at `now`, in release order, to `sink(PacketPtr,
  // FrameFlags)`.
  template <typename Sink>
  void Release(Instant now, Sink&& sink);
  // When the next held packet is due; kNever if none.
  Instant NextRelease() const;
  size_t held() const { return queue_.size() + reorder_.size(); }
  FaultStats& stats() { return stats_; }
  const FaultStats& stats() const { return stats_; }

 private:
  struct Queued {
    Instant release;
    uint64_t seq;
    FrameFlags flags;
  };
  struct Held {
    // The first packet admitted after it: if that one has left when the
    // hold times out, the packet was overtaken all the same.
    uint64_t first_successor_seq;
    uint64_t release_after_seq;
    Instant deadline;
    FrameFlags flags;
  };
  // One uniform draw in [0, 1) with 53 bits.
  static double Uniform01(std::mt19937_64& rng);
  // True with probability p (never for 0, always for 1).
  static bool Chance(std::mt19937_64& rng, double p);
  // Uniform in [0, n), n > 0, by a 128-bit multiply (bias < n / 2^64).
  static uint64_t Below(std::mt19937_64& rng, uint64_t n);

  void Enqueue(buffer::PacketPtr packet, FrameFlags flags, Instant now);
  // Flips one bit as described in step 4; false if no chunk was free.
  bool Corrupt(buffer::PacketBuffer& packet);
  Instant ReleaseTime(size_t frame_len, Instant now);

  const FaultProfile profile_;
  const bool active_;
  const size_t queue_limit_;
  buffer::PacketPool& packets_;
  buffer::ChunkPool& chunks_;
  std::mt19937_64 loss_rng_;
  std::mt19937_64 duplicate_rng_;
  std::mt19937_64 corrupt_rng_;
  std::mt19937_64 jitter_rng_;
  std::mt19937_64 reorder_rng_;

  // In release order (release times never decrease).
  buffer::PacketChain queue_;
  FixedRing<Queued> queue_meta_;
  // Held back for reordering, in the order they were held.
  buffer::PacketChain reorder_;
  FixedRing<Held> reorder_meta_;

  uint64_t next_seq_ = 0;
  // Queued packets released so far (their sequence numbers are below).
  uint64_t released_seq_ = 0;
  Instant link_free_ = absl::InfinitePast();
  Instant last_release_ = absl::InfinitePast();
  Instant last_hold_deadline_ = absl::InfinitePast();
  FaultStats stats_;
};

}  // namespace internal

class FaultInjector final : public LinkEndpoint {
 public:
  // Wraps `inner` (owned). InvalidArgument, naming the field, for a null
  // inner endpoint, a probability outside [0, 1] (or NaN), a negative
  // delay, jitter or hold limit, a zero reorder_distance or queue_limit, or
  // a rate above 10^15 bit/s.
  static absl::StatusOr<std::unique_ptr<FaultInjector>> Create(
      std::unique_ptr<LinkEndpoint> inner, buffer::PacketPool& packets,
      buffer::ChunkPool& chunks, const FaultInjectorOptions& options);

  FaultInjector(const FaultInjector&) = delete;
  FaultInjector& operator=(const FaultInjector&) = delete;
  ~FaultInjector() override;

  // LinkEndpoint.
  LinkCapabilities Capabilities() const override;
  void Attach(LinkReceiver* receiver) override;
  // Takes every packet of `chain` into the egress pipeline (none while the
  // inner endpoint still pushes back) and returns how many it took, minus
  // those tail-dropped at the queue limit. Random loss counts as sent: the
  // caller of a lossy wire cannot tell.
  size_t Transmit(buffer::PacketChain& chain, Instant now) override;
  int ReadFd() const override;
  void OnReadable(Instant now) override;
  int WriteFd() const override;
  Instant NextDeadline() const override;
  void Poll(Instant now) override;
  LinkStats Stats() const override;
  // "faults(egress: loss=0.05 ..., ingress: none) -> <inner name>"
  std::string Name() const override;

  const FaultStats& egress_stats() const { return egress_.stats(); }
  const FaultStats& ingress_stats() const { return ingress_.stats(); }
  LinkEndpoint& inner() { return *inner_; }

 private:
  static constexpr size_t kDeliverBatch = 64;
  static constexpr Duration kRetryInterval = absl::Milliseconds(1);

  class Tap final : public LinkReceiver {
   public:
    explicit Tap(FaultInjector* owner) : owner_(owner) {}
    void DeliverFrames(std::span<InboundFrame> frames, Instant now) override;

   private:
    FaultInjector* const owner_;
  };

  FaultInjector(std::unique_ptr<LinkEndpoint> inner,
                buffer::PacketPool& packets, buffer::ChunkPool& chunks,
                const FaultInjectorOptions& options);

  // Moves due egress packets to pending_.
  void CollectEgress(Instant now);
  // Hands pending_ to the inner endpoint; schedules a retry if it pushes
  // back.
  void FlushPending(Instant now);
  // Moves due ingress frames into batch_, delivering each full batch.
  void CollectIngress(Instant now);
  // Delivers what batch_ holds to the receiver.
  void DeliverBatch(Instant now);

  std::unique_ptr<LinkEndpoint> inner_;
  buffer::PacketPool& packets_;
  const FaultInjectorOptions options_;
  internal::FaultPipeline egress_;
  internal::FaultPipeline ingress_;
  Tap tap_{this};
  LinkReceiver* receiver_ = nullptr;

  // Released egress packets the inner endpoint has not taken yet.
  buffer::PacketChain pending_;
  Instant retry_at_ = kNever;
  bool polling_ = false;
  bool delivering_ = false;
  std::array<InboundFrame, kDeliverBatch> batch_;
  size_t batch_count_ = 0;
};

}  // namespace netstack::link

#endif  // NETSTACK_LINK_FAULT_INJECTOR_H_
