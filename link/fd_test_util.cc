#include "link/fd_test_util.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "link/fd_util.h"
#include "link/netns.h"
#include "netstack/wire/checksum.h"

namespace netstack::link::testing {
namespace {

constexpr char kPrefix[] = "nst-link-";

}  // namespace

bool IsRoot() { return ::geteuid() == 0; }

absl::Status RunCommand(const std::string& command, std::string* output) {
  const std::string full = absl::StrCat(command, " 2>&1");
  FILE* p = ::popen(full.c_str(), "r");
  if (p == nullptr) return ErrnoStatus(errno, absl::StrCat("popen ", command));
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  const int status = ::pclose(p);
  if (output != nullptr) *output = out;
  if (status == -1) return ErrnoStatus(errno, absl::StrCat("pclose ", command));
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return absl::InternalError(
        absl::StrCat("`", command, "` failed (status ", status, "): ", out));
  }
  return absl::OkStatus();
}

void RemoveStaleTestNetns() {
  DIR* dir = ::opendir(kNetnsDir);
  if (dir == nullptr) return;
  std::vector<std::string> stale;
  while (dirent* e = ::readdir(dir)) {
    const std::string name = e->d_name;
    if (name.rfind(kPrefix, 0) != 0) continue;
    const std::string rest = name.substr(std::strlen(kPrefix));
    const size_t dash = rest.find('-');
    int pid = 0;
    if (dash == std::string::npos ||
        !absl::SimpleAtoi(rest.substr(0, dash), &pid)) {
      continue;
    }
    if (pid > 0 && ::kill(pid, 0) != 0 && errno == ESRCH) stale.push_back(name);
  }
  ::closedir(dir);
  for (const std::string& name : stale) {
    (void)RunCommand(absl::StrCat("ip netns del ", name));
  }
}

std::string MissingNetnsName() {
  return absl::StrCat(kPrefix, ::getpid(), "-missing");
}

absl::StatusOr<std::unique_ptr<TestNetns>> TestNetns::Create() {
  static std::atomic<int> counter{0};
  RemoveStaleTestNetns();
  const std::string name = absl::StrCat(kPrefix, ::getpid(), "-", counter++);
  if (absl::Status s = RunCommand(absl::StrCat("ip netns add ", name));
      !s.ok()) {
    return s;
  }
  std::unique_ptr<TestNetns> ns(new TestNetns(name));
  if (absl::Status s = ns->Ip("link set lo up"); !s.ok()) return s;
  if (absl::Status s = ns->Exec(
          "sh -c 'echo 1 > /proc/sys/net/ipv6/conf/all/disable_ipv6 && "
          "echo 1 > /proc/sys/net/ipv6/conf/default/disable_ipv6'");
      !s.ok()) {
    return s;
  }
  return ns;
}

TestNetns::~TestNetns() {
  if (absl::Status s = RunCommand(absl::StrCat("ip netns del ", name_));
      !s.ok()) {
    std::fprintf(stderr, "cleanup: %s\n", std::string(s.message()).c_str());
  }
}

absl::Status TestNetns::Ip(const std::string& args, std::string* output) {
  return RunCommand(absl::StrCat("ip -n ", name_, " ", args), output);
}

absl::Status TestNetns::Exec(const std::string& command, std::string* output) {
  return RunCommand(absl::StrCat("ip netns exec ", name_, " ", command),
                    output);
}

bool WaitReadable(int fd, int timeout_ms) {
  pollfd p{fd, POLLIN, 0};
  int r;
  do {
    r = ::poll(&p, 1, timeout_ms);
  } while (r < 0 && errno == EINTR);
  return r > 0;
}

void CapturingReceiver::DeliverFrames(std::span<InboundFrame> batch,
                                      Instant now) {
  ++batches;
  if (batch.size() > largest_batch) largest_batch = batch.size();
  for (const InboundFrame& f : batch) {
    CapturedFrame c;
    const auto b = f.frame.bytes();
    c.bytes.assign(b.begin(), b.end());
    if (keep_views) c.view = f.frame;
    c.checksum_verified = f.checksum_verified;
    c.checksum_partial = f.checksum_partial;
    frames.push_back(std::move(c));
    if (on_frame) on_frame(frames.back());
  }
}

std::optional<size_t> WaitForFrame(
    LinkEndpoint& ep, CapturingReceiver& rx,
    const std::function<bool(const CapturedFrame&)>& pred, size_t from,
    int timeout_ms) {
  const absl::Time deadline = absl::Now() + absl::Milliseconds(timeout_ms);
  size_t next = from;
  for (;;) {
    for (; next < rx.frames.size(); ++next) {
      if (pred(rx.frames[next])) return next;
    }
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) return std::nullopt;
    if (WaitReadable(ep.ReadFd(),
                     static_cast<int>(absl::ToInt64Milliseconds(left)) + 1)) {
      ep.OnReadable(absl::Now());
    }
  }
}

buffer::PacketPtr MakeArpPacket(buffer::PacketPool& packets,
                                wire::ArpOperation op, const Host& sender,
                                const Host& target,
                                const wire::MacAddress& eth_dst) {
  buffer::PacketPtr p = packets.Allocate();
  if (!p) return p;
  wire::ArpRepr arp;
  arp.operation = op;
  arp.sender_mac = sender.mac;
  arp.sender_ip = sender.ip;
  arp.target_mac = target.mac;
  arp.target_ip = target.ip;
  auto arp_bytes = p->headers().Prepend(arp.BufferLen());
  arp.Emit(wire::MutableArpPacket(*arp_bytes));
  wire::EthernetRepr eth;
  eth.src = sender.mac;
  eth.dst = eth_dst;
  eth.ethertype = static_cast<uint16_t>(wire::EtherType::kArp);
  auto eth_bytes = p->headers().Prepend(eth.BufferLen());
  eth.Emit(wire::MutableEthernetFrame(*eth_bytes));
  return p;
}

buffer::PayloadView ChunkWriter::Write(std::span<const uint8_t> bytes) {
  if (bytes.size() > buffer::kChunkSize) return {};
  if (!chunk_ || used_ + bytes.size() > buffer::kChunkSize) {
    chunk_ = pool_.Allocate();
    if (!chunk_) return {};
    base_ = chunk_->mutable_data().data();  // fresh: only we hold it
    used_ = 0;
  }
  std::memcpy(base_ + used_, bytes.data(), bytes.size());
  buffer::PayloadView view(chunk_, used_, static_cast<uint32_t>(bytes.size()));
  used_ += static_cast<uint32_t>(bytes.size());
  return view;
}

buffer::PacketPtr MakeUdpPacket(buffer::PacketPool& packets,
                                buffer::ChunkPool& chunks, const Host& src,
                                const Host& dst, uint16_t src_port,
                                uint16_t dst_port,
                                std::span<const uint8_t> payload) {
  ChunkWriter writer(chunks);
  buffer::PayloadView view = writer.Write(payload);
  if (view.size() != payload.size()) return nullptr;
  return MakeUdpPacket(packets, src, dst, src_port, dst_port, view);
}

buffer::PacketPtr MakeUdpPacket(buffer::PacketPool& packets, const Host& src,
                                const Host& dst, uint16_t src_port,
                                uint16_t dst_port,
                                const buffer::PayloadView& payload) {
  buffer::PacketPtr p = packets.Allocate();
  if (!p) return p;
  wire::ChecksumAccumulator payload_sum;
  payload_sum.Add(payload.bytes());
  if (!p->AppendPayload(payload)) return nullptr;

  wire::UdpRepr udp;
  udp.src_port = src_port;
  udp.dst_port = dst_port;
  udp.payload_len = static_cast<uint16_t>(payload.size());
  auto udp_bytes = p->headers().Prepend(udp.BufferLen());
  wire::MutableUdpHeader udp_hdr(*udp_bytes);
  udp.Emit(udp_hdr);
  const uint32_t udp_len = static_cast<uint32_t>(8 + payload.size());
  udp_hdr.FillChecksum(wire::Ipv4PseudoHeaderSum(src.ip, dst.ip, 17, udp_len),
                       payload_sum);

  wire::Ipv4Repr ip;
  ip.src = src.ip;
  ip.dst = dst.ip;
  ip.protocol = 17;
  ip.ttl = 64;
  ip.payload_len = static_cast<uint16_t>(udp_len);
  auto ip_bytes = p->headers().Prepend(ip.BufferLen());
  ip.Emit(wire::MutableIpv4Packet(*ip_bytes));

  wire::EthernetRepr eth;
  eth.src = src.mac;
  eth.dst = dst.mac;
  eth.ethertype = static_cast<uint16_t>(wire::EtherType::kIpv4);
  auto eth_bytes = p->headers().Prepend(eth.BufferLen());
  eth.Emit(wire::MutableEthernetFrame(*eth_bytes));
  return p;
}

std::optional<wire::ArpRepr> ParseArpFrame(std::span<const uint8_t> frame) {
  wire::EthernetFrame eth_view(frame);
  wire::EthernetRepr eth;
  if (wire::EthernetRepr::Parse(eth_view, eth) != wire::WireError::kOk ||
      eth.ethertype != static_cast<uint16_t>(wire::EtherType::kArp)) {
    return std::nullopt;
  }
  wire::ArpRepr arp;
  if (wire::ArpRepr::Parse(wire::ArpPacket(eth_view.Payload()), arp) !=
      wire::WireError::kOk) {
    return std::nullopt;
  }
  return arp;
}

std::optional<ParsedUdp> ParseUdpFrame(std::span<const uint8_t> frame) {
  ParsedUdp out;
  wire::EthernetFrame eth_view(frame);
  if (wire::EthernetRepr::Parse(eth_view, out.eth) != wire::WireError::kOk ||
      out.eth.vlan ||
      out.eth.ethertype != static_cast<uint16_t>(wire::EtherType::kIpv4)) {
    return std::nullopt;
  }
  wire::Ipv4Packet ip_view(eth_view.Payload());
  if (wire::Ipv4Repr::Parse(ip_view, out.ip) != wire::WireError::kOk ||
      out.ip.protocol != 17) {
    return std::nullopt;
  }
  wire::UdpHeader udp_view(ip_view.Payload());
  if (wire::UdpRepr::Parse(udp_view, out.udp) != wire::WireError::kOk) {
    return std::nullopt;
  }
  const auto payload = udp_view.Payload();
  out.payload.assign(payload.begin(), payload.end());
  out.checksum_field = udp_view.Checksum();
  out.pseudo_header_sum =
      wire::Ipv4PseudoHeaderSum(out.ip.src, out.ip.dst, 17, udp_view.Length());
  out.checksum_valid = udp_view.ChecksumValid(out.pseudo_header_sum,
                                              wire::UdpZeroChecksum::kReject);
  return out;
}

absl::StatusOr<int> OpenUdpSocket(const std::string& netns,
                                  const wire::Ipv4Address& ip, uint16_t port) {
  absl::StatusOr<int> fd = OpenInNetns(netns, []() -> absl::StatusOr<int> {
    const int s = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (s < 0) return ErrnoStatus(errno, "socket(AF_INET, SOCK_DGRAM)");
    return s;
  });
  if (!fd.ok()) return fd;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(ip.ToU32());
  if (::bind(*fd, reinterpret_cast<const sockaddr*>(&a), sizeof(a)) != 0) {
    const int err = errno;
    ::close(*fd);
    return ErrnoStatus(err, absl::StrCat("bind ", ip.ToString(), ":", port));
  }
  return fd;
}

absl::Status SendUdp(int fd, const wire::Ipv4Address& ip, uint16_t port,
                     std::span<const uint8_t> payload) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(ip.ToU32());
  if (::sendto(fd, payload.data(), payload.size(), 0,
               reinterpret_cast<const sockaddr*>(&a), sizeof(a)) < 0) {
    return ErrnoStatus(errno, "sendto");
  }
  return absl::OkStatus();
}

std::optional<std::vector<uint8_t>> RecvUdp(int fd, int timeout_ms,
                                            wire::Ipv4Address* from_ip,
                                            uint16_t* from_port) {
  if (!WaitReadable(fd, timeout_ms)) return std::nullopt;
  std::vector<uint8_t> buf(65536);
  sockaddr_in a{};
  socklen_t alen = sizeof(a);
  const ssize_t n = ::recvfrom(fd, buf.data(), buf.size(), MSG_DONTWAIT,
                               reinterpret_cast<sockaddr*>(&a), &alen);
  if (n < 0) return std::nullopt;
  buf.resize(static_cast<size_t>(n));
  if (from_ip != nullptr)
    *from_ip = wire::Ipv4Address::FromU32(ntohl(a.sin_addr.s_addr));
  if (from_port != nullptr) *from_port = ntohs(a.sin_port);
  return buf;
}

std::vector<uint8_t> Bytes(std::string_view s) {
  return std::vector<uint8_t>(s.begin(), s.end());
}

}  // namespace netstack::link::testing
