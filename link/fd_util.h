// Helpers shared by the fd-based link endpoints (TAP, AF_PACKET, UNIX
// stream): an owning fd, errno to absl::Status, interface ioctls, the
// virtio-net header, and the receive-slot carver that packs several frames
// into one payload chunk.
#ifndef NETSTACK_LINK_FD_UTIL_H_
#define NETSTACK_LINK_FD_UTIL_H_

#include <cstddef>
#include <cstdint>
#include <sys/stat.h>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "netstack/buffer/chunk.h"
#include "netstack/buffer/packet.h"
#include "netstack/buffer/payload_view.h"
#include "link/vnet_header.h"  // kVnetHdrLen, ParseVnetHeader
#include "netstack/wire/address.h"

namespace netstack::link {

// Owns one file descriptor; closes it when destroyed. Move-only.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  UniqueFd(UniqueFd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept {
    if (this != &o) reset(std::exchange(o.fd_, -1));
    return *this;
  }
  ~UniqueFd() { reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  // Gives up ownership without closing.
  int release() { return std::exchange(fd_, -1); }
  // Closes the current fd (if any) and takes `fd`.
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

// A file's name in its directory, held through an O_PATH fd of the
// directory, so that the file can still be checked and removed after the
// process's root has moved: netstackd detaches its mount namespace once it
// is set up (netstack/sandbox/least_privilege.h), and removes its socket
// files at exit through these.
class DirEntryRef {
 public:
  DirEntryRef() = default;
  // Opens `path`'s directory (its last component need not exist yet).
  static absl::StatusOr<DirEntryRef> Of(const std::string& path);
  bool valid() const { return dir_.valid(); }
  // unlinkat(2) and fstatat(2) of the name: 0, or -1 with errno.
  int Unlink() const;
  int Stat(struct stat* st) const;
  const std::string& path() const { return path_; }

 private:
  UniqueFd dir_;
  std::string name_;
  std::string path_;
};

// `what` followed by ": " and strerror(err), with the absl code that
// matches errno (absl::ErrnoToStatus).
absl::Status ErrnoStatus(int err, std::string_view what);

// "foo" -> "netns 'foo'", "" -> "the current netns": for error messages.
std::string NetnsLabel(const std::string& netns);

// Checks an interface name the way the kernel will (dev_valid_name):
// 1..15 bytes, no '/', ':' or whitespace, not "." or "..".
absl::Status ValidateInterfaceName(const std::string& name);

// Interface queries and settings through `sock_fd`, any socket. These
// ioctls act in the socket's network namespace, not the calling thread's,
// so a socket opened with OpenInNetns() reaches that namespace's devices.
absl::StatusOr<int> InterfaceIndex(int sock_fd, const std::string& ifname);
absl::StatusOr<uint32_t> InterfaceMtu(int sock_fd, const std::string& ifname);
// Sets the interface's transmit queue length in frames (SIOCSIFTXQLEN).
absl::Status SetInterfaceTxQueueLen(int sock_fd, const std::string& ifname,
                                    uint32_t frames);
absl::Status SetInterfaceMtu(int sock_fd, const std::string& ifname,
                             uint32_t mtu);
// The interface's hardware address; an error if it is not Ethernet.
absl::StatusOr<wire::MacAddress> InterfaceMac(int sock_fd,
                                              const std::string& ifname);

// A locally administered unicast MAC (02:xx:...) derived from `seed` by a
// fixed hash (FNV-1a), so the same endpoint gets the same address on every
// run without configuration.
wire::MacAddress DeriveLocalMac(std::string_view seed);

// Bytes of an Ethernet frame without its payload: header plus one 802.1Q
// tag, the most an MTU-sized IP packet is wrapped in.
inline constexpr uint32_t kEthernetOverhead = 14 + 4;
// Shortest frame a link accepts or delivers: one Ethernet header.
inline constexpr uint32_t kMinFrameLen = 14;

// Whether `p` is a frame the link may send: at least an Ethernet header,
// and at most MTU + 14 bytes, or MTU + 18 when it carries an 802.1Q/802.1ad
// tag (the rule of the kernel's AF_PACKET send path, packet_snd()).
bool FrameFitsMtu(const buffer::PacketBuffer& p, uint32_t mtu);

// Whether a frame may be sent, and if not, which counter says why.
enum class TxVerdict : uint8_t { kOk, kRunt, kOversize, kBadGso };

// The transmit check of the vnet-header endpoints, which also writes the
// frame's virtio-net header to `vnet` (kVnetHdrLen bytes; may be null when
// the fd has no vnet header and `gso_max_size` is 0).
//   - A packet without GSO must pass FrameFitsMtu(p, mtu); its header is
//     all zero, or NEEDS_CSUM when its checksum is partial (which needs
//     `vnet`: without one it is kBadGso, as it would leave corrupt).
//   - A GSO packet needs host GSO (gso_max_size > 0): its IP packet may be
//     up to gso_max_size bytes (FrameFitsMtu with that as the MTU), and
//     FillVnetHeader must accept its headers. Without host GSO it is
//     kBadGso: its TCP checksum is only the pseudo-header sum, so sent as
//     is it would reach the peer corrupt.
[[nodiscard]] TxVerdict CheckTxFrame(const buffer::PacketBuffer& p,
                                     uint32_t mtu, uint32_t gso_max_size,
                                     uint8_t* vnet);

// Counters the fd endpoints keep on top of LinkStats, one per reason.
struct FdEndpointStats {
  // Receive: frames not delivered, and what the host kernel told us.
  uint64_t rx_truncated = 0;         // larger than a receive slot
  uint64_t rx_runt = 0;              // shorter than an Ethernet header
  uint64_t rx_no_buffer = 0;         // chunk pool exhausted: read and dropped
  uint64_t rx_no_receiver = 0;       // nothing Attach()ed
  uint64_t rx_outgoing_ignored = 0;  // AF_PACKET: our own transmissions
  uint64_t rx_errors = 0;            // read error other than EAGAIN
  uint64_t rx_checksum_partial = 0;
  uint64_t rx_checksum_verified = 0;
  uint64_t rx_gso = 0;              // GSO/GRO super-frames (vnet header)
  uint64_t rx_vlan_reinserted = 0;  // AF_PACKET: tag from auxdata
  // AF_PACKET: frames larger than their slot, completed in a spill chunk
  // (PacketOptions::accept_oversized).
  uint64_t rx_spilled = 0;
  // Transmit.
  uint64_t tx_oversize = 0;  // larger than MTU (or gso_max_size) + L2
  uint64_t tx_gso = 0;       // GSO super-frames handed to the kernel whole
  uint64_t tx_bad_gso = 0;   // GSO packet without host GSO, or malformed
  uint64_t tx_runt = 0;      // shorter than an Ethernet header
  uint64_t tx_errors = 0;    // kernel refused it (not EAGAIN): dropped
  uint64_t tx_blocked = 0;   // EAGAIN: packets left in the chain
  uint64_t tx_partial = 0;   // sendmmsg took only part of a batch
};

// Carves receive slots out of payload chunks, so that several frames share
// one 64 KiB chunk (42 slots of 1536 bytes at MTU 1500) while each frame's
// PayloadView keeps its own reference. A chunk returns to its pool when
// the carver has moved past it and the last view of it is gone.
//
// Use per receive batch: Prepare(n) slots, let the kernel write into
// Slot(i), turn the kept ones into views with View(i, ...), then
// Consume(k) the slots the batch used.
//
// Writing through Slot() into a chunk that views already share is safe:
// views only cover slots that were consumed, and a slot is handed out for
// writing only before it is consumed. The base address of each chunk is
// taken while the carver holds its only reference (Chunk::mutable_data).
// Each chunk records the slot size (Chunk::slot_size): what one frame's
// view pins at least, which a TCP receive queue charges (docs/TCP.md).
class RxSlots {
 public:
  // `slot_size` is rounded up to 64 bytes and must be at most kChunkSize.
  // At most `max_batch` slots are prepared at once.
  RxSlots(buffer::ChunkPool& pool, uint32_t slot_size, size_t max_batch);
  RxSlots(const RxSlots&) = delete;
  RxSlots& operator=(const RxSlots&) = delete;

  uint32_t slot_size() const { return slot_size_; }
  uint32_t slots_per_chunk() const { return slots_per_chunk_; }

  // Makes up to min(n, max_batch) slots writable and returns how many:
  // fewer only when the chunk pool is exhausted. May be called again with
  // a larger n during a batch (one read per frame); slots already handed
  // out keep their index.
  size_t Prepare(size_t n);
  // The first byte of prepared slot i.
  uint8_t* Slot(size_t i);
  // A view of [offset, offset + len) of prepared slot i (within the slot).
  buffer::PayloadView View(size_t i, uint32_t offset, uint32_t len);
  // The first n prepared slots are used up.
  void Consume(size_t n);

 private:
  struct Held {
    buffer::ChunkRef ref;
    uint8_t* base = nullptr;
  };
  std::pair<size_t, uint32_t> Locate(size_t i) const;

  buffer::ChunkPool& pool_;
  const uint32_t slot_size_;
  const uint32_t slots_per_chunk_;
  const size_t max_batch_;
  std::vector<Held> held_;  // capacity reserved up front: no allocation
  size_t first_slot_ = 0;   // next free slot of held_[0]
};

}  // namespace netstack::link

#endif  // NETSTACK_LINK_FD_UTIL_H_
