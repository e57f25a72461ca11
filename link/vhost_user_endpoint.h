// A link endpoint that is a vhost-user-net back-end: QEMU (the front-end)
// connects to a UNIX socket we listen on, hands us the guest's memory and
// virtqueues (link/vhost_user_device.h), and from then on frames move
// through shared memory: we read the guest's TX queue and write its RX
// queue ourselves, with no socket and no copy in QEMU.
//
//   qemu-system-x86_64 ...
//     -object memory-backend-memfd,id=mem,size=256M,share=on
//     -numa node,memdev=mem
//     -chardev socket,id=vu0,path=PATH
//     -netdev vhost-user,id=n0,chardev=vu0
//     -device virtio-net-pci,netdev=n0
// (one command line; docs/VM.md has it whole)
//
// From the guest (its TX queue): each chain is a virtio-net header and an
// Ethernet frame. Both are copied once, out of guest memory into a chunk
// (a 64 KiB chunk for a TSO super-frame, MTU-sized slots otherwise), and
// only the copy is checked (the guest can change its memory at any time):
// ValidateVnetRx (link/vnet_header.h) refuses a header that lies about
// the frame. A frame with NEEDS_CSUM reaches the stack as
// checksum_partial; DATA_VALID from a guest is ignored.
//
// To the guest (its RX queue): the virtio-net header (FillVnetHeader for a
// TCP super-segment, zeros otherwise; num_buffers) and the packet's
// headers and payload views are copied straight into the guest's buffers:
// the one copy. With MRG_RXBUF a frame spans as many chains as it needs;
// without it, one chain must hold it. When the guest has too few buffers,
// Transmit() leaves the packets in the chain (the stack retries), asks
// the guest for a kick, and on that kick hands the stack an empty batch so
// that it flushes at once. A super-segment for a guest that did not
// negotiate GUEST_TSO4/6 is split in software (link/gso.h).
//
// Capabilities: gso_max_size (default 65535) so the stack sends 64 KiB
// super-segments; they cross in one chain (or one MRG_RXBUF frame).
//
// Connections: one front-end at a time. Another that connects meanwhile
// is closed at once (rejected_peers); only our uid, root or allow_uid may
// connect (SO_PEERCRED; refused_peers). When the front-end disconnects,
// everything it gave us goes: the memory is unmapped and every kick, call
// and error fd is closed; the next front-end starts from scratch
// (reconnect). A malformed message stream (a short header, a payload over
// kMaxPayload, a payload that does not arrive within a second) ends the
// connection (bad_streams); a well-formed but wrong message is refused
// and counted by the device, and the connection goes on.
//
// Event loop: ReadFd() is an epoll fd, the same for the endpoint's whole
// life, over the listening socket, the connection and the two kick fds.
// Control messages are read and answered on the loop; a message's payload
// is waited for at most a second.
#ifndef NETSTACK_LINK_VHOST_USER_ENDPOINT_H_
#define NETSTACK_LINK_VHOST_USER_ENDPOINT_H_

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "link/fd_util.h"
#include "link/vhost_user_device.h"
#include "link/vnet_header.h"
#include "netstack/buffer/chunk.h"
#include "netstack/buffer/packet.h"
#include "netstack/link/link_endpoint.h"
#include "netstack/wire/address.h"

namespace netstack::link {

struct VhostUserOptions {
  // The socket to listen on: a file path, or "@name" (abstract).
  std::string path;
  // L3 MTU of frames without GSO, 68..65521.
  uint32_t mtu = 1500;
  // Largest IP packet of a super-segment we send; 0: none (every packet
  // fits the MTU).
  uint32_t gso_max_size = 65535;
  // Our Ethernet address. Default: DeriveLocalMac("vhost-user:<path>").
  std::optional<wire::MacAddress> mac;
  // Most frames taken from the guest's TX queue per turn.
  size_t rx_batch = 64;
  // A user besides ours and root whose front-end may connect.
  std::optional<uid_t> allow_uid;
};

struct VhostUserStats {
  uint64_t connections = 0;
  uint64_t rejected_peers = 0;  // a second front-end, closed at once
  uint64_t refused_peers = 0;   // another user's, closed at once
  uint64_t disconnects = 0;
  uint64_t bad_streams = 0;     // connections ended for a malformed stream
  uint64_t kicks = 0;           // kick fd reads
  uint64_t calls = 0;           // call fd writes
  uint64_t queue_broken = 0;    // a driver's avail index ran away
  // From the guest (its TX queue).
  uint64_t from_guest_chain_refused[vhost_user::kChainErrorCount] = {};
  uint64_t from_guest_vnet_refused[kVnetRxVerdictCount] = {};
  uint64_t from_guest_runt = 0;       // shorter than header + Ethernet
  uint64_t from_guest_no_buffer = 0;  // chunk pool exhausted
  uint64_t from_guest_no_receiver = 0;
  uint64_t from_guest_gso = 0;        // TSO super-frames accepted
  // Chains of a started but disabled TX ring: returned empty, unread
  // (vhost-user.rst: such a ring is processed and its packets discarded).
  uint64_t from_guest_disabled = 0;
  // To the guest (its RX queue).
  uint64_t to_guest_chain_refused[vhost_user::kChainErrorCount] = {};
  uint64_t to_guest_not_ready = 0;   // dropped: no front-end or ring
  uint64_t to_guest_waits = 0;       // Transmit stopped for guest buffers
  uint64_t to_guest_too_small = 0;   // no MRG_RXBUF, a buffer too small
  uint64_t to_guest_oversize = 0;
  uint64_t to_guest_malformed = 0;   // a GSO packet FillVnetHeader refused
  uint64_t to_guest_gso = 0;         // super-segments sent whole
  uint64_t to_guest_split = 0;       // split: the guest has no TSO
  uint64_t to_guest_split_failed = 0;
  uint64_t to_guest_merged = 0;      // frames over more than one chain
};

class VhostUserEndpoint final : public LinkEndpoint {
 public:
  // Listens on options.path (a stale socket file nobody listens on is
  // replaced; the file is 0600, 0666 with allow_uid, and removed when the
  // endpoint goes).
  static absl::StatusOr<std::unique_ptr<VhostUserEndpoint>> Listen(
      const VhostUserOptions& options, buffer::ChunkPool& chunks,
      buffer::PacketPool& packets);
  // Takes an already connected socket (a test's socketpair, an fd from a
  // supervisor). No listener: after a disconnect the endpoint stays idle.
  static absl::StatusOr<std::unique_ptr<VhostUserEndpoint>> FromConnectedFd(
      int fd, const VhostUserOptions& options, buffer::ChunkPool& chunks,
      buffer::PacketPool& packets);
  ~VhostUserEndpoint() override;

  LinkCapabilities Capabilities() const override { return caps_; }
  void Attach(LinkReceiver* receiver) override { receiver_ = receiver; }
  size_t Transmit(buffer::PacketChain& chain, Instant now) override;
  int ReadFd() const override { return epoll_.get(); }
  // Never watched for writability: a full RX queue is waited for by its
  // kick (see the file comment).
  int WriteFd() const override { return -1; }
  void OnReadable(Instant now) override;
  Instant NextDeadline() const override;
  void Poll(Instant now) override;
  LinkStats Stats() const override { return stats_; }
  std::string Name() const override;

  const VhostUserStats& vhost_stats() const { return vstats_; }
  const vhost_user::DeviceStats& device_stats() const {
    return device_.stats();
  }
  bool connected() const { return conn_.valid(); }
  // Guest memory mapped now (0 after a disconnect).
  uint64_t mapped_bytes() const { return device_.memory().mapped_bytes(); }
  uint64_t negotiated_features() const { return device_.features(); }

 private:
  VhostUserEndpoint(UniqueFd epoll, UniqueFd listener,
                    const VhostUserOptions& options, buffer::ChunkPool& chunks,
                    buffer::PacketPool& packets);
  absl::Status Adopt(UniqueFd conn);
  void Accept();
  // Reads and handles control messages until the socket is empty (or a
  // bound); false once the connection is gone.
  void ReadMessages();
  bool ReadOneMessage();
  void Disconnect(bool bad_stream);
  // Registers the device's current kick fds with epoll.
  void SyncKicks();
  void DrainKick(int q);
  void Signal(int q);
  // The guest's TX queue, one bounded batch.
  void FromGuest(Instant now);
  enum class PutResult { kSent, kNoRoom, kDropped };
  PutResult ToGuest(const buffer::PacketBuffer& p);
  bool GuestTakesGso(const buffer::PacketBuffer& p) const;

  buffer::PacketPool& packets_;
  UniqueFd epoll_;
  UniqueFd listener_;
  UniqueFd conn_;
  DirEntryRef socket_file_;
  const std::string path_;
  const std::optional<uid_t> allow_uid_;
  const uid_t own_uid_;  // read before a seccomp filter forbids it
  const LinkCapabilities caps_;
  const uint32_t max_plain_frame_;  // Ethernet + tag + MTU
  const uint32_t max_frame_;        // largest frame from the guest
  const size_t rx_batch_;
  LinkReceiver* receiver_ = nullptr;
  vhost_user::Device device_;
  UniqueFd kick_dup_[vhost_user::kQueues];  // what epoll watches
  uint64_t kick_gen_[vhost_user::kQueues] = {0, 0};
  bool from_guest_more_ = false;   // the TX queue had more than a batch
  bool tx_live_ = false;           // the TX ring was live after the last message
  bool to_guest_waiting_ = false;  // Transmit ran out of guest buffers
  uint16_t no_room_had_ = 0;  // chains ToGuest() had when it ran out
  bool broken_counted_[vhost_user::kQueues] = {false, false};

  // Per-frame scratch, sized once.
  RxSlots small_slots_;
  RxSlots big_slots_;
  std::vector<InboundFrame> frames_;
  std::unique_ptr<vhost_user::Segment[]> segs_;
  struct Head {
    uint16_t id;
    uint32_t capacity;
  };
  std::unique_ptr<Head[]> heads_;

  LinkStats stats_;
  VhostUserStats vstats_;
};

// "link.vhost_user.NAME N" lines for netstackd's counters (documented in
// docs/COUNTERS.md); per-reason refusals only when nonzero.
std::string FormatVhostUserCounters(const VhostUserEndpoint& e);

}  // namespace netstack::link

#endif  // NETSTACK_LINK_VHOST_USER_ENDPOINT_H_
