// Test helpers for the link endpoints (testonly): frames with an id inside,
// packets built the way the stack builds them (headers in the prependable
// buffer, payload in views of a chunk), a receiver that records, and an
// endpoint that records what it is asked to transmit.
#ifndef NETSTACK_LINK_LINK_TEST_UTIL_H_
#define NETSTACK_LINK_LINK_TEST_UTIL_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "netstack/base/time.h"
#include "netstack/buffer/chunk.h"
#include "netstack/buffer/packet.h"
#include "netstack/link/link_endpoint.h"

namespace netstack::link::testing {

// An Ethernet II frame of `len` bytes (at least 18): destination
// 02:00:00:00:00:02, source 02:00:00:00:00:01, EtherType 0x88b5 (local
// experimental), then `id` big-endian, then a pattern derived from `id`.
std::vector<uint8_t> TestFrame(size_t len, uint32_t id);
// The id TestFrame wrote; frames shorter than 18 bytes give UINT32_MAX.
uint32_t FrameId(std::span<const uint8_t> frame);

// A pooled packet holding `bytes`: the first `header_len` bytes in the
// headers, the rest split into `views` payload views (as equal as possible)
// of one fresh chunk. Null if a pool is exhausted. `chunk_out`, if given,
// receives a reference to the payload chunk.
buffer::PacketPtr MakePacket(buffer::PacketPool& packets,
                             buffer::ChunkPool& chunks,
                             std::span<const uint8_t> bytes,
                             size_t header_len = 0, size_t views = 1,
                             buffer::ChunkRef* chunk_out = nullptr);

struct ReceivedFrame {
  Instant time;
  std::vector<uint8_t> bytes;
  bool checksum_verified = false;
  bool checksum_partial = false;
};

class RecordingReceiver : public LinkReceiver {
 public:
  void DeliverFrames(std::span<InboundFrame> frames, Instant now) override;

  std::vector<ReceivedFrame> frames;
  size_t calls = 0;
  size_t largest_batch = 0;
  // Called after each batch was recorded (e.g. to transmit a reply).
  std::function<void(Instant)> on_deliver;
};

// An endpoint that records every packet it is given and, when asked,
// delivers frames to its receiver. Takes at most `accept_per_call` packets
// per Transmit, to imitate an fd that would block.
class RecordingEndpoint : public LinkEndpoint {
 public:
  struct Sent {
    Instant time;
    std::vector<uint8_t> bytes;
    // The chunk of the first payload view (to see sharing), or null.
    const buffer::Chunk* first_chunk = nullptr;
  };

  explicit RecordingEndpoint(
      buffer::ChunkPool& chunks,
      size_t accept_per_call = std::numeric_limits<size_t>::max())
      : chunks_(chunks), accept_per_call_(accept_per_call) {}

  LinkCapabilities Capabilities() const override;
  void Attach(LinkReceiver* receiver) override { receiver_ = receiver; }
  size_t Transmit(buffer::PacketChain& chain, Instant now) override;
  Instant NextDeadline() const override { return kNever; }
  void Poll(Instant now) override { ++polls; }
  LinkStats Stats() const override { return stats_; }
  std::string Name() const override { return "recording"; }

  // Delivers `bytes` (copied into a chunk) to the attached receiver now.
  void Receive(std::span<const uint8_t> bytes, Instant now,
               bool checksum_verified = false, bool checksum_partial = false);
  LinkReceiver* receiver() const { return receiver_; }

  std::vector<Sent> sent;
  size_t transmit_calls = 0;
  size_t polls = 0;
  size_t accept_per_call_limit() const { return accept_per_call_; }
  void set_accept_per_call(size_t n) { accept_per_call_ = n; }

 private:
  buffer::ChunkPool& chunks_;
  size_t accept_per_call_;
  LinkReceiver* receiver_ = nullptr;
  LinkStats stats_;
};

// Polls `endpoint` at each of its deadlines up to and including `until`
// (at most 10^7 polls).
// Returns the last instant polled (or `from` if none).
Instant AdvanceTo(LinkEndpoint& endpoint, Instant from, Instant until);
// Polls at every deadline until there is none (at most 10^7 polls);
// returns the last instant polled.
Instant RunUntilIdle(LinkEndpoint& endpoint, Instant from);

}  // namespace netstack::link::testing

#endif  // NETSTACK_LINK_LINK_TEST_UTIL_H_
