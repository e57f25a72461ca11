#include "link/fd_util.h"

#include <fcntl.h>
#include <net/if.h>
#include <net/if_arp.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "netstack/base/dcheck.h"

namespace netstack::link {

absl::StatusOr<DirEntryRef> DirEntryRef::Of(const std::string& path) {
  const size_t slash = path.rfind('/');
  std::string dir = slash == std::string::npos ? "."
                    : slash == 0              ? "/"
                                              : path.substr(0, slash);
  std::string name =
      slash == std::string::npos ? path : path.substr(slash + 1);
  if (name.empty() || name == "." || name == "..") {
    return absl::InvalidArgumentError(
        absl::StrCat("'", path, "' does not name a file"));
  }
  UniqueFd fd(::open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!fd.valid()) {
    return ErrnoStatus(errno, absl::StrCat("open directory '", dir, "'"));
  }
  DirEntryRef e;
  e.dir_ = std::move(fd);
  e.name_ = std::move(name);
  e.path_ = path;
  return e;
}

int DirEntryRef::Unlink() const {
  if (!dir_.valid()) {
    errno = EBADF;
    return -1;
  }
  return ::unlinkat(dir_.get(), name_.c_str(), 0);
}

int DirEntryRef::Stat(struct stat* st) const {
  if (!dir_.valid()) {
    errno = EBADF;
    return -1;
  }
  return ::fstatat(dir_.get(), name_.c_str(), st, 0);
}

void UniqueFd::reset(int fd) {
  if (fd_ >= 0) {
    // close() may fail with EINTR, but Linux releases the fd anyway;
    // retrying could close an fd another thread just opened.
    ::close(fd_);
  }
  fd_ = fd;
}

absl::Status ErrnoStatus(int err, std::string_view what) {
  // ErrnoToStatus appends ": " and strerror(err) itself.
  return absl::ErrnoToStatus(err, std::string(what));
}

std::string NetnsLabel(const std::string& netns) {
  if (netns.empty()) return "the current netns";
  return absl::StrCat("netns '", netns, "'");
}

absl::Status ValidateInterfaceName(const std::string& name) {
  if (name.empty()) {
    return absl::InvalidArgumentError("interface name is empty");
  }
  if (name.size() >= IFNAMSIZ) {
    return absl::InvalidArgumentError(absl::StrCat(
        "interface name '", name, "' is longer than ", IFNAMSIZ - 1, " bytes"));
  }
  if (name == "." || name == "..") {
    return absl::InvalidArgumentError(
        absl::StrCat("interface name '", name, "' is not allowed"));
  }
  for (char c : name) {
    if (c == '/' || c == ':' || c == ' ' || c == '\t' || c == '\n' ||
        c == '\0') {
      return absl::InvalidArgumentError(absl::StrCat(
          "interface name '", name, "' contains '/', ':' or whitespace"));
    }
  }
  return absl::OkStatus();
}

namespace {

// An ifreq naming `ifname`; the caller validated the length.
ifreq NamedIfreq(const std::string& ifname) {
  ifreq ifr;
  std::memset(&ifr, 0, sizeof(ifr));
  std::memcpy(ifr.ifr_name, ifname.data(),
              std::min(ifname.size(), sizeof(ifr.ifr_name) - 1));
  return ifr;
}

absl::Status IfreqError(int err, const char* op, const std::string& ifname) {
  if (err == ENODEV) {
    return absl::NotFoundError(
        absl::StrCat("interface '", ifname, "' does not exist"));
  }
  return ErrnoStatus(err, absl::StrCat(op, " on interface '", ifname, "'"));
}

}  // namespace

absl::StatusOr<int> InterfaceIndex(int sock_fd, const std::string& ifname) {
  if (absl::Status s = ValidateInterfaceName(ifname); !s.ok()) return s;
  ifreq ifr = NamedIfreq(ifname);
  if (::ioctl(sock_fd, SIOCGIFINDEX, &ifr) < 0) {
    return IfreqError(errno, "SIOCGIFINDEX", ifname);
  }
  return ifr.ifr_ifindex;
}

absl::StatusOr<uint32_t> InterfaceMtu(int sock_fd, const std::string& ifname) {
  if (absl::Status s = ValidateInterfaceName(ifname); !s.ok()) return s;
  ifreq ifr = NamedIfreq(ifname);
  if (::ioctl(sock_fd, SIOCGIFMTU, &ifr) < 0) {
    return IfreqError(errno, "SIOCGIFMTU", ifname);
  }
  if (ifr.ifr_mtu <= 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("interface '", ifname, "' has MTU ", ifr.ifr_mtu));
  }
  return static_cast<uint32_t>(ifr.ifr_mtu);
}

absl::Status SetInterfaceMtu(int sock_fd, const std::string& ifname,
                             uint32_t mtu) {
  if (absl::Status s = ValidateInterfaceName(ifname); !s.ok()) return s;
  ifreq ifr = NamedIfreq(ifname);
  ifr.ifr_mtu = static_cast<int>(mtu);
  if (::ioctl(sock_fd, SIOCSIFMTU, &ifr) < 0) {
    const int err = errno;
    if (err == EINVAL) {
      return absl::InvalidArgumentError(
          absl::StrCat("interface '", ifname, "' does not accept MTU ", mtu));
    }
    return IfreqError(err, "SIOCSIFMTU", ifname);
  }
  return absl::OkStatus();
}

absl::Status SetInterfaceTxQueueLen(int sock_fd, const std::string& ifname,
                                    uint32_t frames) {
  if (absl::Status s = ValidateInterfaceName(ifname); !s.ok()) return s;
  if (frames == 0 || frames > static_cast<uint32_t>(INT32_MAX)) {
    return absl::InvalidArgumentError(
        absl::StrCat("transmit queue length ", frames, " is out of range"));
  }
  ifreq ifr = NamedIfreq(ifname);
  ifr.ifr_qlen = static_cast<int>(frames);
  if (::ioctl(sock_fd, SIOCSIFTXQLEN, &ifr) < 0) {
    return IfreqError(errno, "SIOCSIFTXQLEN", ifname);
  }
  return absl::OkStatus();
}

absl::StatusOr<wire::MacAddress> InterfaceMac(int sock_fd,
                                              const std::string& ifname) {
  if (absl::Status s = ValidateInterfaceName(ifname); !s.ok()) return s;
  ifreq ifr = NamedIfreq(ifname);
  if (::ioctl(sock_fd, SIOCGIFHWADDR, &ifr) < 0) {
    return IfreqError(errno, "SIOCGIFHWADDR", ifname);
  }
  if (ifr.ifr_hwaddr.sa_family != ARPHRD_ETHER) {
    return absl::InvalidArgumentError(
        absl::StrCat("interface '", ifname, "' is not an Ethernet device (",
                     "hardware type ", ifr.ifr_hwaddr.sa_family, ")"));
  }
  return wire::MacAddress::FromBytes(
      reinterpret_cast<const uint8_t*>(ifr.ifr_hwaddr.sa_data));
}

wire::MacAddress DeriveLocalMac(std::string_view seed) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a 64-bit offset basis
  for (char c : seed) {
    h ^= static_cast<uint8_t>(c);
    h *= 0x100000001b3ull;  // FNV prime
  }
  wire::MacAddress mac;
  for (size_t i = 0; i < mac.bytes.size(); ++i) {
    mac.bytes[i] = static_cast<uint8_t>(h >> (8 * i));
  }
  // Locally administered (bit 1), unicast (bit 0 clear): IEEE 802 section
  // 8.2.2; such an address never collides with a vendor-assigned one.
  mac.bytes[0] = static_cast<uint8_t>((mac.bytes[0] & 0xfc) | 0x02);
  return mac;
}

bool FrameFitsMtu(const buffer::PacketBuffer& p, uint32_t mtu) {
  const size_t size = p.size();
  if (size < kMinFrameLen) return false;
  if (size <= size_t{mtu} + 14) return true;
  if (size > size_t{mtu} + 18) return false;
  // Bytes 12 and 13 (the outer EtherType), wherever they are.
  uint8_t type[2];
  size_t want = 12;
  size_t got = 0;
  auto take = [&](std::span<const uint8_t> piece) {
    for (uint8_t b : piece) {
      if (got == 2) return;
      if (want > 0) {
        --want;
        continue;
      }
      type[got++] = b;
    }
  };
  take(p.headers().data());
  for (const buffer::PayloadView& v : p.payload()) {
    if (got == 2) break;
    if (want >= v.size()) {
      want -= v.size();
      continue;
    }
    take(v.bytes());
  }
  const uint16_t tpid = static_cast<uint16_t>((type[0] << 8) | type[1]);
  return tpid == 0x8100 || tpid == 0x88a8;
}

TxVerdict CheckTxFrame(const buffer::PacketBuffer& p, uint32_t mtu,
                       uint32_t gso_max_size, uint8_t* vnet) {
  if (p.size() < kMinFrameLen) return TxVerdict::kRunt;
  if (!p.is_gso()) {
    if (!FrameFitsMtu(p, mtu)) return TxVerdict::kOversize;
    if (vnet == nullptr) {
      // Only a vnet header can ask the kernel to complete a checksum.
      return p.needs_checksum() ? TxVerdict::kBadGso : TxVerdict::kOk;
    }
    const VnetTxKind kind =
        FillVnetHeader(p, std::span<uint8_t, kVnetHdrLen>(vnet, kVnetHdrLen));
    return kind == VnetTxKind::kMalformed ? TxVerdict::kBadGso
                                          : TxVerdict::kOk;
  }
  if (gso_max_size == 0 || vnet == nullptr) return TxVerdict::kBadGso;
  if (!FrameFitsMtu(p, std::max(mtu, gso_max_size))) {
    return TxVerdict::kOversize;
  }
  if (FillVnetHeader(p, std::span<uint8_t, kVnetHdrLen>(vnet, kVnetHdrLen)) !=
      VnetTxKind::kGso) {
    return TxVerdict::kBadGso;
  }
  return TxVerdict::kOk;
}

namespace {
uint32_t RoundUpSlot(uint32_t size) {
  constexpr uint32_t kAlign = 64;  // one cache line
  uint32_t rounded = (size + kAlign - 1) / kAlign * kAlign;
  if (rounded > buffer::kChunkSize || rounded == 0) {
    rounded = buffer::kChunkSize;
  }
  return rounded;
}
}  // namespace

RxSlots::RxSlots(buffer::ChunkPool& pool, uint32_t slot_size, size_t max_batch)
    : pool_(pool),
      slot_size_(RoundUpSlot(slot_size)),
      slots_per_chunk_(buffer::kChunkSize / slot_size_),
      max_batch_(max_batch) {
  // One chunk for the partly used front plus enough for a full batch.
  held_.reserve(max_batch_ / slots_per_chunk_ + 2);
}

std::pair<size_t, uint32_t> RxSlots::Locate(size_t i) const {
  const size_t g = first_slot_ + i;
  return {g / slots_per_chunk_, static_cast<uint32_t>(g % slots_per_chunk_)};
}

size_t RxSlots::Prepare(size_t n) {
  if (n > max_batch_) n = max_batch_;
  // Nobody else holds the front chunk any more: every view into it is
  // gone, so start over at its first slot and keep one hot chunk in use.
  // (Within a batch this cannot move slots already handed out: a kept
  // frame's view holds the front chunk, and slots of dropped frames are
  // reused anyway.)
  if (!held_.empty() && held_.front().ref->refs() == 1) first_slot_ = 0;
  while (held_.size() * slots_per_chunk_ - first_slot_ < n) {
    buffer::ChunkRef ref = pool_.Allocate();
    if (!ref) break;
    uint8_t* base = ref->mutable_data().data();
    // Every frame's view pins at least its slot: TCP charges that much.
    ref->set_slot_size(slot_size_);
    held_.push_back(Held{std::move(ref), base});
  }
  const size_t available = held_.size() * slots_per_chunk_ - first_slot_;
  return available < n ? available : n;
}

uint8_t* RxSlots::Slot(size_t i) {
  const auto [chunk, slot] = Locate(i);
  NETSTACK_DCHECK(chunk < held_.size());
  return held_[chunk].base + size_t{slot} * slot_size_;
}

buffer::PayloadView RxSlots::View(size_t i, uint32_t offset, uint32_t len) {
  const auto [chunk, slot] = Locate(i);
  NETSTACK_DCHECK(chunk < held_.size());
  NETSTACK_DCHECK(uint64_t{offset} + len <= slot_size_);
  return buffer::PayloadView(held_[chunk].ref, slot * slot_size_ + offset, len);
}

void RxSlots::Consume(size_t n) {
  first_slot_ += n;
  NETSTACK_DCHECK(first_slot_ <= held_.size() * slots_per_chunk_);
  size_t drop = first_slot_ / slots_per_chunk_;
  if (drop > held_.size()) drop = held_.size();
  if (drop > 0) {
    held_.erase(held_.begin(), held_.begin() + drop);
    first_slot_ -= drop * slots_per_chunk_;
  }
}

}  // namespace netstack::link
