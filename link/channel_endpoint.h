// An in-memory Ethernet link between two endpoints of one process: two
// stacks, or a stack and a test harness, connected without fds.
//
//   absl::StatusOr<ChannelPair> pair = CreateChannelPair(chunks, {});
//   stack_a.AttachLink(*pair->a);  stack_b.AttachLink(*pair->b);
//   ... each turn of the (fake) clock: pair->a->Poll(now);
//                                      pair->b->Poll(now);
//
// Semantics:
//   - Transmit on one side copies each frame (headers + payload views) into
//     the channel's own per-direction queue, like a kernel copying a frame
//     out of a socket buffer: after Transmit the caller's packets and
//     chunks are free again. Nothing is delivered from inside Transmit.
//   - The other side delivers queued frames to its receiver in Poll(now),
//     in order, once `latency` has passed since they were sent (at once by
//     default). NextDeadline() is the delivery time of the oldest queued
//     frame, so with zero latency it is "now" whenever a frame waits.
//     Frames are packed into chunks of the ChunkPool given at creation
//     (one chunk holds many frames), which become the receiver's
//     PayloadViews.
//   - Each direction's queue holds at most `queue_limit` frames; a frame
//     that does not fit, is larger than the MTU plus the Ethernet header,
//     is empty, or whose peer endpoint is gone is dropped and counted in
//     the sender's tx_dropped. A frame that finds no chunk at delivery (or
//     no receiver attached) is counted in the receiver's rx_dropped.
//   - Memory: each direction preallocates queue_limit slots of one maximum
//     frame; transmitting and delivering do not touch the heap (the chunks
//     come from the pool).
//
// Test hooks: InjectFrame() queues raw bytes for a side as if its peer had
// sent them (malformed frames included), and set_capture() records every
// frame a side's Transmit was given.
//
// Ownership: the endpoints share the channel's state; either may be
// destroyed first (the survivor then drops what it transmits). The ChunkPool
// must outlive both endpoints and every view they delivered.
#ifndef NETSTACK_LINK_CHANNEL_ENDPOINT_H_
#define NETSTACK_LINK_CHANNEL_ENDPOINT_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "netstack/base/time.h"
#include "netstack/buffer/chunk.h"
#include "netstack/buffer/packet.h"
#include "netstack/link/link_endpoint.h"
#include "netstack/wire/address.h"

namespace netstack::link {

struct ChannelOptions {
  // L3 MTU of both sides; frames may be up to mtu + 14 bytes. 68..65522
  // (a frame must fit one 64 KiB chunk).
  uint32_t mtu = 1500;
  wire::MacAddress mac_a;
  wire::MacAddress mac_b;
  // Frames queued per direction before Transmit drops.
  size_t queue_limit = 1024;
  // One-way delay of every frame (zero: delivered at the next Poll).
  Duration latency = absl::ZeroDuration();
};

namespace internal {
struct ChannelCore;
}  // namespace internal

struct ChannelPair;

class ChannelEndpoint final : public LinkEndpoint {
 public:
  // One frame a side was asked to transmit, with the `now` of that call.
  struct CapturedFrame {
    Instant time;
    std::vector<uint8_t> bytes;
  };

  ChannelEndpoint(const ChannelEndpoint&) = delete;
  ChannelEndpoint& operator=(const ChannelEndpoint&) = delete;
  ~ChannelEndpoint() override;

  // LinkEndpoint.
  LinkCapabilities Capabilities() const override;
  void Attach(LinkReceiver* receiver) override;
  // Copies and pops every packet of `chain`; returns how many were queued
  // for the peer (the others were dropped and counted in tx_dropped).
  size_t Transmit(buffer::PacketChain& chain, Instant now) override;
  Instant NextDeadline() const override;
  // Delivers every frame due at `now` that was queued before this call.
  // Frames the receiver transmits back (to either side) wait for the next
  // Poll; a nested Poll from inside DeliverFrames does nothing.
  void Poll(Instant now) override;
  LinkStats Stats() const override;
  std::string Name() const override;

  // Queues `frame` for delivery to this endpoint's receiver as if the peer
  // had sent it at `now` (subject to latency and the queue limit). Any
  // bytes are accepted, up to the MTU plus the Ethernet header. Returns
  // false if it was dropped; that is not counted in the stats.
  bool InjectFrame(std::span<const uint8_t> frame, Instant now);

  // While on, every frame handed to Transmit (queued or dropped) is copied
  // into a list that TakeCaptured() returns and clears. Allocates per frame:
  // for tests.
  void set_capture(bool on) { capture_ = on; }
  std::vector<CapturedFrame> TakeCaptured();

  // Frames waiting for delivery to this endpoint.
  size_t queued_frames() const;

 private:
  friend absl::StatusOr<ChannelPair> CreateChannelPair(
      buffer::ChunkPool& pool, const ChannelOptions& options);

  // Delivered to the receiver in batches of at most this many frames.
  static constexpr size_t kDeliverBatch = 64;

  ChannelEndpoint(std::shared_ptr<internal::ChannelCore> core, int side);

  std::shared_ptr<internal::ChannelCore> core_;
  const int side_;  // 0 is "a", 1 is "b"
  LinkReceiver* receiver_ = nullptr;
  LinkStats stats_;
  bool polling_ = false;
  bool capture_ = false;
  std::vector<CapturedFrame> captured_;
  std::array<InboundFrame, kDeliverBatch> batch_;
};

struct ChannelPair {
  std::unique_ptr<ChannelEndpoint> a;
  std::unique_ptr<ChannelEndpoint> b;
};

// Two connected endpoints. InvalidArgument for an MTU outside 68..65522,
// a zero queue_limit, a negative latency, or queues larger than 1 GiB in
// total.
absl::StatusOr<ChannelPair> CreateChannelPair(buffer::ChunkPool& pool,
                                              const ChannelOptions& options);

}  // namespace netstack::link

#endif  // NETSTACK_LINK_CHANNEL_ENDPOINT_H_
