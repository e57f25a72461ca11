#include "link/packet_endpoint.h"

#include <arpa/inet.h>
#include <linux/if_ether.h>
#include <sys/socket.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <span>
#include <utility>

#include "absl/strings/str_cat.h"
#include "link/netns.h"
#include "netstack/wire/bytes.h"

namespace netstack::link {
namespace {

// Frames start 6 bytes into their slot: 4 bytes of room to put back an
// 802.1Q tag that the kernel moved into auxdata, and 2 more so that the IP
// header is 4-byte aligned with or without the tag (NET_IP_ALIGN).
constexpr uint32_t kRxPad = 6;
constexpr uint32_t kVlanTagLen = 4;
constexpr size_t kMaxRxBatch = 1024;
constexpr uint16_t kTpidVlan = 0x8100;
// IPv4 Total Length and IPv6 Payload Length are 16 bits.
constexpr uint32_t kMaxGsoSize = 65535;

std::string IfLabel(const std::string& ifname, const std::string& netns) {
  return absl::StrCat("interface '", ifname, "' in ", NetnsLabel(netns));
}

absl::Status ValidateOptions(const PacketOptions& o) {
  if (absl::Status s = ValidateInterfaceName(o.interface); !s.ok()) return s;
  if (o.rx_batch == 0 || o.rx_batch > kMaxRxBatch) {
    return absl::InvalidArgumentError(
        absl::StrCat("rx_batch must be 1..", kMaxRxBatch));
  }
  if (o.rx_frame_size != 0 && (o.rx_frame_size < kMinFrameLen ||
                               o.rx_frame_size > buffer::kChunkSize)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rx_frame_size must be 0 or ", kMinFrameLen, "..", buffer::kChunkSize));
  }
  if (o.host_gso) {
    if (o.gso_max_size == 0 || o.gso_max_size > kMaxGsoSize) {
      return absl::InvalidArgumentError(
          absl::StrCat("gso_max_size must be 1..", kMaxGsoSize));
    }
    // AF_PACKET reads the header in the host's legacy virtio order, and
    // FillVnetHeader writes little-endian.
    if constexpr (std::endian::native != std::endian::little) {
      return absl::UnimplementedError(
          "host_gso on AF_PACKET needs a little-endian host");
    }
  }
  return absl::OkStatus();
}

// Sets a socket buffer size, forcing past the sysctl limit when allowed;
// returns the size the kernel reports back (it doubles the request for
// bookkeeping).
absl::StatusOr<int> SetBufferSize(int fd, int force_opt, int opt, int bytes,
                                  const char* what) {
  if (::setsockopt(fd, SOL_SOCKET, force_opt, &bytes, sizeof(bytes)) != 0 &&
      ::setsockopt(fd, SOL_SOCKET, opt, &bytes, sizeof(bytes)) != 0) {
    return ErrnoStatus(errno, absl::StrCat("setsockopt ", what));
  }
  int got = 0;
  socklen_t len = sizeof(got);
  if (::getsockopt(fd, SOL_SOCKET, opt, &got, &len) != 0) {
    return ErrnoStatus(errno, absl::StrCat("getsockopt ", what));
  }
  return got;
}

absl::Status SetIntOpt(int fd, int level, int opt, int value,
                       const char* what) {
  if (::setsockopt(fd, level, opt, &value, sizeof(value)) != 0) {
    return ErrnoStatus(errno, absl::StrCat("setsockopt ", what));
  }
  return absl::OkStatus();
}

absl::Status Prefixed(const std::string& prefix, const absl::Status& s) {
  return absl::Status(s.code(), absl::StrCat(prefix, ": ", s.message()));
}

}  // namespace

struct PacketEndpoint::Config {
  std::string ifname;
  std::string netns;
  int ifindex = 0;
  LinkCapabilities caps;
  size_t vnet_len = 0;
  uint32_t max_frame = 0;
  size_t rx_batch = 0;
  bool spill = false;
  int rcvbuf = 0;
  int sndbuf = 0;
};

absl::StatusOr<std::unique_ptr<PacketEndpoint>> PacketEndpoint::Open(
    const PacketOptions& options, buffer::ChunkPool& pool) {
  if (absl::Status s = ValidateOptions(options); !s.ok()) return s;
  const std::string label = IfLabel(options.interface, options.netns);

  // Protocol 0: the socket receives nothing until bind() names the
  // interface, so no frame of another interface slips in before.
  absl::StatusOr<int> opened =
      OpenInNetns(options.netns, []() -> absl::StatusOr<int> {
        const int fd =
            ::socket(AF_PACKET, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) {
          const int err = errno;
          if (err == EPERM || err == EACCES) {
            return absl::PermissionDeniedError(
                "an AF_PACKET socket needs CAP_NET_RAW");
          }
          return ErrnoStatus(err, "socket(AF_PACKET)");
        }
        return fd;
      });
  if (!opened.ok()) return opened.status();
  UniqueFd fd(*opened);

  Config config;
  config.ifname = options.interface;
  config.netns = options.netns;
  absl::StatusOr<int> ifindex = InterfaceIndex(fd.get(), options.interface);
  if (!ifindex.ok()) {
    if (absl::IsNotFound(ifindex.status())) {
      return absl::NotFoundError(absl::StrCat(label, " does not exist"));
    }
    return Prefixed(label, ifindex.status());
  }
  config.ifindex = *ifindex;

  uint32_t mtu = options.mtu;
  if (mtu == 0) {
    absl::StatusOr<uint32_t> got = InterfaceMtu(fd.get(), options.interface);
    if (!got.ok()) return Prefixed(label, got.status());
    mtu = *got;
  }
  if (options.mac) {
    config.caps.mac = *options.mac;
  } else {
    absl::StatusOr<wire::MacAddress> mac =
        InterfaceMac(fd.get(), options.interface);
    if (!mac.ok()) return Prefixed(label, mac.status());
    config.caps.mac = *mac;
  }
  config.caps.mtu = mtu;
  const bool vnet_hdr = options.vnet_hdr || options.host_gso;
  config.caps.gso_max_size = options.host_gso ? options.gso_max_size : 0;
  // The kernel completes the checksums of GSO frames only (we flag those
  // NEEDS_CSUM); every other frame leaves with a zero header and must
  // carry complete checksums.
  config.caps.tx_checksum_offload = false;
  config.caps.vnet_hdr = vnet_hdr;
  config.vnet_len = vnet_hdr ? kVnetHdrLen : 0;

  constexpr uint32_t kMaxFrame = buffer::kChunkSize - kRxPad;
  if (options.rx_frame_size != 0) {
    config.max_frame = std::min(options.rx_frame_size, kMaxFrame);
  } else if (options.host_gso) {
    config.max_frame = kMaxFrame;
  } else {
    if (uint64_t{mtu} + kEthernetOverhead > kMaxFrame) {
      return absl::InvalidArgumentError(absl::StrCat(
          label, ": MTU ", mtu, " is above ", kMaxFrame - kEthernetOverhead,
          " (a frame must fit one 64 KiB receive chunk)"));
    }
    config.max_frame = mtu + kEthernetOverhead;
  }
  config.rx_batch = options.rx_batch;
  config.spill = options.accept_oversized && config.max_frame < kMaxFrame;

  absl::StatusOr<int> rcvbuf = SetBufferSize(
      fd.get(), SO_RCVBUFFORCE, SO_RCVBUF, options.rcvbuf_bytes, "SO_RCVBUF");
  if (!rcvbuf.ok()) return Prefixed(label, rcvbuf.status());
  absl::StatusOr<int> sndbuf = SetBufferSize(
      fd.get(), SO_SNDBUFFORCE, SO_SNDBUF, options.sndbuf_bytes, "SO_SNDBUF");
  if (!sndbuf.ok()) return Prefixed(label, sndbuf.status());
  config.rcvbuf = *rcvbuf;
  config.sndbuf = *sndbuf;

  if (absl::Status s =
          SetIntOpt(fd.get(), SOL_PACKET, PACKET_AUXDATA, 1, "PACKET_AUXDATA");
      !s.ok()) {
    return Prefixed(label, s);
  }
  // Linux 4.20+. Older kernels loop our own frames back as PACKET_OUTGOING,
  // which OnReadable() skips.
  (void)SetIntOpt(fd.get(), SOL_PACKET, PACKET_IGNORE_OUTGOING, 1,
                  "PACKET_IGNORE_OUTGOING");
  if (options.qdisc_bypass) {
    if (absl::Status s = SetIntOpt(fd.get(), SOL_PACKET, PACKET_QDISC_BYPASS,
                                   1, "PACKET_QDISC_BYPASS");
        !s.ok()) {
      return Prefixed(label, s);
    }
  }
  if (vnet_hdr) {
    if (absl::Status s = SetIntOpt(fd.get(), SOL_PACKET, PACKET_VNET_HDR, 1,
                                   "PACKET_VNET_HDR");
        !s.ok()) {
      return Prefixed(label, s);
    }
  }

  sockaddr_ll addr;
  std::memset(&addr, 0, sizeof(addr));
  addr.sll_family = AF_PACKET;
  addr.sll_protocol = htons(ETH_P_ALL);
  addr.sll_ifindex = config.ifindex;
  if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&addr),
             sizeof(addr)) != 0) {
    return ErrnoStatus(errno, absl::StrCat(label, ": bind"));
  }
  return std::unique_ptr<PacketEndpoint>(
      new PacketEndpoint(std::move(fd), config, pool));
}

PacketEndpoint::PacketEndpoint(UniqueFd fd, const Config& config,
                               buffer::ChunkPool& pool)
    : fd_(std::move(fd)),
      ifname_(config.ifname),
      netns_(config.netns),
      ifindex_(config.ifindex),
      caps_(config.caps),
      vnet_len_(config.vnet_len),
      max_frame_(config.max_frame),
      rx_batch_(config.rx_batch),
      rcvbuf_(config.rcvbuf),
      sndbuf_(config.sndbuf),
      slots_(pool, kRxPad + config.max_frame, config.rx_batch),
      rx_hdrs_(config.rx_batch),
      rx_msgs_(config.rx_batch),
      scratch_(new uint8_t[slots_.slot_size()]),
      pool_(pool),
      spill_(config.spill),
      spills_(config.spill ? config.rx_batch : 0),
      frames_(config.rx_batch),
      tx_hdrs_(kMaxTxBatch),
      tx_iov_(kMaxTxBatch * kTxIovPerPacket),
      tx_vnet_(config.vnet_len > 0 ? kMaxTxBatch : 0),
      tx_verdicts_(kMaxTxInspect) {}

LinkStats PacketEndpoint::Stats() const {
  tpacket_stats st{};
  socklen_t len = sizeof(st);
  if (::getsockopt(fd_.get(), SOL_PACKET, PACKET_STATISTICS, &st, &len) == 0) {
    kernel_drops_ += st.tp_drops;
  }
  LinkStats s = stats_;
  s.rx_dropped += kernel_drops_;
  return s;
}

std::string PacketEndpoint::Name() const {
  if (netns_.empty()) return absl::StrCat("packet:", ifname_);
  return absl::StrCat("packet:", ifname_, "@", netns_);
}

int PacketEndpoint::SendBatch(size_t count) {
  int r;
  do {
    r = ::sendmmsg(fd_.get(), tx_hdrs_.data(), static_cast<unsigned>(count),
                   MSG_DONTWAIT);
    ++stats_.tx_syscalls;
  } while (r < 0 && errno == EINTR);
  return r;
}

TxVerdict PacketEndpoint::Check(const buffer::PacketBuffer& p,
                                uint8_t* vnet) const {
  return CheckTxFrame(p, caps_.mtu, caps_.gso_max_size,
                      vnet_len_ > 0 ? vnet : nullptr);
}

void PacketEndpoint::DropFront(buffer::PacketChain& chain, TxVerdict why) {
  switch (why) {
    case TxVerdict::kRunt:
      ++fd_stats_.tx_runt;
      break;
    case TxVerdict::kBadGso:
      ++fd_stats_.tx_bad_gso;
      break;
    case TxVerdict::kOversize:
    case TxVerdict::kOk:  // not reached: only unsendable packets come here
      ++fd_stats_.tx_oversize;
      break;
  }
  ++stats_.tx_dropped;
  chain.PopFront();
}

size_t PacketEndpoint::BuildBatch(const buffer::PacketChain& chain) {
  size_t count = 0;
  size_t iov_used = 0;
  tx_inspected_ = 0;
  for (const buffer::PacketBuffer& p : chain) {
    if (count == kMaxTxBatch || tx_inspected_ == kMaxTxInspect) break;
    // Each message has its own header: the kernel reads them all in the
    // one sendmmsg. A bad packet gets no message (and its header slot is
    // reused), so it does not split the batch.
    uint8_t* vnet = vnet_len_ > 0 ? tx_vnet_[count].data() : nullptr;
    const TxVerdict v = Check(p, vnet);
    tx_verdicts_[tx_inspected_++] = v;
    if (v != TxVerdict::kOk) continue;
    iovec* iov = &tx_iov_[iov_used];
    size_t n = 0;
    if (vnet_len_ > 0) iov[n++] = iovec{vnet, vnet_len_};
    n += p.ToIovecs(std::span<iovec>(iov + n, kTxIovPerPacket - n));
    mmsghdr& h = tx_hdrs_[count];
    std::memset(&h, 0, sizeof(h));
    // The socket is bound: no destination address is needed.
    h.msg_hdr.msg_iov = iov;
    h.msg_hdr.msg_iovlen = n;
    iov_used += n;
    ++count;
  }
  return count;
}

size_t PacketEndpoint::PopChecked(buffer::PacketChain& chain, size_t checked,
                                  size_t sent) {
  size_t popped = 0;
  for (size_t i = 0; i < checked && !chain.empty(); ++i) {
    const TxVerdict v = tx_verdicts_[i];
    if (v != TxVerdict::kOk) {
      DropFront(chain, v);
      continue;
    }
    if (popped == sent) break;
    fd_stats_.tx_gso += chain.front().is_gso();
    stats_.tx_bytes += chain.front().size();
    ++stats_.tx_frames;
    ++popped;
    chain.PopFront();
  }
  return popped;
}

size_t PacketEndpoint::Transmit(buffer::PacketChain& chain, Instant now) {
  size_t sent = 0;
  while (!chain.empty()) {
    const size_t count = BuildBatch(chain);
    if (count == 0) {  // only bad packets so far: drop them, look further
      PopChecked(chain, tx_inspected_, 0);
      continue;
    }
    const int r = SendBatch(count);
    if (r < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        ++fd_stats_.tx_blocked;
        break;
      }
      // The first message was refused (ENETDOWN, ENOBUFS from the device
      // queue, ...): that packet is lost; go on with the rest.
      ++fd_stats_.tx_errors;
      ++stats_.tx_dropped;
      PopChecked(chain, tx_inspected_, 0);  // the bad ones before it
      chain.PopFront();
      continue;
    }
    if (static_cast<size_t>(r) < count) ++fd_stats_.tx_partial;
    // Pop, in chain order, the bad packets and the first r sendable ones.
    sent += PopChecked(chain, tx_inspected_, static_cast<size_t>(r));
  }
  return sent;
}

void PacketEndpoint::OnReadable(Instant now) {
  const size_t prepared = slots_.Prepare(rx_batch_);
  const size_t cap = slots_.slot_size() - kRxPad;
  for (size_t i = 0; i < rx_batch_; ++i) {
    RxMsg& m = rx_msgs_[i];
    uint8_t* buf = i < prepared ? slots_.Slot(i) + kRxPad : scratch_.get();
    size_t iovcnt = 0;
    if (vnet_len_ > 0) m.iov[iovcnt++] = iovec{m.vnet, vnet_len_};
    m.iov[iovcnt++] = iovec{buf, cap};
    if (spill_ && i < prepared) {
      if (!spills_[i]) {
        spills_[i] = pool_.Allocate();
        if (spills_[i]) spills_[i]->set_slot_size(buffer::kChunkSize);
      }
      if (spills_[i]) {
        // The frame's first `cap` bytes land in the slot; the rest goes
        // here, after room to copy those in front of it.
        uint8_t* base = spills_[i]->mutable_data().data();
        m.iov[iovcnt++] = iovec{base + kRxPad + cap,
                                buffer::kChunkSize - kRxPad - cap};
      }
    }
    mmsghdr& h = rx_hdrs_[i];
    std::memset(&h, 0, sizeof(h));
    h.msg_hdr.msg_name = &m.addr;
    h.msg_hdr.msg_namelen = sizeof(m.addr);
    h.msg_hdr.msg_iov = m.iov;
    h.msg_hdr.msg_iovlen = iovcnt;
    h.msg_hdr.msg_control = m.control;
    h.msg_hdr.msg_controllen = sizeof(m.control);
  }
  int r;
  do {
    r = ::recvmmsg(fd_.get(), rx_hdrs_.data(), static_cast<unsigned>(rx_batch_),
                   MSG_DONTWAIT, nullptr);
    ++stats_.rx_syscalls;
  } while (r < 0 && errno == EINTR);
  if (r <= 0) {
    // ENETDOWN is reported once when the interface goes down (or was down
    // at bind); the socket keeps working when it comes back up.
    if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
      ++fd_stats_.rx_errors;
    }
    return;
  }
  stats_.rx_batch_limit_hits += static_cast<size_t>(r) == rx_batch_;
  size_t kept = 0;
  for (size_t i = 0; i < static_cast<size_t>(r); ++i) {
    if (TakeFrame(i, i, i < prepared, kept)) ++kept;
  }
  slots_.Consume(std::min(static_cast<size_t>(r), prepared));
  if (kept == 0) return;
  receiver_->DeliverFrames(std::span<InboundFrame>(frames_.data(), kept), now);
  for (size_t i = 0; i < kept; ++i) frames_[i] = InboundFrame{};
}

bool PacketEndpoint::TakeFrame(size_t msg, size_t slot, bool have_slot,
                               size_t kept) {
  mmsghdr& h = rx_hdrs_[msg];
  RxMsg& m = rx_msgs_[msg];
  if (m.addr.sll_pkttype == PACKET_OUTGOING) {
    ++fd_stats_.rx_outgoing_ignored;
    return false;
  }
  const size_t n = h.msg_len;
  size_t len = n >= vnet_len_ ? n - vnet_len_ : 0;
  const size_t cap = slots_.slot_size() - kRxPad;
  // Only a message that had a spill iovec can be longer than its slot
  // (the chunk is taken only here, by this message's frame).
  const bool spilled =
      len > cap && have_slot && spill_ && spills_[msg];
  if ((h.msg_hdr.msg_flags & MSG_TRUNC) != 0 ||
      (len > max_frame_ && !spilled)) {
    ++fd_stats_.rx_truncated;
    ++stats_.rx_dropped;
    if (!warned_oversized_) {
      warned_oversized_ = true;
      std::fprintf(stderr,
                   "netstack: %s: dropped a %zu-byte frame larger than the "
                   "%u-byte receive slot (a peer's TSO/GSO or GRO "
                   "super-frame?), counted in rx_dropped. Accept oversized "
                   "frames (the default), use host GSO, or turn the peer's "
                   "offloads off (ethtool -K DEV tso off gso off gro off)."
                   "\n",
                   Name().c_str(), (h.msg_hdr.msg_flags & MSG_TRUNC) != 0
                                       ? static_cast<size_t>(n)
                                       : len,
                   max_frame_);
    }
    return false;
  }
  if (len < kMinFrameLen) {
    ++fd_stats_.rx_runt;
    ++stats_.rx_dropped;
    return false;
  }
  if (!have_slot || receiver_ == nullptr) {
    ++(have_slot ? fd_stats_.rx_no_receiver : fd_stats_.rx_no_buffer);
    ++stats_.rx_dropped;
    return false;
  }

  tpacket_auxdata aux;
  bool have_aux = false;
  for (cmsghdr* c = CMSG_FIRSTHDR(&h.msg_hdr); c != nullptr;
       c = CMSG_NXTHDR(&h.msg_hdr, c)) {
    if (c->cmsg_level == SOL_PACKET && c->cmsg_type == PACKET_AUXDATA &&
        c->cmsg_len >= CMSG_LEN(sizeof(aux))) {
      std::memcpy(&aux, CMSG_DATA(c), sizeof(aux));
      have_aux = true;
    }
  }

  uint8_t* frame = slots_.Slot(slot) + kRxPad;
  if (spilled) {
    // Make the frame contiguous in the spill chunk: the slot's part (one
    // MTU at most) in front of what the kernel wrote there.
    frame = spills_[msg]->mutable_data().data() + kRxPad;
    std::memcpy(frame, slots_.Slot(slot) + kRxPad, cap);
    ++fd_stats_.rx_spilled;
  }
  const uint32_t limit =
      spilled ? buffer::kChunkSize - kRxPad : max_frame_;
  uint32_t offset = kRxPad;
  if (have_aux && (aux.tp_status & TP_STATUS_VLAN_VALID) != 0 &&
      len + kVlanTagLen <= limit) {
    // The kernel took the 802.1Q tag out of the frame (VLAN acceleration);
    // put it back between the addresses and the EtherType, as it was on
    // the wire.
    uint8_t* tagged = frame - kVlanTagLen;
    std::memmove(tagged, frame, 12);
    const uint16_t tpid = (aux.tp_status & TP_STATUS_VLAN_TPID_VALID) != 0
                              ? aux.tp_vlan_tpid
                              : kTpidVlan;
    wire::StoreBe16(tagged + 12, tpid);
    wire::StoreBe16(tagged + 14, aux.tp_vlan_tci);
    offset -= kVlanTagLen;
    len += kVlanTagLen;
    ++fd_stats_.rx_vlan_reinserted;
  }

  VnetRxInfo info;
  if (vnet_len_ > 0) info = ParseVnetHeader(m.vnet);
  if (have_aux) {
    info.checksum_partial |= (aux.tp_status & TP_STATUS_CSUMNOTREADY) != 0;
    info.checksum_verified |= (aux.tp_status & TP_STATUS_CSUM_VALID) != 0;
  }
  fd_stats_.rx_checksum_partial += info.checksum_partial;
  fd_stats_.rx_checksum_verified += info.checksum_verified;
  fd_stats_.rx_gso += info.gso;
  buffer::PayloadView view =
      spilled ? buffer::PayloadView(std::move(spills_[msg]), offset,
                                    static_cast<uint32_t>(len))
              : slots_.View(slot, offset, static_cast<uint32_t>(len));
  frames_[kept] = InboundFrame{std::move(view), info.checksum_verified,
                               info.checksum_partial, info.udp_gso_size};
  ++stats_.rx_frames;
  stats_.rx_bytes += len;
  return true;
}

}  // namespace netstack::link
