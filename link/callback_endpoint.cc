#include "link/callback_endpoint.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "link/fd_util.h"
#include "link/frame_util.h"
#include "netstack/buffer/payload_view.h"

namespace netstack::link {
namespace {

constexpr uint32_t kMinMtu = 68;  // RFC 791: every IPv4 link carries 68.
// An untagged frame of the MTU must fit one chunk: 65522. A VLAN tag
// takes 4 more bytes, which a frame of a smaller MTU may carry.
constexpr uint32_t kMaxMtu = buffer::kChunkSize - kMinFrameLen;

uint32_t MaxFrame(uint32_t mtu) {
  return std::min<uint32_t>(mtu + kEthernetOverhead, buffer::kChunkSize);
}

}  // namespace

absl::StatusOr<std::unique_ptr<CallbackEndpoint>> CallbackEndpoint::Create(
    CallbackOptions options, buffer::ChunkPool& pool) {
  if (options.mtu < kMinMtu || options.mtu > kMaxMtu) {
    return absl::InvalidArgumentError(
        absl::StrCat("callback link: mtu ", options.mtu, " is outside ",
                     kMinMtu, "..", kMaxMtu, " (a frame must fit one chunk)"));
  }
  if (!options.send) {
    return absl::InvalidArgumentError(
        "callback link: no send function for frames to the guest");
  }
  if (options.queue_limit == 0) {
    return absl::InvalidArgumentError(
        "callback link: queue_limit must be at least 1 frame");
  }
  LinkCapabilities caps;
  caps.mtu = options.mtu;
  caps.mac = options.mac.value_or(DeriveLocalMac("callback"));
  return std::unique_ptr<CallbackEndpoint>(
      new CallbackEndpoint(std::move(options), pool, caps));
}

CallbackEndpoint::CallbackEndpoint(CallbackOptions options,
                                   buffer::ChunkPool& pool,
                                   const LinkCapabilities& caps)
    : options_(std::move(options)),
      pool_(pool),
      caps_(caps),
      max_frame_(MaxFrame(caps.mtu)),
      tx_frame_(MaxFrame(caps.mtu)) {
  pending_.reserve(options_.queue_limit);
  delivering_.reserve(options_.queue_limit);
}

CallbackEndpoint::InputResult CallbackEndpoint::Input(
    std::span<const uint8_t> frame) {
  if (frame.size() < kMinFrameLen) {
    ++stats_.rx_dropped;
    ++cb_stats_.rx_runts;
    return InputResult::kRunt;
  }
  if (frame.size() > max_frame_) {
    ++stats_.rx_dropped;
    ++cb_stats_.rx_oversized;
    return InputResult::kOversized;
  }
  if (pending_.size() == options_.queue_limit) {
    ++stats_.rx_dropped;
    ++cb_stats_.rx_queue_full;
    return InputResult::kQueueFull;
  }
  if (!rx_chunk_ || rx_used_ + frame.size() > buffer::kChunkSize) {
    rx_chunk_ = pool_.Allocate();
    rx_used_ = 0;
    if (!rx_chunk_) {
      // No memory to receive into: like a NIC without ring buffers.
      ++stats_.rx_dropped;
      ++cb_stats_.rx_no_chunk;
      return InputResult::kNoChunk;
    }
  }
  // Views already queued cover only [0, rx_used_).
  std::memcpy(rx_chunk_->unshared_tail(rx_used_).data(), frame.data(),
              frame.size());
  pending_.push_back(InboundFrame{buffer::PayloadView(
      rx_chunk_, static_cast<uint32_t>(rx_used_),
      static_cast<uint32_t>(frame.size()))});
  rx_used_ += frame.size();
  ++stats_.rx_frames;
  stats_.rx_bytes += frame.size();
  return InputResult::kQueued;
}

void CallbackEndpoint::Poll(Instant now) {
  if (polling_ || pending_.empty()) return;
  polling_ = true;
  // Only frames queued before this call: what arrives while the receiver
  // runs (an Input from inside `send`) waits for the next Poll.
  std::swap(pending_, delivering_);
  for (size_t i = 0; i < delivering_.size(); i += kDeliverBatch) {
    const size_t n = std::min(kDeliverBatch, delivering_.size() - i);
    if (receiver_ == nullptr) {
      stats_.rx_dropped += n;
      continue;
    }
    receiver_->DeliverFrames(std::span<InboundFrame>(&delivering_[i], n), now);
  }
  delivering_.clear();  // keeps its capacity; drops the chunk references
  polling_ = false;
}

size_t CallbackEndpoint::Transmit(buffer::PacketChain& chain, Instant now) {
  size_t sent = 0;
  while (buffer::PacketPtr packet = chain.PopFront()) {
    const size_t len = packet->size();
    if (len > tx_frame_.size()) {
      ++stats_.tx_dropped;
      ++cb_stats_.tx_oversized;
      continue;
    }
    CopyPacketBytes(*packet, std::span<uint8_t>(tx_frame_.data(), len));
    // The packet goes back to its pool before `send` runs, so an embedder
    // that feeds a frame back from inside sees the pool as we do.
    packet.reset();
    if (!options_.send(std::span<const uint8_t>(tx_frame_.data(), len))) {
      ++stats_.tx_dropped;
      ++cb_stats_.tx_refused;
      continue;
    }
    ++stats_.tx_frames;
    stats_.tx_bytes += len;
    ++sent;
  }
  return sent;
}

std::string CallbackEndpoint::Name() const {
  return options_.name.empty() ? "callback"
                               : absl::StrCat("callback:", options_.name);
}

}  // namespace netstack::link
