// A link endpoint on a UNIX stream socket with QEMU's `-netdev stream`
// (and passt's) framing: every Ethernet frame is preceded by its length as
// a 4-byte big-endian integer.
//
//   +----------------+---------------------------+----------------+---
//   | length (4, BE) | Ethernet frame (length B) | length (4, BE) | ...
//   +----------------+---------------------------+----------------+---
//
// A length of 0 or above 65535 can only come from a broken or hostile
// peer: the stream cannot be resynchronised, so the connection is dropped
// and counted (disconnect_bad_length). Frames shorter than an Ethernet
// header or longer than MTU + Ethernet + VLAN are skipped and counted; the
// stream stays in sync.
//
// Modes:
//   - kConnect: connect to a listening peer at `path` (passt, a test).
//     When the peer goes away the endpoint stays disconnected; open a new
//     one to reconnect. The listener must be of our own uid, root or
//     `allow_uid` (SO_PEERCRED, as in kListen): whoever binds an abstract
//     name first would otherwise be the guest's side, get its frames and
//     answer as the VM. Another user's listener fails Open
//     (PermissionDenied, naming its uid); there is no endpoint left to
//     count it in refused_peers.
//   - kListen: bind `path` and accept one peer at a time (QEMU with
//     `-netdev stream,addr.type=unix,server=off`). While a peer is
//     connected, further peers are accepted and closed at once (they see
//     EOF; counted in rejected_peers); once it disconnects, the next peer
//     is accepted. Only a peer of our own uid, of root, or of `allow_uid`
//     (SO_PEERCRED) may be the guest: an abstract name has no permissions
//     at all, so any local user could otherwise connect first and take
//     the guest's place, lease and flows. Others are closed at accept
//     (refused_peers; the first is logged). A socket file is made 0600
//     (0666 with allow_uid, whose user must be able to connect; the check
//     above still decides), and removed when the endpoint is destroyed.
//   - FromConnectedFd(): an already connected socket (socketpair, an fd
//     handed over by QEMU or a supervisor).
//
// Event loop: ReadFd() is an epoll fd that stays the same for the whole
// life of the endpoint; it polls readable when the listening socket has a
// peer waiting or the connection has data. WriteFd() is the connection
// (-1 while there is none).
//
// Receive reads straight into payload chunks and cuts frames out of them
// as views, so the bytes are not copied, except the start of a frame that
// does not fit the rest of a chunk: it moves to a fresh chunk
// (rx_moved_bytes). Transmit writes the length prefixes, headers and
// payload views of many packets in one sendmsg(2). A frame the kernel took
// only part of is finished before anything else is written: its remaining
// bytes are copied aside, and the packet stays at the front of the chain
// until they are out, so the caller keeps watching WriteFd().
#ifndef NETSTACK_LINK_UNIX_STREAM_ENDPOINT_H_
#define NETSTACK_LINK_UNIX_STREAM_ENDPOINT_H_

#include <sys/types.h>
#include <sys/uio.h>

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

struct UnixStreamOptions {
  enum class Mode { kConnect, kListen };
  Mode mode = Mode::kConnect;
  // Filesystem path of the socket, or "@name" for the abstract namespace.
  std::string path;
  // L3 MTU, 68..65521 (a frame is at most 65535 bytes). 1500 is what a
  // guest uses unless told otherwise; passt uses 65520 and advertises it
  // to the guest (DHCP option 26, NDP MTU option).
  uint32_t mtu = 1500;
  // Our Ethernet address. Default: DeriveLocalMac("unix:<path>").
  std::optional<wire::MacAddress> mac;
  // Most frames per DeliverFrames() call; also bounds the frames read per
  // OnReadable() (we stop reading once a batch has been delivered).
  size_t rx_batch = 64;
  // A user besides ours and root who may be the guest's side: the peer
  // that connects (kListen; QEMU run as another user) or the listener we
  // connect to (kConnect); netstackd's --unix-allow-uid.
  std::optional<uid_t> allow_uid;
};

struct UnixStreamStats {
  uint64_t connections = 0;     // peers accepted or connected
  uint64_t rejected_peers = 0;  // extra peers closed while one was connected
  uint64_t refused_peers = 0;   // another user's (SO_PEERCRED), closed
  // Why connections ended.
  uint64_t disconnect_peer_closed = 0;  // EOF
  uint64_t disconnect_io_error = 0;     // read or write error (ECONNRESET, ...)
  uint64_t disconnect_bad_length = 0;   // length prefix 0 or > 65535
  // Frames skipped, stream still in sync.
  uint64_t rx_runt = 0;         // shorter than an Ethernet header
  uint64_t rx_oversize = 0;     // longer than MTU + Ethernet + VLAN
  uint64_t rx_no_receiver = 0;  // nothing Attach()ed
  // Receive paused because the chunk pool was exhausted.
  uint64_t rx_no_buffer = 0;
  uint64_t rx_moved_bytes = 0;    // partial frames moved to a fresh chunk
  uint64_t tx_not_connected = 0;  // packets dropped: no peer
  uint64_t tx_oversize = 0;       // longer than MTU + Ethernet + VLAN
  uint64_t tx_runt = 0;
  uint64_t tx_partial_writes = 0;  // the kernel took part of a frame
};

class UnixStreamEndpoint final : public LinkEndpoint {
 public:
  // Largest frame the 4-byte length may announce (QEMU's limit).
  static constexpr uint32_t kMaxFrameLen = 65535;

  // Connects or listens as options.mode says. Errors: NotFound "no UNIX
  // socket at '/x'", Unavailable "nothing listens on '/x'",
  // FailedPrecondition "'/x' is in use", PermissionDenied "refused '/x':
  // its listener is uid N; ..." (kConnect, another user's listener),
  // InvalidArgument for a bad path or MTU.
  static absl::StatusOr<std::unique_ptr<UnixStreamEndpoint>> Open(
      const UnixStreamOptions& options, buffer::ChunkPool& pool);
  // Takes ownership of `fd`, a connected SOCK_STREAM socket (closed on
  // error too). options.mode and options.path are only used in Name() and
  // for the default MAC.
  static absl::StatusOr<std::unique_ptr<UnixStreamEndpoint>> FromConnectedFd(
      int fd, const UnixStreamOptions& options, buffer::ChunkPool& pool);

  ~UnixStreamEndpoint() override;

  LinkCapabilities Capabilities() const override { return caps_; }
  void Attach(LinkReceiver* receiver) override { receiver_ = receiver; }
  size_t Transmit(buffer::PacketChain& chain, Instant now) override;
  int ReadFd() const override { return epoll_.get(); }
  void OnReadable(Instant now) override;
  int WriteFd() const override { return conn_.get(); }
  // While receive is paused for lack of chunks: when to try again.
  Instant NextDeadline() const override { return rx_retry_at_; }
  void Poll(Instant now) override;
  LinkStats Stats() const override { return stats_; }
  std::string Name() const override;

  bool connected() const { return conn_.valid(); }
  const UnixStreamStats& stream_stats() const { return stream_stats_; }

 private:
  enum class Disconnect { kPeerClosed, kIoError, kBadLength };
  static constexpr size_t kMaxIov = 1024;  // IOV_MAX
  static constexpr size_t kIovPerPacket =
      1 + 1 + buffer::PacketBuffer::kMaxPayloadViews;
  static constexpr size_t kMaxTxPackets = kMaxIov / kIovPerPacket;

  UnixStreamEndpoint(UniqueFd epoll, UniqueFd listener, std::string path,
                     const UnixStreamOptions& options, buffer::ChunkPool& pool);
  absl::Status Adopt(UniqueFd conn);
  void AcceptPending();
  // Whether `peer` may be the guest (its uid, SO_PEERCRED).
  bool PeerAllowed(int peer);
  void DropConnection(Disconnect why);

  // Receive.
  bool EnsureRxSpace();
  // Cuts complete frames out of the chunk; false if the connection was
  // dropped (bad length, or by the receiver's reaction).
  bool ParseFrames(Instant now);
  bool Deliver(Instant now);
  void PauseRx(Instant now);

  // Transmit.
  // Writes the rest of a partly written frame; true when none is left.
  bool FlushTail(buffer::PacketChain& chain, size_t& sent);
  void SaveTail(const buffer::PacketBuffer& p, const uint8_t* prefix,
                size_t written);
  void DropAll(buffer::PacketChain& chain);
  bool Sendable(const buffer::PacketBuffer& p) const;

  buffer::ChunkPool& pool_;
  UniqueFd epoll_;
  UniqueFd listener_;  // listen mode only
  UniqueFd conn_;
  const std::string path_;  // as given
  // Listen mode, a path (not '@abstract'): the file, removed at the end.
  DirEntryRef socket_file_;
  const LinkCapabilities caps_;
  const uint32_t max_frame_;
  const size_t rx_batch_;
  LinkReceiver* receiver_ = nullptr;
  uint64_t generation_ = 0;  // bumped per dropped connection
  // Taken at construction: netstackd's sandbox allows no getuid later.
  const uid_t own_uid_;
  const std::optional<uid_t> allow_uid_;
  bool logged_refusal_ = false;

  // Receive state: stream bytes [rx_pos_, rx_fill_) of rx_chunk_ are not
  // parsed yet. rx_frame_len_ != 0: the prefix of a frame of that length
  // was consumed and the frame starts at rx_pos_.
  buffer::ChunkRef rx_chunk_;
  uint8_t* rx_base_ = nullptr;
  uint32_t rx_fill_ = 0;
  uint32_t rx_pos_ = 0;
  uint32_t rx_frame_len_ = 0;
  std::vector<InboundFrame> frames_;
  size_t frames_pending_ = 0;
  Instant rx_retry_at_ = kNever;
  bool rx_paused_ = false;

  // Transmit state: the unwritten rest of a partly written frame, and the
  // packet it came from (still at the front of the caller's chain).
  std::unique_ptr<uint8_t[]> tx_tail_;
  size_t tx_tail_len_ = 0;
  size_t tx_tail_off_ = 0;
  const buffer::PacketBuffer* tx_tail_packet_ = nullptr;
  size_t tx_tail_packet_size_ = 0;
  uint8_t tx_prefix_[kMaxTxPackets][4];
  iovec tx_iov_[kMaxIov];

  LinkStats stats_;
  UnixStreamStats stream_stats_;
};

}  // namespace netstack::link

#endif  // NETSTACK_LINK_UNIX_STREAM_ENDPOINT_H_
