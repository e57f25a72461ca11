// A link endpoint whose wire is the embedder's: frames from the guest come
// in through Input(), and each frame to the guest goes out through a
// function the embedder gave (libnetstack's callback link: netstack_input
// and netstack_config.send_frame; libslirp's slirp_input and
// send_packet).
//
//   CallbackOptions o;
//   o.send = [&](std::span<const uint8_t> frame) { return dev.Write(frame); };
//   auto ep = CallbackEndpoint::Create(o, chunks);
//   ... for each frame the device read: (*ep)->Input(bytes, now);
//   ... then one turn of the loop: the link's poller delivers them.
//
// Semantics:
//   - Input() copies the frame into the endpoint's receive chunk (frames
//     are packed, many to a 64 KiB chunk) and queues it; it never calls
//     the receiver. Poll(now) delivers every frame queued before the call,
//     in batches; NextDeadline() is InfinitePast while any wait, so the
//     loop's next turn polls at once. The embedder's frame buffer is free
//     again when Input returns.
//   - Input from inside `send` (an embedder that loops a frame straight
//     back) is allowed: the frame waits for the next Poll, and a nested
//     Poll does nothing, so the stack is never re-entered.
//   - Transmit() flattens each packet into one scratch frame and calls
//     `send` with it, once per frame, in order; the span is valid only
//     during the call. `send` returning false counts the frame in
//     tx_dropped. Nothing is ever left in the chain: the embedder's device
//     buffers or drops, as a real NIC's ring does.
//   - There is no GSO and no checksum offload: every packet must fit the
//     MTU. Put a GsoEndpoint above this one (LinkDecorators::
//     software_gso_max_size) to let TCP send super-segments; it splits
//     them before they get here.
//   - Frames that are empty, shorter than an Ethernet header or longer
//     than the MTU plus the Ethernet header (and a VLAN tag), a full
//     queue, and a pool with no chunk are dropped and counted (rx_dropped,
//     and rx_runts, rx_oversized, rx_queue_full, rx_no_chunk in
//     callback_stats()). Input says which with its return value.
//   - Memory: the queue and the scratch frame are allocated at creation;
//     moving frames either way does not touch the heap.
#ifndef NETSTACK_LINK_CALLBACK_ENDPOINT_H_
#define NETSTACK_LINK_CALLBACK_ENDPOINT_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "netstack/base/time.h"
#include "netstack/buffer/chunk.h"
#include "netstack/buffer/packet.h"
#include "netstack/link/link_endpoint.h"
#include "netstack/wire/address.h"

namespace netstack::link {

struct CallbackOptions {
  // L3 MTU, 68..65522: a frame (MTU + Ethernet header) must fit one
  // 64 KiB chunk; a VLAN tag fits too below an MTU of 65519.
  uint32_t mtu = 1500;
  // Our Ethernet address. Default: DeriveLocalMac("callback").
  std::optional<wire::MacAddress> mac;
  // Frames Input may queue before a Poll delivers them; more are dropped.
  size_t queue_limit = 1024;
  // One frame to the guest; false if it was not sent (counted dropped).
  // Required.
  absl::AnyInvocable<bool(std::span<const uint8_t> frame)> send;
  // Name() is "callback:<name>" ("callback" when empty).
  std::string name;
};

struct CallbackStats {
  uint64_t rx_runts = 0;       // empty or shorter than an Ethernet header
  uint64_t rx_oversized = 0;   // longer than the MTU allows
  uint64_t rx_queue_full = 0;  // queue_limit frames already waiting
  uint64_t rx_no_chunk = 0;    // the chunk pool was exhausted
  uint64_t tx_oversized = 0;   // a packet larger than the scratch frame
  uint64_t tx_refused = 0;     // `send` returned false
};

class CallbackEndpoint final : public LinkEndpoint {
 public:
  // InvalidArgument for an MTU outside 68..65522, no `send`, or a zero
  // queue_limit.
  static absl::StatusOr<std::unique_ptr<CallbackEndpoint>> Create(
      CallbackOptions options, buffer::ChunkPool& pool);
  CallbackEndpoint(const CallbackEndpoint&) = delete;
  CallbackEndpoint& operator=(const CallbackEndpoint&) = delete;
  ~CallbackEndpoint() override = default;

  enum class InputResult { kQueued, kRunt, kOversized, kQueueFull, kNoChunk };
  // Queues one frame from the guest (see the file comment).
  InputResult Input(std::span<const uint8_t> frame);

  // LinkEndpoint.
  LinkCapabilities Capabilities() const override { return caps_; }
  void Attach(LinkReceiver* receiver) override { receiver_ = receiver; }
  size_t Transmit(buffer::PacketChain& chain, Instant now) override;
  Instant NextDeadline() const override {
    return pending_.empty() ? kNever : absl::InfinitePast();
  }
  void Poll(Instant now) override;
  LinkStats Stats() const override { return stats_; }
  std::string Name() const override;

  const CallbackStats& callback_stats() const { return cb_stats_; }
  size_t queued_frames() const { return pending_.size(); }

 private:
  static constexpr size_t kDeliverBatch = 64;

  CallbackEndpoint(CallbackOptions options, buffer::ChunkPool& pool,
                   const LinkCapabilities& caps);

  CallbackOptions options_;
  buffer::ChunkPool& pool_;
  const LinkCapabilities caps_;
  const size_t max_frame_;
  LinkReceiver* receiver_ = nullptr;
  LinkStats stats_;
  CallbackStats cb_stats_;
  // The chunk Input packs frames into, and where its free tail starts:
  // the views already queued cover only bytes before rx_used_.
  buffer::ChunkRef rx_chunk_;
  size_t rx_used_ = 0;
  // Frames queued by Input; Poll swaps in `delivering_` (both reserved to
  // queue_limit), so an Input from inside the receiver's replies appends
  // to a list nobody is walking.
  std::vector<InboundFrame> pending_;
  std::vector<InboundFrame> delivering_;
  bool polling_ = false;
  std::vector<uint8_t> tx_frame_;
};

}  // namespace netstack::link

#endif  // NETSTACK_LINK_CALLBACK_ENDPOINT_H_
