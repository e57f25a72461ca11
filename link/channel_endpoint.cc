#include "link/channel_endpoint.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "link/frame_util.h"
#include "netstack/buffer/payload_view.h"
#include "netstack/wire/ethernet.h"

namespace netstack::link {

namespace internal {

// A FIFO of frames waiting for one side: `limit` fixed slots of the
// largest frame, allocated once. Due times never decrease, so the front is
// always the next frame to deliver.
class FrameQueue {
 public:
  FrameQueue(size_t limit, size_t slot_size)
      : slot_size_(slot_size), storage_(limit * slot_size), entries_(limit) {}

  // Reserves the slot behind the last frame for a frame of `len` bytes and
  // returns it for the caller to fill; empty when the queue is full.
  std::span<uint8_t> Push(Instant due, size_t len) {
    if (count_ == entries_.size()) return {};
    const size_t index = (head_ + count_) % entries_.size();
    // Keep the queue FIFO even if a caller's clock steps back.
    last_due_ = std::max(last_due_, due);
    entries_[index] = Entry{last_due_, static_cast<uint32_t>(len)};
    ++count_;
    return std::span<uint8_t>(storage_.data() + index * slot_size_, len);
  }

  bool empty() const { return count_ == 0; }
  size_t size() const { return count_; }
  Instant front_due() const { return entries_[head_].due; }
  std::span<const uint8_t> front_bytes() const {
    return std::span<const uint8_t>(storage_.data() + head_ * slot_size_,
                                    entries_[head_].len);
  }
  void Pop() {
    head_ = (head_ + 1) % entries_.size();
    --count_;
  }
  void Clear() {
    head_ = 0;
    count_ = 0;
  }

 private:
  struct Entry {
    Instant due;
    uint32_t len = 0;
  };

  const size_t slot_size_;
  std::vector<uint8_t> storage_;
  std::vector<Entry> entries_;
  size_t head_ = 0;
  size_t count_ = 0;
  Instant last_due_ = absl::InfinitePast();
};

// What the two endpoints share. inbound[i] holds the frames for side i.
struct ChannelCore {
  ChannelCore(buffer::ChunkPool& pool, const ChannelOptions& options,
              size_t max_frame)
      : pool(pool),
        options(options),
        max_frame(max_frame),
        inbound{FrameQueue(options.queue_limit, max_frame),
                FrameQueue(options.queue_limit, max_frame)} {}

  buffer::ChunkPool& pool;
  const ChannelOptions options;
  const size_t max_frame;
  FrameQueue inbound[2];
  bool alive[2] = {true, true};
};

}  // namespace internal

namespace {

constexpr size_t kEthernetHeaderLen = wire::EthernetFrame::kHeaderLen;
constexpr uint32_t kMinMtu = 68;  // RFC 791: every IPv4 link carries 68.
constexpr uint32_t kMaxMtu = buffer::kChunkSize - kEthernetHeaderLen;
constexpr uint64_t kMaxQueueBytes = uint64_t{1} << 30;

}  // namespace

absl::StatusOr<ChannelPair> CreateChannelPair(buffer::ChunkPool& pool,
                                              const ChannelOptions& options) {
  if (options.mtu < kMinMtu || options.mtu > kMaxMtu) {
    return absl::InvalidArgumentError(
        absl::StrCat("channel: mtu ", options.mtu, " is outside ", kMinMtu,
                     "..", kMaxMtu, " (a frame must fit one chunk)"));
  }
  if (options.queue_limit == 0) {
    return absl::InvalidArgumentError(
        "channel: queue_limit must be at least 1 frame");
  }
  if (options.latency < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("channel: latency ", absl::FormatDuration(options.latency),
                     " is negative"));
  }
  const size_t max_frame = options.mtu + kEthernetHeaderLen;
  if (options.queue_limit > kMaxQueueBytes / 2 / max_frame) {
    return absl::InvalidArgumentError(absl::StrCat(
        "channel: queue_limit ", options.queue_limit, " frames of ", max_frame,
        " bytes in each direction exceeds 1 GiB"));
  }
  auto core = std::make_shared<internal::ChannelCore>(pool, options, max_frame);
  ChannelPair pair;
  pair.a.reset(new ChannelEndpoint(core, 0));
  pair.b.reset(new ChannelEndpoint(core, 1));
  return pair;
}

ChannelEndpoint::ChannelEndpoint(std::shared_ptr<internal::ChannelCore> core,
                                 int side)
    : core_(std::move(core)), side_(side) {}

ChannelEndpoint::~ChannelEndpoint() {
  core_->alive[side_] = false;
  core_->inbound[side_].Clear();
}

LinkCapabilities ChannelEndpoint::Capabilities() const {
  LinkCapabilities caps;
  caps.mtu = core_->options.mtu;
  caps.mac = side_ == 0 ? core_->options.mac_a : core_->options.mac_b;
  return caps;
}

void ChannelEndpoint::Attach(LinkReceiver* receiver) { receiver_ = receiver; }

size_t ChannelEndpoint::Transmit(buffer::PacketChain& chain, Instant now) {
  const int peer = 1 - side_;
  internal::FrameQueue& queue = core_->inbound[peer];
  const Instant due = now + core_->options.latency;
  size_t sent = 0;
  while (buffer::PacketPtr packet = chain.PopFront()) {
    const size_t len = packet->size();
    if (capture_) captured_.push_back({now, PacketBytes(*packet)});
    std::span<uint8_t> slot;
    if (len > 0 && len <= core_->max_frame && core_->alive[peer]) {
      slot = queue.Push(due, len);
    }
    if (slot.empty()) {
      ++stats_.tx_dropped;
      continue;
    }
    CopyPacketBytes(*packet, slot);
    ++stats_.tx_frames;
    stats_.tx_bytes += len;
    ++sent;
  }
  return sent;
}

bool ChannelEndpoint::InjectFrame(std::span<const uint8_t> frame, Instant now) {
  if (frame.empty() || frame.size() > core_->max_frame) return false;
  std::span<uint8_t> slot =
      core_->inbound[side_].Push(now + core_->options.latency, frame.size());
  if (slot.empty()) return false;
  std::memcpy(slot.data(), frame.data(), frame.size());
  return true;
}

Instant ChannelEndpoint::NextDeadline() const {
  const internal::FrameQueue& queue = core_->inbound[side_];
  return queue.empty() ? kNever : queue.front_due();
}

void ChannelEndpoint::Poll(Instant now) {
  if (polling_) return;
  polling_ = true;
  internal::FrameQueue& queue = core_->inbound[side_];
  // Only frames queued before this call: what the receiver sends in reply
  // (even to this side, through the peer) waits for the next Poll.
  size_t budget = queue.size();
  while (budget > 0 && !queue.empty() && queue.front_due() <= now) {
    if (receiver_ == nullptr) {
      ++stats_.rx_dropped;
      queue.Pop();
      --budget;
      continue;
    }
    buffer::ChunkRef chunk = core_->pool.Allocate();
    if (!chunk) {
      // No memory to receive into: like a NIC without ring buffers.
      ++stats_.rx_dropped;
      queue.Pop();
      --budget;
      continue;
    }
    // Pack as many due frames as fit into the fresh chunk, then hand out
    // views; the chunk is written only while this function holds its one
    // reference.
    std::span<uint8_t> memory = chunk->mutable_data();
    struct Placed {
      uint32_t offset;
      uint32_t len;
    };
    std::array<Placed, kDeliverBatch> placed;
    size_t n = 0;
    size_t offset = 0;
    while (n < kDeliverBatch && budget > 0 && !queue.empty() &&
           queue.front_due() <= now) {
      std::span<const uint8_t> bytes = queue.front_bytes();
      if (offset + bytes.size() > memory.size()) break;
      std::memcpy(memory.data() + offset, bytes.data(), bytes.size());
      placed[n++] = {static_cast<uint32_t>(offset),
                     static_cast<uint32_t>(bytes.size())};
      offset += bytes.size();
      queue.Pop();
      --budget;
    }
    for (size_t i = 0; i < n; ++i) {
      batch_[i] = InboundFrame{
          buffer::PayloadView(chunk, placed[i].offset, placed[i].len)};
      ++stats_.rx_frames;
      stats_.rx_bytes += placed[i].len;
    }
    chunk.Reset();
    receiver_->DeliverFrames(std::span<InboundFrame>(batch_.data(), n), now);
    for (size_t i = 0; i < n; ++i) batch_[i] = InboundFrame{};
  }
  polling_ = false;
}

LinkStats ChannelEndpoint::Stats() const { return stats_; }

std::string ChannelEndpoint::Name() const {
  return side_ == 0 ? "channel:a" : "channel:b";
}

std::vector<ChannelEndpoint::CapturedFrame> ChannelEndpoint::TakeCaptured() {
  return std::exchange(captured_, {});
}

size_t ChannelEndpoint::queued_frames() const {
  return core_->inbound[side_].size();
}

}  // namespace netstack::link
