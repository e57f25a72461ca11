#include "link/tap_endpoint.h"

#include <fcntl.h>
#include <linux/bpf.h>
#include <linux/if_tun.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <cstdlib>
#include <string_view>
#include <bit>
#include <cstring>
#include <span>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "link/netns.h"

namespace netstack::link {
namespace {

// Frames start 2 bytes into their slot so that the IP header after the
// 14-byte Ethernet header is 4-byte aligned (Linux's NET_IP_ALIGN).
constexpr uint32_t kRxPad = 2;
constexpr size_t kMaxRxBatch = 1024;
constexpr uint32_t kMaxQueues = 16;
// TUN_F_USO4/6 (<linux/if_tun.h> of Linux 6.2; Debian 12's headers are
// older): the kernel may send UDP_L4 super-frames.
constexpr unsigned kTunUso4 = 0x20;
constexpr unsigned kTunUso6 = 0x40;
// Offloads that make the kernel send GSO super-frames to the TAP.
constexpr unsigned kGsoOffloads =
    TUN_F_TSO4 | TUN_F_TSO6 | TUN_F_UFO | kTunUso4 | kTunUso6;

// What host GSO asks of the TAP for receive: partial checksums and TCP
// super-frames (TSO_ECN: also those with CWR set; we forward the flag).
constexpr unsigned kHostGsoOffloads =
    TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6 | TUN_F_TSO_ECN;
constexpr uint32_t kMaxGsoSize = 65535;  // 16-bit IP length fields

std::string TapLabel(const std::string& name, const std::string& netns) {
  return absl::StrCat("TAP '", name, "' in ", NetnsLabel(netns));
}

// The same for a TAP opened by options: one given a namespace by fd is not
// in "the current netns".
std::string TapLabel(const TapOptions& o) {
  if (o.netns.empty() && o.netns_fd >= 0) {
    return absl::StrCat("TAP '", o.name, "' in the guest's network namespace");
  }
  return TapLabel(o.name, o.netns);
}

absl::Status ValidateOptions(const TapOptions& o) {
  if (!o.name.empty()) {
    if (absl::Status s = ValidateInterfaceName(o.name); !s.ok()) return s;
  }
  if (o.host_gso && (o.gso_max_size == 0 || o.gso_max_size > kMaxGsoSize)) {
    return absl::InvalidArgumentError(
        absl::StrCat("gso_max_size must be 1..", kMaxGsoSize));
  }
  if (o.offloads != 0 && !o.vnet_hdr && !o.host_gso) {
    return absl::InvalidArgumentError(
        "TAP offloads need vnet_hdr: without a virtio-net header the "
        "kernel cannot say which checksums are partial");
  }
  if (o.rx_batch == 0 || o.rx_batch > kMaxRxBatch) {
    return absl::InvalidArgumentError(
        absl::StrCat("rx_batch must be 1..", kMaxRxBatch));
  }
  if (o.queues == 0 || o.queues > kMaxQueues) {
    return absl::InvalidArgumentError(
        absl::StrCat("TAP queues must be 1..", kMaxQueues));
  }
  return absl::OkStatus();
}

// Attaches `fd` (an open /dev/net/tun) to the TAP named in `ifr`.
absl::Status SetIff(int fd, ifreq& ifr, const TapOptions& o) {
  if (::ioctl(fd, TUNSETIFF, &ifr) == 0) return absl::OkStatus();
  const int err = errno;
  const std::string label = TapLabel(o);
  switch (err) {
    case EBUSY:
      return absl::FailedPreconditionError(absl::StrCat(
          label, " is busy: another process or endpoint has it open"));
    case EPERM:
      return absl::PermissionDeniedError(absl::StrCat(
          label, ": creating or attaching a TAP needs CAP_NET_ADMIN"));
    case EINVAL:
      return absl::InvalidArgumentError(absl::StrCat(
          label, ": the name belongs to a device that is not a TAP, or to a ",
          "TAP with other flags (TUNSETIFF: ", std::strerror(err), ")"));
    default:
      return ErrnoStatus(err, absl::StrCat(label, ": TUNSETIFF"));
  }
}

// The TAP's queue steering (TUNSETSTEERINGEBPF) for `queues` > 1 queues:
// a TCP SYN without ACK (a new connection) goes to queue 1 + its source
// port % (queues - 1), every other frame to queue 0, the first. Without
// it the kernel steers a flow by a table of the flows we wrote on, and the
// table holds 4,096 flows for 3 s: past 1,365 new connections a second
// (TCP_CRR) it is full, and the frames of every newer flow spread over the
// queues like a SYN (issue #34). Frames it cannot parse (VLAN tags, IPv6
// extension headers, IPv4 fragments past the first) go to queue 0.
// Classic socket-filter loads (LD_ABS, LD_IND) read the frame from its
// Ethernet header; one past the frame's end ends the program with 0.
// Returns the program's fd, or -1 with errno set (EPERM without CAP_BPF or
// CAP_SYS_ADMIN, e.g. netstackd in a user namespace of its own).
int LoadSteeringProgram(uint32_t queues) {
  auto insn = [](uint8_t code, uint8_t dst, uint8_t src, int16_t off,
                 int32_t imm) {
    bpf_insn i{};
    i.code = code;
    i.dst_reg = dst & 0xf;
    i.src_reg = src & 0xf;
    i.off = off;
    i.imm = imm;
    return i;
  };
  constexpr uint8_t kLdAbsB = BPF_LD | BPF_ABS | BPF_B;
  constexpr uint8_t kLdAbsH = BPF_LD | BPF_ABS | BPF_H;
  constexpr uint8_t kLdIndB = BPF_LD | BPF_IND | BPF_B;
  constexpr uint8_t kLdIndH = BPF_LD | BPF_IND | BPF_H;
  constexpr uint8_t kJeq = BPF_JMP | BPF_JEQ | BPF_K;
  constexpr uint8_t kJne = BPF_JMP | BPF_JNE | BPF_K;
  constexpr uint8_t kJset = BPF_JMP | BPF_JSET | BPF_K;
  constexpr uint8_t kJa = BPF_JMP | BPF_JA;
  constexpr uint8_t kExit = BPF_JMP | BPF_EXIT;
  constexpr uint8_t kMovK = BPF_ALU64 | BPF_MOV | BPF_K;
  constexpr uint8_t kMovX = BPF_ALU64 | BPF_MOV | BPF_X;
  constexpr uint8_t kAndK = BPF_ALU64 | BPF_AND | BPF_K;
  constexpr uint8_t kLshK = BPF_ALU64 | BPF_LSH | BPF_K;
  constexpr uint8_t kModK = BPF_ALU64 | BPF_MOD | BPF_K;
  constexpr uint8_t kAddK = BPF_ALU64 | BPF_ADD | BPF_K;
  constexpr uint8_t kSynAck = 0x12, kSyn = 0x02;
  // Jump offsets count from the next instruction; the comments number
  // the instructions. Loads put their result in r0; r6 is the context.
  const bpf_insn prog[] = {
      insn(kMovX, 6, 1, 0, 0),                  // 0: r6 = skb
      insn(kLdAbsH, 0, 0, 0, 12),               // 1: EtherType
      insn(kJeq, 0, 0, 3, 0x0800),              // 2: IPv4 -> 6
      insn(kJeq, 0, 0, 15, 0x86dd),             // 3: IPv6 -> 19
      insn(kMovK, 0, 0, 0, 0),                  // 4
      insn(kExit, 0, 0, 0, 0),                  // 5: queue 0
      insn(kLdAbsB, 0, 0, 0, 14 + 9),           // 6: IPv4 protocol
      insn(kJne, 0, 0, 20, IPPROTO_TCP),        // 7: -> 28
      insn(kLdAbsH, 0, 0, 0, 14 + 6),           // 8: flags, fragment offset
      insn(kJset, 0, 0, 18, 0x1fff),            // 9: not the first -> 28
      insn(kLdAbsB, 0, 0, 0, 14),               // 10: version, IHL
      insn(kAndK, 0, 0, 0, 0xf),                // 11
      insn(kLshK, 0, 0, 0, 2),                  // 12: IPv4 header bytes
      insn(kMovX, 7, 0, 0, 0),                  // 13: r7 = them
      insn(kLdIndB, 0, 7, 0, 14 + 13),          // 14: TCP flags
      insn(kAndK, 0, 0, 0, kSynAck),            // 15
      insn(kJne, 0, 0, 11, kSyn),               // 16: not a SYN -> 28
      insn(kLdIndH, 0, 7, 0, 14),               // 17: TCP source port
      insn(kJa, 0, 0, 6, 0),                    // 18: -> 25
      insn(kLdAbsB, 0, 0, 0, 14 + 6),           // 19: IPv6 next header
      insn(kJne, 0, 0, 7, IPPROTO_TCP),         // 20: -> 28
      insn(kLdAbsB, 0, 0, 0, 14 + 40 + 13),     // 21: TCP flags
      insn(kAndK, 0, 0, 0, kSynAck),            // 22
      insn(kJne, 0, 0, 4, kSyn),                // 23: not a SYN -> 28
      insn(kLdAbsH, 0, 0, 0, 14 + 40),          // 24: TCP source port
      insn(kModK, 0, 0, 0, static_cast<int32_t>(queues - 1)),  // 25
      insn(kAddK, 0, 0, 0, 1),                  // 26
      insn(kExit, 0, 0, 0, 0),                  // 27: queue 1..queues-1
      insn(kMovK, 0, 0, 0, 0),                  // 28
      insn(kExit, 0, 0, 0, 0),                  // 29: queue 0
  };
  // No GPL-only helper is called: the license string may say nothing.
  static const char kLicense[] = "";
  bpf_attr attr;
  std::memset(&attr, 0, sizeof(attr));
  attr.prog_type = BPF_PROG_TYPE_SOCKET_FILTER;
  attr.insns = reinterpret_cast<uintptr_t>(prog);
  attr.insn_cnt = static_cast<uint32_t>(std::size(prog));
  attr.license = reinterpret_cast<uintptr_t>(kLicense);
  return static_cast<int>(
      ::syscall(SYS_bpf, BPF_PROG_LOAD, &attr, sizeof(attr)));
}

}  // namespace

absl::StatusOr<std::unique_ptr<TapEndpoint>> TapEndpoint::Open(
    const TapOptions& options, buffer::ChunkPool& pool) {
  if (absl::Status s = ValidateOptions(options); !s.ok()) return s;

  // The tun fd and a control socket for the MTU ioctls, both created in
  // the target namespace (the TAP device is created in the namespace of
  // the fd's opener).
  UniqueFd tun;
  std::vector<UniqueFd> other_queues;
  UniqueFd ctl;
  bool existed = false;  // the TAP was there before us
  auto open_both = [&]() -> absl::Status {
    existed = !options.name.empty() &&
              ::if_nametoindex(options.name.c_str()) != 0;
    tun.reset(::open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC));
    if (!tun.valid()) {
      const int err = errno;
      if (err == ENOENT || err == ENODEV) {
        return absl::FailedPreconditionError(
            "/dev/net/tun is missing: the kernel has no TUN/TAP support "
            "(modprobe tun)");
      }
      if (err == EACCES || err == EPERM) {
        struct stat st;
        const bool got = ::stat("/dev/net/tun", &st) == 0;
        return absl::PermissionDeniedError(absl::StrCat(
            "open /dev/net/tun: ", std::strerror(err),
            got ? absl::StrFormat(" (its mode is %04o)", st.st_mode & 07777)
                : std::string(),
            ": this user may not open it. Debian's udev rule makes it 0666 "
            "(chmod 0666 /dev/net/tun), or run as root"));
      }
      return ErrnoStatus(err, "open /dev/net/tun");
    }
    for (uint32_t i = 1; i < options.queues; ++i) {
      UniqueFd q(::open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC));
      if (!q.valid()) return ErrnoStatus(errno, "open /dev/net/tun");
      other_queues.push_back(std::move(q));
    }
    ctl.reset(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    if (!ctl.valid()) return ErrnoStatus(errno, "control socket");
    return absl::OkStatus();
  };
  absl::Status opened = options.netns_fd >= 0
                            ? RunInNetnsFd(options.netns_fd, open_both)
                            : RunInNetns(options.netns, open_both);
  if (!opened.ok()) return opened;

  ifreq ifr;
  std::memset(&ifr, 0, sizeof(ifr));
  const bool vnet_hdr = options.vnet_hdr || options.host_gso;
  ifr.ifr_flags = IFF_TAP | IFF_NO_PI | (vnet_hdr ? IFF_VNET_HDR : 0) |
                  (other_queues.empty() ? 0 : IFF_MULTI_QUEUE);
  std::memcpy(ifr.ifr_name, options.name.data(), options.name.size());
  absl::Status attached = SetIff(tun.get(), ifr, options);
  if (absl::IsInvalidArgument(attached)) {
    // An existing TAP was made with one queue or several, and refuses the
    // other kind (IFF_MULTI_QUEUE must match): take it as it was made,
    // one queue if it has one (queue_count() says so). If it is no TAP at
    // all, this fails too, and the first error says so.
    // Busy (EBUSY: someone holds a one-queue TAP) is what the second try
    // says, and the true reason.
    ifr.ifr_flags ^= IFF_MULTI_QUEUE;
    absl::Status again = SetIff(tun.get(), ifr, options);
    if (!absl::IsInvalidArgument(again)) attached = again;
  }
  if (!attached.ok()) return attached;
  if ((ifr.ifr_flags & IFF_MULTI_QUEUE) == 0) {
    other_queues.clear();
  } else if (existed) {
    // A multi-queue TAP takes any number of readers, so the EBUSY a second
    // opener of a one-queue TAP gets never comes. One that is not
    // persistent (not made with `ip tuntap add`) lives only while its
    // maker holds it open: someone else's, busy.
    ifreq got;
    std::memset(&got, 0, sizeof(got));
    if (::ioctl(tun.get(), TUNGETIFF, &got) != 0 ||
        (got.ifr_flags & IFF_PERSIST) == 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          TapLabel(options),
          " is busy: another process or endpoint has it open"));
    }
  }
  // The kernel wrote the device's name (its own pick if none was given).
  for (UniqueFd& q : other_queues) {
    ifreq queue_ifr = ifr;
    if (absl::Status s = SetIff(q.get(), queue_ifr, options); !s.ok()) {
      return s;
    }
  }
  // Our own steering, on a TAP we made: there queue 0 is our first fd (a
  // persistent one may have had another process's queue attached first).
  // Without the privilege to load it, the kernel's steering stays.
  const char* steer_env = std::getenv("NETSTACK_TAP_STEERING");
  bool steered = false;
  if (!other_queues.empty() && !existed &&
      !(steer_env != nullptr && std::string_view(steer_env) == "0")) {
    UniqueFd prog(LoadSteeringProgram(
        static_cast<uint32_t>(1 + other_queues.size())));
    int prog_fd = prog.get();
    steered = prog.valid() &&
              ::ioctl(tun.get(), TUNSETSTEERINGEBPF, &prog_fd) == 0;
  }
  std::string ifname(ifr.ifr_name, strnlen(ifr.ifr_name, IFNAMSIZ));
  auto ep = Setup(std::move(tun), std::move(other_queues), std::move(ifname),
                  options.netns, ctl.get(), options, pool);
  if (ep.ok()) (*ep)->steered_ = steered;
  return ep;
}

absl::StatusOr<std::unique_ptr<TapEndpoint>> TapEndpoint::FromFd(
    int fd, const TapOptions& options, buffer::ChunkPool& pool) {
  UniqueFd tun(fd);
  const std::string fd_label = absl::StrCat("TAP fd ", fd);
  if (absl::Status s = ValidateOptions(options); !s.ok()) return s;
  if (options.mtu == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        fd_label, ": an adopted TAP needs its MTU given (the interface may "
                  "sit in a namespace we cannot reach to ask)"));
  }
  if (options.tx_queue_len != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        fd_label, ": the transmit queue of an adopted TAP is its owner's to "
                  "set"));
  }
  ifreq ifr;
  std::memset(&ifr, 0, sizeof(ifr));
  if (::ioctl(tun.get(), TUNGETIFF, &ifr) < 0) {
    return ErrnoStatus(errno, absl::StrCat(fd_label, " is not an attached "
                                           "TUN/TAP device (TUNGETIFF)"));
  }
  std::string ifname(ifr.ifr_name, strnlen(ifr.ifr_name, IFNAMSIZ));
  const std::string label = absl::StrCat(fd_label, " ('", ifname, "')");
  if ((ifr.ifr_flags & (IFF_TUN | IFF_TAP)) != IFF_TAP) {
    return absl::InvalidArgumentError(
        absl::StrCat(label, " is a TUN device; a TAP (Ethernet frames) is "
                            "needed"));
  }
  if ((ifr.ifr_flags & IFF_NO_PI) == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        label, " was opened without IFF_NO_PI: frames would carry a "
               "packet-information prefix"));
  }
  const bool want_vnet = options.vnet_hdr || options.host_gso;
  if (want_vnet && (ifr.ifr_flags & IFF_VNET_HDR) == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        label, " was opened without IFF_VNET_HDR, which host GSO and "
               "offloads need: open it with IFF_VNET_HDR, or turn GSO off"));
  }
  if (!want_vnet && (ifr.ifr_flags & IFF_VNET_HDR) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        label, " was opened with IFF_VNET_HDR: every frame carries a "
               "virtio-net header, so ask for vnet_hdr or host GSO"));
  }
  const int flags = ::fcntl(tun.get(), F_GETFL);
  if (flags < 0 || ::fcntl(tun.get(), F_SETFL, flags | O_NONBLOCK) < 0) {
    return ErrnoStatus(errno, absl::StrCat(label, ": O_NONBLOCK"));
  }
  return Setup(std::move(tun), {}, std::move(ifname), absl::StrCat("fd ", fd),
               /*ctl=*/-1, options, pool);
}

absl::StatusOr<std::unique_ptr<TapEndpoint>> TapEndpoint::Setup(
    UniqueFd tun, std::vector<UniqueFd> other_queues, std::string ifname,
    std::string netns, int ctl, const TapOptions& options,
    buffer::ChunkPool& pool) {
  const std::string label = ctl >= 0 ? TapLabel(ifname, netns)
                                     : absl::StrCat("TAP '", ifname, "' (",
                                                    netns, ")");
  const bool vnet_hdr = options.vnet_hdr || options.host_gso;
  unsigned offloads =
      options.offloads | (options.host_gso ? kHostGsoOffloads : 0u);
  // USO is an addition: a kernel without it still gets TSO (below).
  const char* uso_env = std::getenv("NETSTACK_TAP_USO");
  const bool uso = options.host_gso && options.uso &&
                   !(uso_env != nullptr && std::string_view(uso_env) == "0");
  const unsigned uso_flags = uso ? (kTunUso4 | kTunUso6) : 0u;
  size_t vnet_len = 0;
  if (vnet_hdr) {
    int hdr_len = static_cast<int>(kVnetHdrMrgLen);
    if (::ioctl(tun.get(), TUNSETVNETHDRSZ, &hdr_len) < 0) {
      return ErrnoStatus(errno, absl::StrCat(label, ": TUNSETVNETHDRSZ"));
    }
    if (options.host_gso) {
      // FillVnetHeader writes little-endian fields; say so, so that the
      // TAP reads them that way on a big-endian host too.
      int le = 1;
      if (::ioctl(tun.get(), TUNSETVNETLE, &le) < 0) {
        return ErrnoStatus(errno, absl::StrCat(label, ": TUNSETVNETLE"));
      }
    }
    vnet_len = kVnetHdrMrgLen;
  }
  // Also without a header (offloads 0): a persistent TAP keeps the
  // offloads its last user set, and would go on sending TSO frames.
  if (uso_flags != 0 &&
      ::ioctl(tun.get(), TUNSETOFFLOAD,
              static_cast<unsigned long>(offloads | uso_flags)) == 0) {
    offloads |= uso_flags;
  } else if (::ioctl(tun.get(), TUNSETOFFLOAD,
                     static_cast<unsigned long>(offloads)) < 0) {
    return ErrnoStatus(errno, absl::StrCat(label, ": TUNSETOFFLOAD 0x",
                                           absl::Hex(offloads)));
  }

  const bool gso_rx = (offloads & kGsoOffloads) != 0;
  // A frame must fit its slot after the pad. The kernel cuts a frame that
  // does not fit the read buffer and returns the buffer's size without a
  // flag, so each read ends with one spare byte outside the slot: a read
  // that reaches it was cut short. 65520, pasta's and slirp4netns's MTU,
  // fills a chunk exactly with an untagged frame; near that size a frame
  // with a VLAN tag no longer fits and is dropped as cut short.
  constexpr uint32_t kUntaggedHeader = 14;
  constexpr uint32_t kMaxMtu = buffer::kChunkSize - kRxPad - kUntaggedHeader;
  uint32_t mtu = options.mtu;
  if (mtu != 0) {
    if (mtu < 68 || mtu > kMaxMtu) {
      return absl::InvalidArgumentError(
          absl::StrCat(label, ": MTU ", mtu, " is outside 68..", kMaxMtu,
                       " (a frame must fit one 64 KiB receive chunk)"));
    }
    // An adopted fd's interface is its owner's to configure (ctl < 0).
    if (ctl >= 0) {
      if (absl::Status s = SetInterfaceMtu(ctl, ifname, mtu); !s.ok()) {
        return absl::Status(s.code(), absl::StrCat(label, ": ", s.message()));
      }
    }
  } else {
    absl::StatusOr<uint32_t> got = InterfaceMtu(ctl, ifname);
    if (!got.ok()) {
      return absl::Status(got.status().code(),
                          absl::StrCat(label, ": ", got.status().message()));
    }
    mtu = *got;
    if (mtu > kMaxMtu) {
      return absl::InvalidArgumentError(
          absl::StrCat(label, ": interface MTU ", mtu, " is above ", kMaxMtu,
                       "; pass TapOptions::mtu to lower it"));
    }
  }

  if (options.tx_queue_len != 0) {
    if (absl::Status s =
            SetInterfaceTxQueueLen(ctl, ifname, options.tx_queue_len);
        !s.ok()) {
      return absl::Status(s.code(), absl::StrCat(label, ": ", s.message()));
    }
  }

  const uint32_t slot_size =
      gso_rx ? buffer::kChunkSize
             : std::min<uint32_t>(buffer::kChunkSize,
                                  kRxPad + mtu + kEthernetOverhead);
  // A GSO frame may be 65535 bytes (the kernel segments from 65536 on,
  // gso_max_size): a USO frame of a 65493-byte IPv4 payload is. With a
  // pad it would not fit a chunk, so whole-chunk slots have none.
  const uint32_t rx_pad = gso_rx ? 0 : kRxPad;
  const uint32_t max_frame = slot_size - rx_pad;

  LinkCapabilities caps;
  caps.mtu = mtu;
  caps.gso_max_size = options.host_gso ? options.gso_max_size : 0;
  // USO toward the guest too. Writing a UDP_L4 frame needs no TUN_F_USO
  // flag (they govern only what the kernel hands us; Linux 6.18 takes the
  // frame without them), but the kernels that accept the flags (6.2 on)
  // are the ones whose virtio_net_hdr_to_skb knows UDP_L4: older ones
  // refuse the write (EINVAL), so the flags' fate decides.
  caps.udp_gso = (offloads & uso_flags) != 0;
  // Every TCP frame may leave with NEEDS_CSUM (CHECKSUM_PARTIAL to the
  // kernel), not only super-segments: with host GSO, whose TUNSETVNETLE
  // makes the kernel read our little-endian csum_start on any host.
  caps.tx_checksum_offload = options.host_gso;
  caps.vnet_hdr = vnet_hdr;
  caps.mac =
      options.mac
          ? *options.mac
          : DeriveLocalMac(absl::StrCat("tap:", netns, "/", ifname));
  // Several queues: one fd for the event loop, readable while any is.
  UniqueFd queues_epoll;
  if (!other_queues.empty()) {
    queues_epoll.reset(::epoll_create1(EPOLL_CLOEXEC));
    if (!queues_epoll.valid()) {
      return ErrnoStatus(errno, absl::StrCat(label, ": epoll_create1"));
    }
    // Each queue by its index: 0 the first, q + 1 other_queues[q].
    auto watch = [&](int fd, uint32_t index) {
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.u32 = index;
      return ::epoll_ctl(queues_epoll.get(), EPOLL_CTL_ADD, fd, &ev) == 0;
    };
    bool watched = watch(tun.get(), 0);
    for (size_t q = 0; q < other_queues.size(); ++q) {
      watched = watched &&
                watch(other_queues[q].get(), static_cast<uint32_t>(q + 1));
    }
    if (!watched) return ErrnoStatus(errno, absl::StrCat(label, ": epoll_ctl"));
  }
  return std::unique_ptr<TapEndpoint>(new TapEndpoint(
      std::move(tun), std::move(other_queues), std::move(queues_epoll),
      std::move(ifname), std::move(netns), caps, vnet_len, max_frame, slot_size,
      options.rx_batch, pool));
}

namespace {
// Frames each queue but the first gets per OnReadable(): together a
// quarter of the first queue's batch, at least one each.
size_t OtherQueueShare(size_t rx_batch, size_t other_queues) {
  if (other_queues == 0) return 0;
  return std::max<size_t>(1, rx_batch / 4 / other_queues);
}
}  // namespace

TapEndpoint::TapEndpoint(UniqueFd fd, std::vector<UniqueFd> other_queues,
                         UniqueFd queues_epoll, std::string ifname,
                         std::string netns, const LinkCapabilities& caps,
                         size_t vnet_len, uint32_t max_frame,
                         uint32_t slot_size, size_t rx_batch,
                         buffer::ChunkPool& pool)
    : fd_(std::move(fd)),
      other_queues_(std::move(other_queues)),
      queues_epoll_(std::move(queues_epoll)),
      other_queue_share_(OtherQueueShare(rx_batch, other_queues_.size())),
      ifname_(std::move(ifname)),
      netns_(std::move(netns)),
      caps_(caps),
      vnet_len_(vnet_len),
      max_frame_(max_frame),
      rx_batch_(rx_batch),
      slots_(pool, slot_size,
             rx_batch + other_queue_share_ * other_queues_.size()),
      scratch_(new uint8_t[slots_.slot_size()]),
      frames_(rx_batch + other_queue_share_ * other_queues_.size()) {}

std::string TapEndpoint::Name() const {
  std::string name = netns_.empty()
                         ? absl::StrCat("tap:", ifname_)
                         : absl::StrCat("tap:", ifname_, "@", netns_);
  if (!other_queues_.empty()) {
    absl::StrAppend(&name, " (", queue_count(), " queues)");
  }
  return name;
}

size_t TapEndpoint::Transmit(buffer::PacketChain& chain, Instant now) {
  size_t sent = 0;
  while (!chain.empty()) {
    const buffer::PacketBuffer& p = chain.front();
    const size_t size = p.size();
    // Writes the header: GSO_NONE and no flags for a complete frame, or
    // the host GSO request for a super-segment.
    const TxVerdict verdict = CheckTxFrame(p, caps_.mtu, caps_.gso_max_size,
                                           vnet_len_ > 0 ? tx_vnet_ : nullptr);
    if (verdict != TxVerdict::kOk) {
      ++(verdict == TxVerdict::kRunt     ? fd_stats_.tx_runt
         : verdict == TxVerdict::kBadGso ? fd_stats_.tx_bad_gso
                                         : fd_stats_.tx_oversize);
      ++stats_.tx_dropped;
      chain.PopFront();
      continue;
    }
    size_t iovcnt = 0;
    if (vnet_len_ > 0) tx_iov_[iovcnt++] = iovec{tx_vnet_, vnet_len_};
    iovcnt += p.ToIovecs(
        std::span<iovec>(tx_iov_ + iovcnt, std::size(tx_iov_) - iovcnt));
    ssize_t n;
    do {
      n = ::writev(fd_.get(), tx_iov_, static_cast<int>(iovcnt));
      ++stats_.tx_syscalls;
    } while (n < 0 && errno == EINTR);
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        ++fd_stats_.tx_blocked;
        break;
      }
      // EIO (device down), EINVAL (rejected frame): the frame is lost.
      ++fd_stats_.tx_errors;
      ++stats_.tx_dropped;
      chain.PopFront();
      continue;
    }
    ++stats_.tx_frames;
    fd_stats_.tx_gso += p.is_gso();
    stats_.tx_bytes += size;
    ++sent;
    chain.PopFront();
  }
  return sent;
}

ssize_t TapEndpoint::ReadFrame(int fd, uint8_t* buf, size_t cap) {
  ssize_t n;
  do {
    // The spare byte catches a frame larger than the slot (see Open).
    iovec iov[3] = {{rx_vnet_, vnet_len_}, {buf, cap}, {&rx_spare_, 1}};
    if (vnet_len_ > 0) {
      n = ::readv(fd, iov, 3);
    } else {
      n = ::readv(fd, iov + 1, 2);
    }
    ++stats_.rx_syscalls;
  } while (n < 0 && errno == EINTR);
  return n;
}

void TapEndpoint::OnReadable(Instant now) {
  if (other_queues_.empty()) {
    bool at_limit = false;
    const size_t kept = ReadQueue(fd_.get(), rx_batch_, 0, &at_limit);
    stats_.rx_batch_limit_hits += at_limit;
    slots_.Consume(kept);
    Deliver(kept, now);
    return;
  }
  // The first queue first, read directly, while no other queue had frames
  // lately: the flows we have answered are steered there, so in a
  // request/response exchange it is the only queue with frames, and
  // asking epoll which queues are ready would cost a system call a turn
  // to learn nothing (issue #34: one of a TCP_RR transaction's 7.4). The
  // others are asked for when the first had nothing (the wake-up was
  // theirs), and every kOtherQueuesEvery turns, so that a new flow's SYN
  // waits a few turns at most. Once they had frames (new connections,
  // TCP_CRR), epoll is asked first every turn again, until it finds only
  // the first queue ready.
  size_t kept = 0;
  bool first_read = false;
  if (!other_queues_busy_ &&
      ++turns_without_other_queues_ < kOtherQueuesEvery) {
    bool at_limit = false;
    kept = ReadQueue(fd_.get(), rx_batch_, 0, &at_limit);
    stats_.rx_batch_limit_hits += at_limit;
    if (kept > 0 || at_limit) {
      slots_.Consume(kept);
      Deliver(kept, now);
      return;
    }
    first_read = true;  // empty: the others woke us
  }
  turns_without_other_queues_ = 0;
  // Which queues have frames: one system call, not an empty read of each.
  epoll_event ready[kMaxQueues];
  int n;
  do {
    n = ::epoll_wait(queues_epoll_.get(), ready,
                     static_cast<int>(queue_count()), 0);
  } while (n < 0 && errno == EINTR);
  ++stats_.rx_syscalls;
  other_queues_busy_ = false;
  for (int i = 0; i < n; ++i) {
    if (ready[i].data.u32 != 0) {
      other_queues_busy_ = true;
      continue;
    }
    if (first_read) continue;
    bool at_limit = false;
    kept = ReadQueue(fd_.get(), rx_batch_, 0, &at_limit);
    stats_.rx_batch_limit_hits += at_limit;
  }
  // The others, a share each. Reading a share is not yet a busy link: a
  // new flow's first frame (its SYN) comes on one of these queues, alone.
  // A queue that still has frames after its share, two turns running, is
  // (a flood keeps them full turn after turn; a burst of new connections
  // such as TCP_CRR's leaves one frame behind now and then). One more
  // epoll_wait tells, only when some queue was read to its share.
  uint32_t read_to_share = 0;  // bit q: other_queues_[q]
  for (int i = 0; i < n; ++i) {
    const uint32_t index = ready[i].data.u32;
    if (index == 0) continue;
    const size_t before = kept;
    bool at_share = false;
    kept = ReadQueue(other_queues_[index - 1].get(), other_queue_share_, kept,
                     &at_share);
    stats_.rx_frames_other_queues += kept - before;
    if (at_share) read_to_share |= 1u << (index - 1);
  }
  uint32_t still_full = 0;
  if (read_to_share != 0) {
    do {
      n = ::epoll_wait(queues_epoll_.get(), ready,
                       static_cast<int>(queue_count()), 0);
    } while (n < 0 && errno == EINTR);
    ++stats_.rx_syscalls;
    for (int i = 0; i < n; ++i) {
      if (ready[i].data.u32 == 0) continue;
      still_full |= read_to_share & (1u << (ready[i].data.u32 - 1));
    }
  }
  // With our steering the other queues carry only SYNs: one there is a
  // new connection, not a flow that will send its next frames there too,
  // so the next turn reads the first queue directly again. Only a queue
  // that still has frames after its share (a flood) keeps epoll asked
  // first.
  if (steered_) other_queues_busy_ = still_full != 0;
  stats_.rx_batch_limit_hits += std::popcount(still_full & still_full_);
  still_full_ = still_full;
  slots_.Consume(kept);
  Deliver(kept, now);
}

size_t TapEndpoint::ReadQueue(int fd, size_t limit, size_t kept,
                              bool* at_limit) {
  // Whole-chunk slots have no pad (see Setup).
  const uint32_t pad = max_frame_ == buffer::kChunkSize ? 0 : kRxPad;
  const size_t cap = max_frame_;
  size_t i = 0;
  for (; i < limit; ++i) {
    // A frame is read into the next free slot; a dropped frame leaves the
    // slot free for the next read. Slots are prepared one at a time, so a
    // short batch does not take a second chunk.
    const bool have_slot = slots_.Prepare(kept + 1) > kept;
    uint8_t* buf = have_slot ? slots_.Slot(kept) + pad : scratch_.get();
    const ssize_t n = ReadFrame(fd, buf, cap);
    if (n < 0) {
      if (errno != EAGAIN && errno != EWOULDBLOCK) ++fd_stats_.rx_errors;
      break;
    }
    if (static_cast<size_t>(n) < vnet_len_ + kMinFrameLen) {
      ++fd_stats_.rx_runt;
      ++stats_.rx_dropped;
      continue;
    }
    const size_t len = static_cast<size_t>(n) - vnet_len_;
    if (len > max_frame_) {
      ++fd_stats_.rx_truncated;
      ++stats_.rx_dropped;
      continue;
    }
    if (!have_slot || receiver_ == nullptr) {
      ++(have_slot ? fd_stats_.rx_no_receiver : fd_stats_.rx_no_buffer);
      ++stats_.rx_dropped;
      continue;
    }
    VnetRxInfo info;
    if (vnet_len_ > 0) {
      // The header is the kernel's, rebuilt from what a guest with
      // CAP_NET_RAW may have written itself (PACKET_VNET_HDR): Linux
      // passes a GSO frame with gso_size past the MTU or an IP length
      // that disagrees with the frame (tap_endpoint_test). UDP_L4 frames
      // come only where we offered USO (TUN_F_USO4/6), so they pass the
      // same checks for UDP.
      const VnetRxVerdict verdict = ValidateVnetRx(
          std::span<const uint8_t>(rx_vnet_, vnet_len_),
          std::span<const uint8_t>(buf, len), caps_.mtu, /*udp_l4=*/true);
      if (verdict != VnetRxVerdict::kOk) {
        ++rx_bad_vnet_[static_cast<size_t>(verdict)];
        ++stats_.rx_dropped;
        continue;
      }
      info = ParseVnetHeader(rx_vnet_);
    }
    fd_stats_.rx_checksum_partial += info.checksum_partial;
    fd_stats_.rx_checksum_verified += info.checksum_verified;
    fd_stats_.rx_gso += info.gso;
    frames_[kept] =
        InboundFrame{slots_.View(kept, pad, static_cast<uint32_t>(len)),
                     info.checksum_verified, info.checksum_partial,
                     info.udp_gso_size};
    ++stats_.rx_frames;
    stats_.rx_bytes += len;
    ++kept;
  }
  *at_limit = i == limit;
  return kept;
}

uint64_t TapEndpoint::rx_bad_vnet_total() const {
  uint64_t total = 0;
  for (uint64_t n : rx_bad_vnet_) total += n;
  return total;
}

std::string TapEndpoint::FormatVnetCounters() const {
  std::string out =
      absl::StrCat("link.tap.rx_bad_vnet_hdr ", rx_bad_vnet_total(), "\n");
  for (size_t i = 0; i < rx_bad_vnet_.size(); ++i) {
    if (rx_bad_vnet_[i] == 0) continue;
    absl::StrAppend(&out, "link.tap.rx_bad_vnet_hdr.",
                    VnetRxVerdictName(static_cast<VnetRxVerdict>(i)), " ",
                    rx_bad_vnet_[i], "\n");
  }
  return out;
}

void TapEndpoint::Deliver(size_t count, Instant now) {
  if (count == 0) return;
  receiver_->DeliverFrames(std::span<InboundFrame>(frames_.data(), count), now);
  // Drop our references now, so chunks recycle once the receiver is done.
  for (size_t i = 0; i < count; ++i) frames_[i] = InboundFrame{};
}

}  // namespace netstack::link
