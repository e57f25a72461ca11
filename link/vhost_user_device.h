// The vhost-user protocol's back-end side for one virtio-net device with
// one queue pair (QEMU's docs/interop/vhost-user.rst): the messages of
// the control socket, the guest memory table and the two virtqueues
// (0: the guest's RX, 1: its TX), with their kick, call and error fds.
//
// Handle() takes one message that VhostUserEndpoint read off the socket
// (header fields, payload, the fds that came with it) and fills the reply,
// if any. It never trusts the front-end: a payload of the wrong size for
// its request, the wrong number of fds, a queue index other than 0 and 1,
// a feature that was not offered, a request that needs a protocol feature
// that was not negotiated, or a memory table that cannot be mapped is
// refused and counted (refused[]), its fds are closed, and with REPLY_ACK
// the front-end is told (a nonzero u64). The device stays usable.
//
// Ring life (vhost-user.rst "Ring states"): a ring starts when its kick
// fd arrives and stops at GET_VRING_BASE, which also closes the kick fd.
// With VHOST_USER_F_PROTOCOL_FEATURES negotiated it starts disabled until
// SET_VRING_ENABLE 1; without it, enabled. Live() = started, enabled, and
// the rings translate through the memory table; a new memory table
// re-translates them.
//
// More queue pairs (not built): VHOST_USER_PROTOCOL_F_MQ would offer N
// pairs (GET_QUEUE_NUM); queue 2k is pair k's RX, 2k+1 its TX. Each pair
// would go to its own event loop and stack thread (DESIGN.md: one loop per
// stack instance, flows hashed), with its kick fd on that loop's epoll and
// its call fd written from there; the memory table is shared read-only
// after SET_MEM_TABLE and replaced only while the rings are stopped. The
// guest spreads flows over its TX queues by its own hash (XPS); our side
// would answer a flow on the pair it arrived on.
#ifndef NETSTACK_LINK_VHOST_USER_DEVICE_H_
#define NETSTACK_LINK_VHOST_USER_DEVICE_H_

#include <cstddef>
#include <cstdint>
#include <span>

#include "link/fd_util.h"
#include "link/vhost_user_memory.h"
#include "link/vhost_user_virtqueue.h"

namespace netstack::link::vhost_user {

// Requests (vhost-user.rst, "Front-end message types").
enum Request : uint32_t {
  kGetFeatures = 1,
  kSetFeatures = 2,
  kSetOwner = 3,
  kResetOwner = 4,
  kSetMemTable = 5,
  kSetLogBase = 6,
  kSetLogFd = 7,
  kSetVringNum = 8,
  kSetVringAddr = 9,
  kSetVringBase = 10,
  kGetVringBase = 11,
  kSetVringKick = 12,
  kSetVringCall = 13,
  kSetVringErr = 14,
  kGetProtocolFeatures = 15,
  kSetProtocolFeatures = 16,
  kGetQueueNum = 17,
  kSetVringEnable = 18,
};

inline constexpr size_t kHeaderSize = 12;       // request, flags, size
inline constexpr uint32_t kVersion = 0x1;       // flags bits 0-1
inline constexpr uint32_t kFlagReply = 1u << 2;
inline constexpr uint32_t kFlagNeedReply = 1u << 3;
// Largest payload accepted: a memory table of 8 regions (8 + 8 * 32).
inline constexpr size_t kMaxPayload = 8 + GuestMemory::kMaxRegions * 32;
inline constexpr size_t kMaxFds = GuestMemory::kMaxRegions;

// Feature bits (virtio 1.x 5.1.3, 6; vhost-user.rst).
namespace feature {
inline constexpr int kCsum = 0;
inline constexpr int kGuestCsum = 1;
inline constexpr int kGuestTso4 = 7;
inline constexpr int kGuestTso6 = 8;
inline constexpr int kGuestEcn = 9;
inline constexpr int kHostTso4 = 11;
inline constexpr int kHostTso6 = 12;
inline constexpr int kHostEcn = 13;
inline constexpr int kMrgRxbuf = 15;
inline constexpr int kIndirectDesc = 28;
inline constexpr int kEventIdx = 29;
inline constexpr int kProtocolFeatures = 30;  // VHOST_USER_F_PROTOCOL_FEATURES
inline constexpr int kVersion1 = 32;
inline constexpr int kLogAll = 26;            // VHOST_F_LOG_ALL, not offered
}  // namespace feature
namespace protocol_feature {
inline constexpr int kMq = 0;
inline constexpr int kReplyAck = 3;
}  // namespace protocol_feature

inline constexpr uint64_t Bit(int b) { return uint64_t{1} << b; }

// What we offer. Not: MQ (one pair), LOG_ALL (no live migration), UFO /
// USO, MTU (QEMU's host_mtu does that), CTRL_* and STATUS (QEMU's own).
inline constexpr uint64_t kOfferedFeatures =
    Bit(feature::kCsum) | Bit(feature::kGuestCsum) |
    Bit(feature::kGuestTso4) | Bit(feature::kGuestTso6) |
    Bit(feature::kGuestEcn) | Bit(feature::kHostTso4) |
    Bit(feature::kHostTso6) | Bit(feature::kHostEcn) |
    Bit(feature::kMrgRxbuf) | Bit(feature::kIndirectDesc) |
    Bit(feature::kEventIdx) | Bit(feature::kProtocolFeatures) |
    Bit(feature::kVersion1);
inline constexpr uint64_t kOfferedProtocolFeatures =
    Bit(protocol_feature::kReplyAck);

inline constexpr int kRxQueue = 0;  // the guest's receive queue: we write
inline constexpr int kTxQueue = 1;  // the guest's transmit queue: we read
inline constexpr int kQueues = 2;

// Why a message was refused.
enum class Refusal : uint8_t {
  kBadSize = 0,       // payload size wrong for the request
  kBadFds,            // wrong number of fds for the request
  kBadIndex,          // queue index not 0 or 1
  kBadFeatures,       // features or protocol features not offered
  kBadMemTable,       // regions that cannot be mapped
  kBadRing,           // ring size / addresses refused (RingSetupError)
  kUnsupported,       // a request we do not implement (SET_LOG_BASE, ...)
  kBadVersion,        // flags' version is not 1
  kNoPolling,         // kick without an fd (polling is not implemented)
};
inline constexpr size_t kRefusalCount = 9;
const char* RefusalName(Refusal r);

struct DeviceStats {
  uint64_t messages = 0;
  uint64_t refused[kRefusalCount] = {};
  uint64_t mem_tables = 0;      // tables mapped
  uint64_t ring_starts = 0;
  uint64_t ring_stops = 0;      // GET_VRING_BASE
};

struct Reply {
  bool send = false;
  uint32_t request = 0;
  uint32_t size = 0;
  uint8_t payload[16] = {};
};

class Device {
 public:
  Device() = default;
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  // One message; `fds` are taken (closed unless kept). Fills `reply`.
  void Handle(uint32_t request, uint32_t flags,
              std::span<const uint8_t> payload, std::span<UniqueFd> fds,
              Reply* reply);
  // Back to the state of a new connection: memory unmapped, every fd
  // closed, features forgotten. Counters stay.
  void Reset();

  bool Live(int q) const {
    return queues_[q].started && queues_[q].enabled && queues_[q].vq.ready();
  }
  // Started and set up, enabled or not: vhost-user.rst has a started but
  // disabled ring processed without side effects.
  bool Started(int q) const {
    return queues_[q].started && queues_[q].vq.ready();
  }
  Virtqueue& queue(int q) { return queues_[q].vq; }
  int kick_fd(int q) const { return queues_[q].kick.get(); }
  int call_fd(int q) const { return queues_[q].call.get(); }
  // Changes whenever a kick fd is set or closed (the endpoint re-registers
  // it with epoll; an fd number may be reused).
  uint64_t kick_generation(int q) const { return queues_[q].kick_gen; }
  bool Has(int f) const { return (features_ & Bit(f)) != 0; }
  uint64_t features() const { return features_; }
  // 12 with VERSION_1 or MRG_RXBUF, else 10 (virtio 1.x 5.1.6).
  size_t vnet_hdr_len() const;
  const GuestMemory& memory() const { return memory_; }
  const DeviceStats& stats() const { return stats_; }

 private:
  struct Queue {
    Virtqueue vq;
    RingAddresses addr;
    bool have_addr = false;
    uint16_t base = 0;
    bool started = false;
    bool enabled = false;
    UniqueFd kick;
    UniqueFd call;
    UniqueFd err;
    uint64_t kick_gen = 0;
  };
  // false + counted when the check fails.
  bool Refuse(Refusal r);
  bool Dispatch(uint32_t request, std::span<const uint8_t> p,
                std::span<UniqueFd> fds, Reply* reply);
  bool SetMemTable(std::span<const uint8_t> p, std::span<UniqueFd> fds);
  bool SetVringFd(uint32_t request, std::span<const uint8_t> p,
                  std::span<UniqueFd> fds);
  // Translates queue q's rings if it has addresses and memory.
  bool SetupRing(int q);
  void StopRing(int q);

  GuestMemory memory_;
  Queue queues_[kQueues];
  uint64_t features_ = 0;
  uint64_t protocol_features_ = 0;
  DeviceStats stats_;
};

}  // namespace netstack::link::vhost_user

#endif  // NETSTACK_LINK_VHOST_USER_DEVICE_H_
