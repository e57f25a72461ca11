// A link endpoint on an AF_PACKET socket (SOCK_RAW, ETH_P_ALL) bound to
// one Ethernet interface, typically our end of a veth pair whose other end
// sits in the guest's network namespace.
//
// The socket reads every frame that arrives on the interface and sends
// frames out of it. Frames this socket sends are not read back
// (PACKET_IGNORE_OUTGOING, and PACKET_OUTGOING frames are skipped in case
// the kernel predates it).
//
// Our MAC is the interface's own address (SIOCGIFHWADDR) unless
// PacketOptions::mac gives one. On a veth end that only the stack uses,
// that is the address the peer already resolves the link to, and frames to
// it arrive as PACKET_HOST without promiscuous mode. A different address
// works on veth too (frames to it are PACKET_OTHERHOST, which packet
// sockets still see) but would need promiscuous mode on a real NIC.
//
// What the caller must do on the kernel side:
//   - bring the interface (and its peer) up;
//   - leave the interface without IP addresses, and disable IPv6 on it
//     (net.ipv6.conf.IF.disable_ipv6=1), so the kernel of this namespace
//     does not answer ARP/NDP or send its own traffic alongside the stack;
//   - turn off TSO/GSO on the peer (`ethtool -K PEER tso off gso off`), or
//     receive with big slots (rx_frame_size = 65536): a veth carries the
//     peer kernel's 64 KiB GSO super-frames as they are, and a frame larger
//     than a receive slot is dropped (counted in rx_truncated).
//
// Checksums: frames that crossed a veth from a local sender carry
// CHECKSUM_PARTIAL TCP/UDP checksums (only the pseudo-header sum is in the
// field). The endpoint asks for PACKET_AUXDATA and reports
// TP_STATUS_CSUMNOTREADY as InboundFrame::checksum_partial and
// TP_STATUS_CSUM_VALID as checksum_verified (or the virtio-net header's
// flags with vnet_hdr). What we send must carry complete checksums.
//
// Transmit: one sendmmsg(2) per chain, one mmsghdr per packet with the
// iovecs of PacketBuffer::ToIovecs; a chain longer than kMaxTxBatch
// packets takes one call per kMaxTxBatch. Packets the kernel would refuse
// (shorter than an Ethernet header, longer than MTU + 14, or + 18 when
// tagged) are dropped and counted without splitting the batch. After a
// partial send the rest is offered again at once; EAGAIN leaves it in the
// chain. Receive: one recvmmsg(2) of up to rx_batch frames per
// OnReadable(), packed into shared chunks.
//
// Host GSO (PacketOptions::host_gso): Capabilities().gso_max_size becomes
// gso_max_size, so the stack hands over TCP super-segments whole
// (buffer::GsoInfo). Each leaves as ONE message of the sendmmsg batch,
// behind its own virtio-net header (FillVnetHeader: NEEDS_CSUM,
// TCPV4/TCPV6, gso_size = MSS), and the kernel segments it and completes
// the checksums. Other packets keep an all-zero header and must carry
// complete checksums (tx_checksum_offload stays false). A super-segment
// that breaks the contract of packet.h, or any GSO packet without
// host_gso, is dropped (tx_bad_gso). Receive slots hold 64 KiB, so the
// peer need NOT turn TSO/GSO off: its super-frames arrive whole, flagged
// checksum_partial and counted in rx_gso. A kernel peer's UDP_SEGMENT
// send arrives as one USO super-frame (GSO_UDP_L4); with a virtio-net
// header its gso_size goes on as InboundFrame::udp_gso_size.
// Measured on this kernel (veth): a frame shorter than the device's
// gso_max_size (65536 bytes including the Ethernet header) crosses the veth
// whole and the peer receives one GSO packet; a longer one is segmented in
// software before the veth. For IPv4 that works (46 correct segments of a
// 65535-byte packet); for IPv6 only the last segment arrived. Keep
// gso_max_size <= 65517 on a veth until that is understood.
#ifndef NETSTACK_LINK_PACKET_ENDPOINT_H_
#define NETSTACK_LINK_PACKET_ENDPOINT_H_

#include <linux/if_packet.h>
#include <sys/socket.h>
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

struct PacketOptions {
  // The interface to bind to; required.
  std::string interface;
  // Network namespace (a name under /var/run/netns) of the interface;
  // empty = the calling thread's. The socket stays in it.
  std::string netns;
  // L3 MTU. 0: the interface's MTU (SIOCGIFMTU). The interface itself is
  // not changed.
  uint32_t mtu = 0;
  // Our Ethernet address; default: the interface's own (see above).
  std::optional<wire::MacAddress> mac;
  // PACKET_VNET_HDR: a 10-byte virtio-net header on every frame.
  bool vnet_hdr = false;
  // Host GSO (see the file comment): TCP super-segments leave as one frame
  // each, and the kernel segments them. Implies vnet_hdr, and 64 KiB
  // receive slots unless rx_frame_size says otherwise.
  bool host_gso = false;
  // With host_gso: the largest IP packet of a super-segment, reported as
  // LinkCapabilities::gso_max_size. 1..65535 (IP length fields are 16 bits).
  uint32_t gso_max_size = 65535;
  // Socket buffer sizes. Set with SO_RCVBUFFORCE/SO_SNDBUFFORCE (beyond
  // net.core.rmem_max, needs CAP_NET_ADMIN), else SO_RCVBUF/SO_SNDBUF,
  // which the kernel caps at rmem_max/wmem_max.
  int rcvbuf_bytes = 4 << 20;
  int sndbuf_bytes = 4 << 20;
  // Most frames per recvmmsg.
  size_t rx_batch = 64;
  // Largest frame received, which sets the slot size; 0: MTU + Ethernet +
  // VLAN, or 65536 with host_gso. Up to 65536 for GSO/GRO super-frames
  // (then one per chunk; the frame itself may use 65530 bytes of it).
  uint32_t rx_frame_size = 0;
  // Frames larger than a slot: a kernel peer on a veth sends TSO/GSO
  // super-frames whole (valid IP packets with a partial checksum), and
  // its GRO hands us merged ones. Each message of a receive batch then
  // has a second iovec into a spill chunk of its own; a frame that
  // overflows its slot is completed there (the slot's part, at most one
  // MTU, is copied in front of the rest) and delivered as one view.
  // Frames that fit their slot are untouched. Costs rx_batch chunks of
  // the pool (4 MiB at the default batch), whose pages only big frames
  // touch. Off: such frames are dropped (rx_truncated, and one line on
  // stderr the first time).
  bool accept_oversized = true;
  // PACKET_QDISC_BYPASS: frames go from the socket straight to the
  // device's transmit function, past the qdisc. Saves the queue's per-frame
  // work, but a full device then drops instead of pushing back (a veth
  // with a pfifo qdisc stops its queue and the sender gets EAGAIN; without
  // the qdisc a burst beyond the peer's ring is lost). Off by default.
  bool qdisc_bypass = false;
};

class PacketEndpoint final : public LinkEndpoint {
 public:
  // Most packets per sendmmsg; the kernel caps vlen at UIO_MAXIOV (1024).
  static constexpr size_t kMaxTxBatch = 1024;

  // Opens the socket in `options.netns` and binds it to the interface.
  // Errors: NotFound "netns 'x' does not exist" / "interface 'veth0' does
  // not exist in netns 'x'", PermissionDenied without CAP_NET_RAW,
  // InvalidArgument for a non-Ethernet interface or bad options.
  static absl::StatusOr<std::unique_ptr<PacketEndpoint>> Open(
      const PacketOptions& options, buffer::ChunkPool& pool);

  ~PacketEndpoint() override = default;

  LinkCapabilities Capabilities() const override { return caps_; }
  void Attach(LinkReceiver* receiver) override { receiver_ = receiver; }
  size_t Transmit(buffer::PacketChain& chain, Instant now) override;
  int ReadFd() const override { return fd_.get(); }
  void OnReadable(Instant now) override;
  // rx_dropped includes the frames the kernel dropped because the
  // socket's receive buffer was full (PACKET_STATISTICS, read here).
  LinkStats Stats() const override;
  std::string Name() const override;

  const FdEndpointStats& fd_stats() const { return fd_stats_; }
  // Frames the kernel dropped, the receive buffer full, up to the last
  // Stats() call.
  uint64_t kernel_drops() const { return kernel_drops_; }
  const std::string& interface_name() const { return ifname_; }
  int interface_index() const { return ifindex_; }
  uint32_t rx_slot_size() const { return slots_.slot_size(); }
  // The socket buffer sizes the kernel granted (SO_RCVBUF/SO_SNDBUF).
  int rcvbuf_bytes() const { return rcvbuf_; }
  int sndbuf_bytes() const { return sndbuf_; }

 private:
  struct Config;
  PacketEndpoint(UniqueFd fd, const Config& config, buffer::ChunkPool& pool);

  // Frames one received message, or counts why it is dropped; true if
  // frames_[kept] was filled.
  bool TakeFrame(size_t msg, size_t slot, bool have_slot, size_t kept);
  // One sendmmsg of the first `count` prepared messages; returns the
  // number sent or -1 with errno.
  int SendBatch(size_t count);
  // Whether `p` may be sent; writes its virtio-net header to `vnet` (when
  // the socket has one, else `vnet` is ignored).
  TxVerdict Check(const buffer::PacketBuffer& p, uint8_t* vnet) const;
  // Checks the front of `chain` once per packet, recording each verdict in
  // tx_verdicts_, and prepares one message per sendable packet: up to
  // kMaxTxBatch messages from at most kMaxTxInspect packets. Returns the
  // number of messages; tx_inspected_ says how many packets were checked.
  size_t BuildBatch(const buffer::PacketChain& chain);
  // Pops the first `checked` packets of `chain` (tx_verdicts_ in order):
  // each unsendable one dropped and counted, and the first `sent`
  // sendable ones counted as transmitted; stops at the first sendable
  // packet past them. Returns how many were popped as sent.
  size_t PopChecked(buffer::PacketChain& chain, size_t checked, size_t sent);
  // Drops the (unsendable) front packet, counted by `why`.
  void DropFront(buffer::PacketChain& chain, TxVerdict why);

  UniqueFd fd_;
  const std::string ifname_;
  const std::string netns_;
  const int ifindex_;
  const LinkCapabilities caps_;
  const size_t vnet_len_;
  const uint32_t max_frame_;
  const size_t rx_batch_;
  const int rcvbuf_;
  const int sndbuf_;
  RxSlots slots_;
  LinkReceiver* receiver_ = nullptr;

  // Receive: one mmsghdr per message, each with its own address, control
  // buffer, vnet header room and iovecs. Allocated once.
  struct RxMsg {
    sockaddr_ll addr;
    alignas(cmsghdr) uint8_t control[CMSG_SPACE(sizeof(tpacket_auxdata))];
    uint8_t vnet[kVnetHdrLen];
    iovec iov[3];  // vnet header, slot, spill
  };
  std::vector<mmsghdr> rx_hdrs_;
  std::vector<RxMsg> rx_msgs_;
  std::unique_ptr<uint8_t[]> scratch_;  // frames with no slot are dropped
  // accept_oversized: a spill chunk per message (empty: none yet, or the
  // last one went out with its frame, or the pool had none).
  buffer::ChunkPool& pool_;
  const bool spill_;
  std::vector<buffer::ChunkRef> spills_;
  bool warned_oversized_ = false;
  std::vector<InboundFrame> frames_;

  // Transmit: mmsghdrs and their iovecs, for up to kMaxTxBatch packets.
  static constexpr size_t kTxIovPerPacket =
      1 + 1 + buffer::PacketBuffer::kMaxPayloadViews;
  std::vector<mmsghdr> tx_hdrs_;
  std::vector<iovec> tx_iov_;
  // One virtio-net header per message of a batch (kMaxTxBatch of them
  // with a vnet header, else none).
  std::vector<std::array<uint8_t, kVnetHdrLen>> tx_vnet_;
  // The verdict of each packet BuildBatch checked, in chain order, so that
  // popping them does not check them again.
  static constexpr size_t kMaxTxInspect = 2 * kMaxTxBatch;
  std::vector<TxVerdict> tx_verdicts_;
  size_t tx_inspected_ = 0;

  LinkStats stats_;
  FdEndpointStats fd_stats_;
  // PACKET_STATISTICS resets on every read: the sum so far.
  mutable uint64_t kernel_drops_ = 0;
};

}  // namespace netstack::link

#endif  // NETSTACK_LINK_PACKET_ENDPOINT_H_
