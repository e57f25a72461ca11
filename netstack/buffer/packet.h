// A packet on its way out (or in): prependable headers plus payload views,
// and the `next` link that chains packets without allocating.
//
// Ownership:
//   - A PacketBuffer lives in a PacketPool; a PacketPtr owns one uniquely
//     and returns it to its pool when dropped.
//   - A PacketChain owns the packets linked into it through their `next`
//     hook. Pushing a PacketPtr moves ownership into the chain; PopFront
//     moves it out; destroying the chain returns what is left to the pools.
//   - Payload bytes are owned by refcounted chunks and shared by views; a
//     GSO split gives every packet of the chain views into the same chunks.
#ifndef NETSTACK_BUFFER_PACKET_H_
#define NETSTACK_BUFFER_PACKET_H_

#include <sys/uio.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "boost/intrusive/slist.hpp"
#include "netstack/buffer/payload_view.h"
#include "netstack/buffer/prependable.h"

namespace netstack::buffer {

class PacketPool;

// Segmentation offload a packet asks of its link. A transport sets it on a
// super-segment: one TCP segment carrying more than `size` bytes of
// payload, which must leave as ceil(payload / size) wire packets. The link
// splits it in software (link/gso.h) or hands it whole to the host kernel
// with a virtio-net header (host GSO).
//
// Contract for a packet with type != kNone, once the stack has queued it:
//   - headers() holds Ethernet (optionally one 802.1Q tag), IPv4 without
//     options or IPv6 without extension headers, then the TCP header with
//     its options, all in the one prependable buffer;
//   - the IP length fields cover the whole super-segment;
//   - the TCP checksum field holds the pseudo-header sum for the whole
//     super-segment's TCP length, not complemented (CHECKSUM_PARTIAL, as
//     virtio-net's VIRTIO_NET_HDR_F_NEEDS_CSUM expects); payload and
//     header are not summed;
//   - PSH and FIN belong to the last wire packet, CWR to the first.
// A UDP super-datagram (kUdpV4/kUdpV6, USO; only to a link whose
// LinkCapabilities::udp_gso says it takes them) is the same with the UDP
// header: its Length and the checksum's pseudo-header cover the whole
// payload, which is cut every `size` bytes into datagrams of their own.
enum class GsoType : uint8_t { kNone = 0, kTcpV4, kTcpV6, kUdpV4, kUdpV6 };

struct GsoInfo {
  GsoType type = GsoType::kNone;
  // Payload bytes per wire packet (the connection's MSS); 0 without GSO.
  uint16_t size = 0;
};

// A transport checksum left to the link (CHECKSUM_PARTIAL) on a packet
// without GSO. The transport header is the last `l4_header_len` bytes of
// headers(), the payload views follow it, and its checksum field, `offset`
// bytes in, holds the pseudo-header sum over the transport length, not
// complemented; header and payload are not summed. The stack completes it
// in software before handing the packet to a link whose
// LinkCapabilities::tx_checksum_offload is false, or before fragmenting
// it; a link that keeps it sends it with virtio-net's NEEDS_CSUM
// (FillVnetHeader). A GSO packet never carries it (GsoInfo's contract
// already makes its checksum partial).
struct PartialChecksum {
  uint8_t l4_header_len = 0;  // 0: the checksum is complete
  uint8_t offset = 0;         // of the field: 16 for TCP, 6 for UDP
};

class PacketBuffer {
 public:
  // A 64 KiB super-segment spans at most two chunks when its send queue
  // is chunk-aligned; the rest is room for small application writes.
  static constexpr size_t kMaxPayloadViews = 16;

  PacketBuffer() = default;
  PacketBuffer(const PacketBuffer&) = delete;
  PacketBuffer& operator=(const PacketBuffer&) = delete;
  // Moves headers and payload. The `next` hook and the pool membership
  // stay with the storage: a moved-to packet is unlinked.
  PacketBuffer(PacketBuffer&& o) noexcept;
  PacketBuffer& operator=(PacketBuffer&& o) noexcept;
  ~PacketBuffer() = default;

  PrependableBuffer& headers() { return headers_; }
  const PrependableBuffer& headers() const { return headers_; }

  // Appends a payload view; false (and nothing changed) when all
  // kMaxPayloadViews slots are used. Empty views are skipped.
  [[nodiscard]] bool AppendPayload(PayloadView view);
  std::span<const PayloadView> payload() const {
    return {payload_.data(), payload_count_};
  }
  size_t payload_size() const { return payload_size_; }
  size_t size() const { return headers_.size() + payload_size_; }

  // Fills `out` with the headers then the payload views; returns how many
  // iovecs were used, or 0 if `out` is too small (nothing is partial).
  size_t ToIovecs(std::span<iovec> out) const;
  size_t iovec_count() const {
    return (headers_.size() > 0 ? 1 : 0) + payload_count_;
  }

  // Segmentation offload asked for this packet (see GsoInfo).
  GsoInfo& gso() { return gso_; }
  const GsoInfo& gso() const { return gso_; }
  bool is_gso() const { return gso_.type != GsoType::kNone; }

  // The checksum left to the link (see PartialChecksum).
  PartialChecksum& partial_checksum() { return csum_; }
  const PartialChecksum& partial_checksum() const { return csum_; }
  bool needs_checksum() const { return csum_.l4_header_len != 0; }

  // Clears headers, GSO info, the partial-checksum mark and payload
  // references, for reuse.
  void Reset();

  // The link that chains packets (e.g. the per-segment headers of one GSO
  // split). Public because Boost.Intrusive's member_hook needs its address;
  // use PacketChain rather than touching it.
  boost::intrusive::slist_member_hook<> next;

 private:
  friend class PacketPool;
  friend struct PacketDeleter;

  PrependableBuffer headers_;
  std::array<PayloadView, kMaxPayloadViews> payload_;
  uint32_t payload_count_ = 0;
  uint32_t payload_size_ = 0;
  GsoInfo gso_;
  PartialChecksum csum_;
  PacketPool* pool_ = nullptr;  // set only for pooled storage
};

// Returns a pooled packet to its pool; deletes one that is not pooled.
struct PacketDeleter {
  void operator()(PacketBuffer* p) const;
};
using PacketPtr = std::unique_ptr<PacketBuffer, PacketDeleter>;

// Bounded pool of packet buffers. Like ChunkPool, it allocates only while
// the free list is empty and below the limit, and recycles after that.
class PacketPool {
 public:
  struct Stats {
    size_t in_use = 0;
    size_t free = 0;
    size_t created = 0;
    uint64_t allocations = 0;
    uint64_t exhausted = 0;
  };

  explicit PacketPool(size_t max_packets);
  PacketPool(const PacketPool&) = delete;
  PacketPool& operator=(const PacketPool&) = delete;
  ~PacketPool();

  // A reset packet, or null at the limit.
  [[nodiscard]] PacketPtr Allocate();
  void Reserve(size_t count);
  const Stats& stats() const { return stats_; }

 private:
  friend struct PacketDeleter;
  void Release(PacketBuffer* p);

  using FreeList = boost::intrusive::slist<
      PacketBuffer,
      boost::intrusive::member_hook<PacketBuffer,
                                    boost::intrusive::slist_member_hook<>,
                                    &PacketBuffer::next>>;
  FreeList free_;  // free packets reuse the `next` hook: they are in no chain
  const size_t max_packets_;
  Stats stats_;
};

// An owning, ordered chain of packets linked through `next`. Building,
// walking and handing over a chain allocates nothing.
class PacketChain {
 public:
  using List = boost::intrusive::slist<
      PacketBuffer,
      boost::intrusive::member_hook<PacketBuffer,
                                    boost::intrusive::slist_member_hook<>,
                                    &PacketBuffer::next>,
      boost::intrusive::cache_last<true>,
      boost::intrusive::constant_time_size<true>>;
  using const_iterator = List::const_iterator;
  using iterator = List::iterator;

  PacketChain() = default;
  PacketChain(const PacketChain&) = delete;
  PacketChain& operator=(const PacketChain&) = delete;
  PacketChain(PacketChain&& o) noexcept { list_.swap(o.list_); }
  PacketChain& operator=(PacketChain&& o) noexcept {
    if (this != &o) {
      Clear();
      list_.swap(o.list_);
    }
    return *this;
  }
  ~PacketChain() { Clear(); }

  void PushBack(PacketPtr p) { list_.push_back(*p.release()); }
  // Null when empty.
  PacketPtr PopFront();
  // Moves all of `other`'s packets to the end of this chain, O(1).
  void Append(PacketChain&& other) {
    list_.splice_after(list_.last(), other.list_);
  }
  // Returns every packet to its pool.
  void Clear();

  size_t size() const { return list_.size(); }
  bool empty() const { return list_.empty(); }
  PacketBuffer& front() { return list_.front(); }
  PacketBuffer& back() { return list_.back(); }
  iterator begin() { return list_.begin(); }
  iterator end() { return list_.end(); }
  const_iterator begin() const { return list_.begin(); }
  const_iterator end() const { return list_.end(); }

  // Total bytes (headers + payload) of all packets.
  size_t TotalBytes() const;

 private:
  List list_;
};

}  // namespace netstack::buffer

#endif  // NETSTACK_BUFFER_PACKET_H_
