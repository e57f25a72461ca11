// Test helpers for the fd-based endpoints (testonly): network namespaces
// that clean up after themselves, shell commands, a capturing receiver,
// and ARP/UDP frames built and parsed with netstack/wire.
#ifndef NETSTACK_LINK_FD_TEST_UTIL_H_
#define NETSTACK_LINK_FD_TEST_UTIL_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "netstack/buffer/chunk.h"
#include "netstack/buffer/packet.h"
#include "netstack/link/link_endpoint.h"
#include "netstack/wire/address.h"
#include "netstack/wire/arp.h"
#include "netstack/wire/ethernet.h"
#include "netstack/wire/ipv4.h"
#include "netstack/wire/udp.h"

namespace netstack::link::testing {

// The message root-only tests fail with. CI runs as root: a test that
// cannot run must fail loudly rather than skip and look green.
inline constexpr char kNeedRoot[] =
    "this test needs root (network namespaces, TAP, AF_PACKET); CI runs as "
    "root, so run it as root rather than skipping it";
bool IsRoot();

// Runs `command` with /bin/sh; OK when it exits 0, else an error with the
// exit status and its output (stdout and stderr). `output` gets the output.
absl::Status RunCommand(const std::string& command,
                        std::string* output = nullptr);

// A network namespace named "nst-link-<pid>-<n>", deleted (with every
// virtual interface in it) when the object goes away. Loopback is up and
// IPv6 is disabled in it, so the kernel sends no router solicitations or
// DAD probes that tests would have to filter out.
class TestNetns {
 public:
  static absl::StatusOr<std::unique_ptr<TestNetns>> Create();
  ~TestNetns();
  TestNetns(const TestNetns&) = delete;
  TestNetns& operator=(const TestNetns&) = delete;

  const std::string& name() const { return name_; }
  // `ip -n NAME <args>`.
  absl::Status Ip(const std::string& args, std::string* output = nullptr);
  // `ip netns exec NAME <command>`.
  absl::Status Exec(const std::string& command, std::string* output = nullptr);

 private:
  explicit TestNetns(std::string name) : name_(std::move(name)) {}
  std::string name_;
};

// Deletes "nst-link-<pid>-*" namespaces whose process is gone (left by a
// test that crashed before its destructors ran).
void RemoveStaleTestNetns();

// A name that no namespace has.
std::string MissingNetnsName();

// poll() for POLLIN; false on timeout.
bool WaitReadable(int fd, int timeout_ms);

struct CapturedFrame {
  std::vector<uint8_t> bytes;
  buffer::PayloadView view;  // kept only when keep_views is set
  bool checksum_verified = false;
  bool checksum_partial = false;
};

class CapturingReceiver : public LinkReceiver {
 public:
  void DeliverFrames(std::span<InboundFrame> frames, Instant now) override;

  std::vector<CapturedFrame> frames;
  size_t batches = 0;
  size_t largest_batch = 0;
  bool keep_views = false;
  // Called for every frame after it was recorded.
  std::function<void(const CapturedFrame&)> on_frame;
};

// Waits on ep.ReadFd() and calls OnReadable() until a frame that matches
// `pred` was captured (searching from index `from`), or `timeout_ms`
// passed. Returns its index.
std::optional<size_t> WaitForFrame(
    LinkEndpoint& ep, CapturingReceiver& rx,
    const std::function<bool(const CapturedFrame&)>& pred, size_t from = 0,
    int timeout_ms = 3000);

struct Host {
  wire::MacAddress mac;
  wire::Ipv4Address ip;
};

// Copies payloads one after the other into shared chunks, like a TCP send
// queue, and hands out views of them.
class ChunkWriter {
 public:
  explicit ChunkWriter(buffer::ChunkPool& pool) : pool_(pool) {}
  // An empty view if the pool is exhausted or `bytes` exceeds a chunk.
  buffer::PayloadView Write(std::span<const uint8_t> bytes);

 private:
  buffer::ChunkPool& pool_;
  buffer::ChunkRef chunk_;
  uint8_t* base_ = nullptr;
  uint32_t used_ = 0;
};

// Ethernet + ARP, all in the packet's headers.
buffer::PacketPtr MakeArpPacket(buffer::PacketPool& packets,
                                wire::ArpOperation op, const Host& sender,
                                const Host& target,
                                const wire::MacAddress& eth_dst);
// Ethernet + IPv4 + UDP with a complete checksum. The headers are in the
// packet's headroom; the payload is one view of a fresh chunk, as the
// stack would build it.
buffer::PacketPtr MakeUdpPacket(buffer::PacketPool& packets,
                                buffer::ChunkPool& chunks, const Host& src,
                                const Host& dst, uint16_t src_port,
                                uint16_t dst_port,
                                std::span<const uint8_t> payload);
// The same with the payload given as a view (shared, not copied).
buffer::PacketPtr MakeUdpPacket(buffer::PacketPool& packets, const Host& src,
                                const Host& dst, uint16_t src_port,
                                uint16_t dst_port,
                                const buffer::PayloadView& payload);

std::optional<wire::ArpRepr> ParseArpFrame(std::span<const uint8_t> frame);

struct ParsedUdp {
  wire::EthernetRepr eth;
  wire::Ipv4Repr ip;
  wire::UdpRepr udp;
  std::vector<uint8_t> payload;
  uint16_t checksum_field = 0;
  bool checksum_valid = false;
  // The folded pseudo-header sum, which a CHECKSUM_PARTIAL sender leaves
  // in the checksum field.
  uint16_t pseudo_header_sum = 0;
};
// An untagged IPv4/UDP frame, or nullopt.
std::optional<ParsedUdp> ParseUdpFrame(std::span<const uint8_t> frame);

// A UDP socket created in `netns` and bound to ip:port.
absl::StatusOr<int> OpenUdpSocket(const std::string& netns,
                                  const wire::Ipv4Address& ip, uint16_t port);
// Sends `payload` from `fd` to ip:port.
absl::Status SendUdp(int fd, const wire::Ipv4Address& ip, uint16_t port,
                     std::span<const uint8_t> payload);
// Receives one datagram within `timeout_ms`; nullopt on timeout.
std::optional<std::vector<uint8_t>> RecvUdp(
    int fd, int timeout_ms, wire::Ipv4Address* from_ip = nullptr,
    uint16_t* from_port = nullptr);

std::vector<uint8_t> Bytes(std::string_view s);

}  // namespace netstack::link::testing

#endif  // NETSTACK_LINK_FD_TEST_UTIL_H_
