// A link endpoint on a TAP device (/dev/net/tun, IFF_TAP | IFF_NO_PI).
//
// The kernel side of the TAP is an ordinary Ethernet interface in some
// network namespace; this endpoint is the other end of the wire, the
// "NIC" of the stack. What the kernel sends out of the interface we
// receive, and what we write the kernel receives on it.
//
// What the caller must do on the kernel side (this endpoint does not):
//   - bring the interface up (`ip -n NS link set tap0 up`); until then
//     reads return nothing and the kernel drops what we write;
//   - give it addresses and routes (`ip -n NS addr add 10.0.2.1/24 dev
//     tap0`) if the kernel is to talk to the stack.
// The endpoint sets the interface MTU only when TapOptions::mtu asks for
// one, so both sides agree on the largest frame.
//
// Checksums: without offloads (the default) the kernel completes every
// checksum before a frame reaches the TAP, and expects complete checksums
// in what we write. With vnet_hdr the per-frame virtio-net header says
// whether a checksum is partial (NEEDS_CSUM) or already verified
// (DATA_VALID); see InboundFrame.
//
// Transmit writes one frame per writev(2): a tun fd is not a socket, so
// there is no sendmmsg. While the interface is down each write fails with
// EIO; the frame is dropped and counted (tx_errors). Receive reads up to
// rx_batch frames per OnReadable(), packing several into each 64 KiB
// chunk. The device lives as long as this endpoint's fd (unless made
// persistent with TUNSETPERSIST elsewhere); if someone deletes it anyway,
// reads fail (counted in rx_errors) and the endpoint should be closed.
//
// Queues (TapOptions::queues > 1, IFF_MULTI_QUEUE): the TAP gets that many
// fds, each a queue of the kernel's. For a frame the kernel side sends,
// the kernel picks the queue of the frame's flow (a hash symmetric in its
// addresses and ports): where it last saw us WRITE a frame of that flow
// (kept up to 3 s, at most 4,096 flows), else queue hash % queues. We
// write only through the first queue, so every flow we have answered is
// steered to it; frames of flows we have not answered (new connections,
// a guest's SYN flood from random ports) spread over all the queues.
// OnReadable reads the first queue first, up to rx_batch, and each other
// queue for a small share (at least one frame; while the others were
// empty, they are looked at only when the first is, or every 8th turn):
// under a flood of new
// flows the other queues overflow in the kernel (the guest's tx_dropped),
// while the established flows share their queue with only 1/queues of
// it. ReadFd() is then an epoll fd over the queues; WriteFd() the first.
// The kernel's table of flows holds 4,096 for 3 s, so past 1,365 new
// connections a second (TCP_CRR) it is full and every newer flow's frames
// spread like SYNs. On a TAP it made, Open therefore loads a steering
// program (TUNSETSTEERINGEBPF; needs CAP_BPF or CAP_SYS_ADMIN, steered()
// says whether it took) that sends a TCP SYN without ACK to queue 1 +
// source port % (queues - 1) and every other frame to the first queue: a
// SYN flood shares nothing with the established flows, a new connection
// costs one frame on another queue, and all other traffic (UDP included)
// shares the first queue. NETSTACK_TAP_STEERING=0 in the environment
// leaves the kernel's steering (benchmarks compare both).
// A TAP made without multi_queue (`ip tuntap add` without it) refuses
// IFF_MULTI_QUEUE: Open then falls back to one queue (queue_count()); one
// made with it is attached as one of its queues when queues is 1.
// Several queues are not exclusive in the kernel: another process may
// attach more to the same TAP. Open refuses a multi-queue TAP that exists
// and is not persistent (someone else made it and holds it: "busy", as a
// one-queue TAP's second opener is told); a persistent one (`ip tuntap
// add ... multi_queue`) is attached, and whoever else attaches to it
// shares its frames.
//
// Host GSO (TapOptions::host_gso): Capabilities().gso_max_size becomes
// gso_max_size, and each TCP super-segment the stack sends is written as
// ONE frame behind a filled virtio-net header (NEEDS_CSUM, TCPV4/TCPV6,
// gso_size = MSS; little-endian, TUNSETVNETLE); the kernel segments it
// where it must and completes the checksums. Other frames keep a zero
// header and need complete checksums. host_gso also asks the kernel for
// TSO super-frames and partial checksums on receive (TUN_F_CSUM | TSO4 |
// TSO6 | TSO_ECN), read into 64 KiB slots and flagged per frame; the
// kernel side needs no ethtool changes.
//
// USO (TapOptions::uso, with host_gso; issue #34): the TAP also offers
// TUN_F_USO4 | TUN_F_USO6 (Linux 6.2), so a guest socket that sends with
// UDP_SEGMENT hands us ONE super-frame (gso_type UDP_L4) for up to 64 KiB
// of equal-sized datagrams; InboundFrame::udp_gso_size carries the size
// up to the UDP layer, and the backend sends it on with UDP_SEGMENT. A
// kernel that refuses the flags (EINVAL) gets the offloads without them.
// The other way, Capabilities().udp_gso: a UDP super-datagram the stack
// sends (GsoType::kUdpV4/kUdpV6) is written as ONE UDP_L4 frame.
// NETSTACK_TAP_USO=0 in the environment turns it off (benchmarks compare
// both).
#ifndef NETSTACK_LINK_TAP_ENDPOINT_H_
#define NETSTACK_LINK_TAP_ENDPOINT_H_

#include <sys/uio.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "link/fd_util.h"
#include "netstack/buffer/chunk.h"
#include "netstack/link/link_endpoint.h"
#include "netstack/wire/address.h"

namespace netstack::link {

struct TapOptions {
  // Interface name (at most 15 bytes). Empty: the kernel picks "tapN";
  // interface_name() tells which.
  std::string name;
  // Network namespace (a name under /var/run/netns) the TAP is created or
  // attached in; empty = the calling thread's.
  std::string netns;
  // Or the namespace as an open fd (netstackd's sandbox, --netns-pid):
  // the device is opened on a short-lived thread that enters it
  // (link::RunInNetnsFd), so a process in a user namespace of its own can
  // use it. -1: `netns`. Not both.
  int netns_fd = -1;
  // L3 MTU. 0: use the interface's current MTU (1500 for a new TAP).
  // Otherwise it is set on the interface (SIOCSIFMTU).
  uint32_t mtu = 0;
  // IFF_VNET_HDR with a 12-byte virtio-net header on every frame.
  bool vnet_hdr = false;
  // Host GSO both ways (see the file comment). Implies vnet_hdr, sets
  // TUNSETVNETLE, and adds TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6 |
  // TUN_F_TSO_ECN to `offloads`, so receive slots are whole chunks.
  bool host_gso = false;
  // With host_gso: the largest IP packet of a super-segment, reported as
  // LinkCapabilities::gso_max_size. 1..65535 (IP length fields are 16 bits).
  uint32_t gso_max_size = 65535;
  // With host_gso: offer USO too (see the file comment).
  bool uso = true;
  // TUN_F_* flags for TUNSETOFFLOAD (needs vnet_hdr). 0, the default: the
  // kernel sends complete checksums and no GSO frames. With TUN_F_CSUM the
  // kernel may hand us partial checksums (flagged per frame); with
  // TUN_F_TSO4/6 or TUN_F_UFO/USO also 64 KiB super-frames, so receive
  // slots become whole chunks.
  unsigned offloads = 0;
  // The TAP's transmit queue in frames: what the kernel side (a guest)
  // sends waits there until we read it, and past it frames are dropped
  // (the guest's tx_dropped). 0: leave it (1000 for a new TAP). Size it
  // for the receive window we advertise in MTU-sized frames.
  uint32_t tx_queue_len = 0;
  // Our Ethernet address. Default: DeriveLocalMac("tap:<netns>/<name>").
  // (The kernel side of the TAP has its own, different address.)
  std::optional<wire::MacAddress> mac;
  // Most frames read per OnReadable() call from the first queue (the
  // others add a share of it; see the file comment).
  size_t rx_batch = 64;
  // Kernel queues (IFF_MULTI_QUEUE), 1..16; see the file comment. Open
  // only: an adopted fd is one queue.
  uint32_t queues = 1;
};

class TapEndpoint final : public LinkEndpoint {
 public:
  // Opens /dev/net/tun in `options.netns` and attaches to (or creates) the
  // TAP. Errors name the device and namespace, e.g. NotFound "netns 'x'
  // does not exist", FailedPrecondition "TAP 'tap0' is busy".
  static absl::StatusOr<std::unique_ptr<TapEndpoint>> Open(
      const TapOptions& options, buffer::ChunkPool& pool);
  // Takes `fd`, a TAP that a parent (libvirt, podman, a sandbox) opened
  // and attached, with IFF_NO_PI; it is closed on every error. The fd's
  // IFF_VNET_HDR must match what `options` asks for (vnet_hdr, host_gso).
  // `options.mtu` is required and only sizes our slots: the interface,
  // perhaps in a namespace we cannot reach, is its owner's to configure,
  // so name, netns and tx_queue_len do not apply. Name() is
  // "tap:<ifname>@fd <fd>".
  static absl::StatusOr<std::unique_ptr<TapEndpoint>> FromFd(
      int fd, const TapOptions& options, buffer::ChunkPool& pool);

  ~TapEndpoint() override = default;

  LinkCapabilities Capabilities() const override { return caps_; }
  void Attach(LinkReceiver* receiver) override { receiver_ = receiver; }
  size_t Transmit(buffer::PacketChain& chain, Instant now) override;
  int ReadFd() const override {
    return queues_epoll_.valid() ? queues_epoll_.get() : fd_.get();
  }
  int WriteFd() const override { return fd_.get(); }
  void OnReadable(Instant now) override;
  LinkStats Stats() const override { return stats_; }
  std::string Name() const override;

  const FdEndpointStats& fd_stats() const { return fd_stats_; }
  // Frames dropped because their virtio-net header or the frame itself
  // failed ValidateVnetRx (vnet_hdr or host_gso only), per reason; each
  // is also in Stats().rx_dropped. A guest writes its own headers through
  // PACKET_VNET_HDR, and the kernel passes some lies on (issue #35).
  uint64_t rx_bad_vnet(VnetRxVerdict reason) const {
    return rx_bad_vnet_[static_cast<size_t>(reason)];
  }
  uint64_t rx_bad_vnet_total() const;
  // "link.tap.rx_bad_vnet_hdr N", then a line per reason seen
  // ("link.tap.rx_bad_vnet_hdr.gso_bad_size N"); docs/COUNTERS.md.
  std::string FormatVnetCounters() const;
  // The kernel's name for the device (as chosen by the kernel when
  // TapOptions::name was empty).
  const std::string& interface_name() const { return ifname_; }
  // Bytes of each receive slot (frames per chunk = 65536 / this).
  uint32_t rx_slot_size() const { return slots_.slot_size(); }
  // The kernel queues this endpoint reads (TapOptions::queues, or 1 when
  // the device refused more).
  uint32_t queue_count() const {
    return static_cast<uint32_t>(1 + other_queues_.size());
  }
  // Several queues steered by our program (see the file comment), not by
  // the kernel's table of flows.
  bool steered() const { return steered_; }

 private:
  // The rest of Open/FromFd, once `tun` is attached: the virtio-net header,
  // offloads, MTU and queue (ioctls on `ctl`, a socket in the TAP's
  // namespace; -1 for an adopted fd) and the receive slots.
  // `other_queues`: the fds of queues 2.. (attached like `tun`).
  static absl::StatusOr<std::unique_ptr<TapEndpoint>> Setup(
      UniqueFd tun, std::vector<UniqueFd> other_queues, std::string ifname,
      std::string netns, int ctl, const TapOptions& options,
      buffer::ChunkPool& pool);
  TapEndpoint(UniqueFd fd, std::vector<UniqueFd> other_queues,
              UniqueFd queues_epoll, std::string ifname, std::string netns,
              const LinkCapabilities& caps, size_t vnet_len, uint32_t max_frame,
              uint32_t slot_size, size_t rx_batch, buffer::ChunkPool& pool);

  // Reads one frame of queue `fd` into `buf` (capacity cap); returns the
  // read(2) result.
  ssize_t ReadFrame(int fd, uint8_t* buf, size_t cap);
  // Reads up to `limit` frames of queue `fd` into slots kept.. and
  // frames_; returns the new count of kept frames. *at_limit: it stopped
  // at `limit`, not at EAGAIN.
  size_t ReadQueue(int fd, size_t limit, size_t kept, bool* at_limit);
  void Deliver(size_t count, Instant now);

  UniqueFd fd_;  // the first queue: every write, and its reads first
  std::vector<UniqueFd> other_queues_;
  UniqueFd queues_epoll_;  // with other_queues_: all of them, for ReadFd()
  // Frames read from each of other_queues_ per OnReadable().
  size_t other_queue_share_ = 0;
  // Bit q: other_queues_[q] still had frames after its share, last turn.
  uint32_t still_full_ = 0;
  // OnReadable reads the first queue without asking epoll while the other
  // queues had no frames at the last ask, for up to this many turns.
  static constexpr uint32_t kOtherQueuesEvery = 8;
  uint32_t turns_without_other_queues_ = 0;
  bool other_queues_busy_ = false;
  bool steered_ = false;  // steered(); set by Open
  const std::string ifname_;
  const std::string netns_;
  const LinkCapabilities caps_;
  const size_t vnet_len_;     // 0 or kVnetHdrMrgLen
  const uint32_t max_frame_;  // largest frame accepted either way
  const size_t rx_batch_;
  RxSlots slots_;
  LinkReceiver* receiver_ = nullptr;

  // Receive scratch: the vnet header of the frame being read, and a frame
  // buffer for reads that have no chunk slot (pool exhausted).
  uint8_t rx_vnet_[kVnetHdrMrgLen] = {};
  uint8_t rx_spare_ = 0;  // a read that reaches it was cut short
  std::unique_ptr<uint8_t[]> scratch_;
  std::vector<InboundFrame> frames_;  // one per slot, reused
  // Transmit: the virtio-net header of the frame being written (zero but
  // for a GSO frame; num_buffers stays zero) and per-packet iovecs.
  uint8_t tx_vnet_[kVnetHdrMrgLen] = {};
  iovec tx_iov_[1 + 1 + buffer::PacketBuffer::kMaxPayloadViews];

  LinkStats stats_;
  FdEndpointStats fd_stats_;
  std::array<uint64_t, kVnetRxVerdictCount> rx_bad_vnet_{};
};

}  // namespace netstack::link

#endif  // NETSTACK_LINK_TAP_ENDPOINT_H_
