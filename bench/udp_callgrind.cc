// Relays N UDP datagrams of 1,400 bytes through netstackd's UDP flow
// table (netstack/backend/udp_flows.h), for instruction counting:
//   valgrind --tool=callgrind bench/udp_callgrind g2h 1024
//   valgrind --tool=callgrind bench/udp_callgrind g2h 5120
// The difference of the two totals divided by 4096 is the instructions per
// datagram, with set-up cancelled out (bench/callgrind_udp.sh does this).
//
// The guest is a FakeLink under a Stack with a UdpLayer; the host peer is
// a real UDP socket on 127.0.0.1, in this process. MODE:
//   g2h      the guest sends 32 datagrams per link batch; the peer reads
//            them (recvmmsg).
//   g2h-uso  the guest sends each 32 as one USO super-frame (a TAP that
//            offers USO); trees without USO have no such frame: exit 3.
//   h2g      the peer sends 32 datagrams per sendmmsg; the table reads
//            them and the stack sends each to the guest.
//   h2g-gso  the peer sends each 32 as one UDP_SEGMENT send (QUIC stacks
//            do); a socket with UDP_GRO reads them whole, one without
//            reads 32 datagrams.
//   h2g-uso  the same, to a guest link that takes UDP super-datagrams (a
//            TAP with USO): one super-frame to the guest per read; trees
//            without LinkCapabilities::udp_gso: exit 3.
// FLOWS: "plain" (UdpFlowOptions defaults) or "coalesce" (the Backend's:
// a link batch's datagrams leave together at its end); a tree without
// UdpFlowOptions::coalesce runs "coalesce" as "plain" and says so.
//
// The figure is this process's user-space instructions: the stack, the
// table, the peer's few calls, and the system call wrappers; the kernel's
// own work (its copies included) is not counted. After two warm-up rounds
// the rounds must not allocate (operator new is counted,
// netstack/ip/alloc_counter.h): the program fails if one does.
#include <netinet/in.h>
#include <netinet/udp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "netstack/backend/udp_flows.h"
#include "netstack/eventloop/event_loop.h"
#include "netstack/ip/alloc_counter.h"
#include "netstack/stack/fake_link.h"
#include "netstack/stack/stack.h"
#include "netstack/stack/test_frames.h"
#include "netstack/transport/notifier.h"
#include "netstack/udp/udp_layer.h"
#include "netstack/wire/checksum.h"
#include "netstack/wire/udp.h"

namespace netstack::bench {
namespace {

constexpr size_t kPayload = 1400;
constexpr size_t kBatch = 32;  // datagrams per round

enum class Mode { kG2h, kG2hUso, kH2g, kH2gGso, kH2gUso };

// The same source builds against trees from before issue #34's UDP work
// (no UdpFlowOptions::coalesce, no InboundFrame::udp_gso_size).
template <typename O>
bool SetCoalesce(O& o) {
  if constexpr (requires { o.coalesce = true; }) {
    o.coalesce = true;
    return true;
  } else {
    return false;
  }
}

template <typename F>
bool SetUso(F& f, uint16_t segment_size) {
  if constexpr (requires { f.udp_gso_size = segment_size; }) {
    f.udp_gso_size = segment_size;
    f.checksum_partial = true;  // as a TAP hands a guest's USO send over
    return true;
  } else {
    return false;
  }
}

// The guest's link takes UDP super-datagrams, as a TAP with USO does.
template <typename C>
bool SetLinkUso(C& caps) {
  if constexpr (requires { caps.udp_gso = true; }) {
    caps.udp_gso = true;
    caps.gso_max_size = 65535;  // a TAP's (link/tap_endpoint.cc)
    caps.tx_checksum_offload = true;
    return true;
  } else {
    return false;
  }
}

// A UDP datagram (header, payload of `len` bytes) with a valid checksum.
std::vector<uint8_t> UdpDatagram(const wire::Ipv4Address& src, uint16_t sport,
                                 const wire::Ipv4Address& dst, uint16_t dport,
                                 size_t len) {
  std::vector<uint8_t> out(8 + len, 'u');
  wire::MutableUdpHeader udp(out);
  wire::UdpRepr{sport, dport, static_cast<uint16_t>(len)}.Emit(udp);
  udp.FillChecksum(wire::Ipv4PseudoHeaderSum(src, dst, 17, out.size()));
  return out;
}

class UdpRelay {
 public:
  UdpRelay() : chunks_(512), packets_(4096) {}
  ~UdpRelay() {
    table_.reset();
    if (peer_fd_ >= 0) close(peer_fd_);
  }

  // Returns false (and says why) when set-up fails.
  bool Init(Mode mode, bool coalesce) {
    mode_ = mode;
    loop_ = std::move(*eventloop::EventLoop::Create());
    link::LinkCapabilities caps;
    caps.mtu = 1500;
    caps.mac = *wire::MacAddress::Parse("02:00:00:00:00:02");
    if (mode == Mode::kH2gUso && !SetLinkUso(caps)) {
      std::printf("this tree has no LinkCapabilities::udp_gso (USO)\n");
      return false;
    }
    link_ = std::make_unique<stack::FakeLink>(chunks_, caps);
    stack_ = std::make_unique<stack::Stack>(stack::StackOptions{}, chunks_,
                                            packets_);
    const auto nic = *stack_->AddNic(link_.get(), "bench0");
    (void)stack_->AddAddress(nic, *stack::ParseIpv4Cidr("10.9.0.2/24"));
    // The peer's address is the stack's too, so the guest's datagrams to
    // it reach the UdpLayer, which has no socket there: unmatched, to the
    // table, which relays them to the real 127.0.0.1.
    (void)stack_->AddAddress(nic, *stack::ParseIpv4Cidr("127.0.0.1/32"));
    guest_.mac = *wire::MacAddress::Parse("02:00:00:00:00:01");
    guest_.ip4 = *wire::Ipv4Address::Parse("10.9.0.1");
    const auto ours = *wire::Ipv4Address::Parse("10.9.0.2");
    link_->Inject(stack::testing::ArpRequest(guest_, ours), Now());
    link_->set_record(false);
    udp_ = std::make_unique<udp::UdpLayer>(*stack_, chunks_, packets_,
                                           notifier_, 42);
    backend::UdpFlowOptions options;
    if (coalesce && !SetCoalesce(options)) {
      std::printf("this tree has no UdpFlowOptions::coalesce: plain\n");
    }
    table_ = std::make_unique<backend::UdpFlowTable>(
        *stack_, *udp_, chunks_, packets_, *loop_, std::move(options));

    peer_fd_ = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    const int big = 8 << 20;
    setsockopt(peer_fd_, SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof(big));
    setsockopt(peer_fd_, SOL_SOCKET, SO_SNDBUFFORCE, &big, sizeof(big));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    if (bind(peer_fd_, reinterpret_cast<sockaddr*>(&a), len) != 0 ||
        getsockname(peer_fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      std::perror("peer socket");
      return false;
    }
    const auto lo = *wire::Ipv4Address::Parse("127.0.0.1");
    const uint16_t peer_port = ntohs(a.sin_port);

    // The guest's frames: one datagram each, and one USO super-frame of
    // kBatch datagrams.
    const auto one = stack::testing::WithEthernet(
        guest_.mac, caps.mac, 0x0800,
        stack::testing::Ipv4Packets(
            guest_.ip4, lo, 17, 1,
            UdpDatagram(guest_.ip4, 6000, lo, peer_port, kPayload), 1500)[0]);
    const auto super = stack::testing::WithEthernet(
        guest_.mac, caps.mac, 0x0800,
        stack::testing::Ipv4Packets(
            guest_.ip4, lo, 17, 2,
            UdpDatagram(guest_.ip4, 6000, lo, peer_port, kPayload * kBatch),
            65535)[0]);
    frames_.resize(kBatch);
    for (auto& f : frames_) f = Frame(one);
    uso_ = Frame(super);
    if (mode == Mode::kG2hUso && !SetUso(uso_, kPayload)) {
      std::printf("this tree has no InboundFrame::udp_gso_size (USO)\n");
      return false;
    }

    // The flow: the guest's first datagram opens it; the peer learns the
    // flow's host address from it.
    link_->Deliver(std::span<link::InboundFrame>(frames_.data(), 1), Now());
    (void)loop_->RunOnce(absl::ZeroDuration());
    pollfd p{peer_fd_, POLLIN, 0};
    flow_len_ = sizeof(flow_);
    if (poll(&p, 1, 5000) != 1 ||
        recvfrom(peer_fd_, rx_buf_[0], sizeof(rx_buf_[0]), 0,
                 reinterpret_cast<sockaddr*>(&flow_), &flow_len_) !=
            static_cast<ssize_t>(kPayload)) {
      std::fprintf(stderr, "the flow's first datagram did not arrive\n");
      return false;
    }
    if (connect(peer_fd_, reinterpret_cast<sockaddr*>(&flow_), flow_len_) !=
        0) {
      std::perror("connect");
      return false;
    }
    for (size_t i = 0; i < kBatch; ++i) {
      rx_iov_[i] = iovec{rx_buf_[i], sizeof(rx_buf_[i])};
      rx_msgs_[i].msg_hdr = msghdr{};
      rx_msgs_[i].msg_hdr.msg_iov = &rx_iov_[i];
      rx_msgs_[i].msg_hdr.msg_iovlen = 1;
      tx_iov_[i] = iovec{tx_buf_, kPayload};
      tx_msgs_[i].msg_hdr = msghdr{};
      tx_msgs_[i].msg_hdr.msg_iov = &tx_iov_[i];
      tx_msgs_[i].msg_hdr.msg_iovlen = 1;
    }
    std::memset(tx_buf_, 'h', sizeof(tx_buf_));
    return true;
  }

  // One round of kBatch datagrams; false when they did not all arrive.
  bool Round() {
    switch (mode_) {
      case Mode::kG2h:
      case Mode::kG2hUso: {
        const uint64_t before = table_->counters().datagrams_to_host;
        if (mode_ == Mode::kG2h) {
          link_->Deliver(frames_, Now());
        } else {
          link_->Deliver(std::span<link::InboundFrame>(&uso_, 1), Now());
        }
        (void)loop_->RunOnce(absl::ZeroDuration());  // the turn's end
        if (table_->counters().datagrams_to_host != before + kBatch) {
          return false;
        }
        return DrainPeer();
      }
      case Mode::kH2g:
      case Mode::kH2gGso:
      case Mode::kH2gUso: {
        const uint64_t before = table_->counters().datagrams_to_guest;
        if (!PeerSend()) return false;
        for (int turn = 0; turn < 100 && table_->counters().datagrams_to_guest <
                                             before + kBatch;
             ++turn) {
          (void)loop_->RunOnce(turn == 0 ? absl::ZeroDuration()
                                         : absl::Milliseconds(10));
        }
        stack_->Flush(Now());
        return table_->counters().datagrams_to_guest == before + kBatch;
      }
    }
    return false;
  }

  uint64_t frames_to_guest() const { return link_->Stats().tx_frames; }
  const backend::UdpFlowCounters& counters() const {
    return table_->counters();
  }

 private:
  Instant Now() const { return loop_->Now(); }

  link::InboundFrame Frame(const std::vector<uint8_t>& bytes) {
    buffer::ChunkRef c = chunks_.Allocate();
    std::memcpy(c->mutable_data().data(), bytes.data(), bytes.size());
    link::InboundFrame f;
    f.frame = buffer::PayloadView(std::move(c), 0,
                                  static_cast<uint32_t>(bytes.size()));
    return f;
  }

  // The peer reads the round's kBatch datagrams (the kernel has them by
  // now: loopback delivers within the sender's system call).
  bool DrainPeer() {
    size_t got = 0;
    while (got < kBatch) {
      pollfd p{peer_fd_, POLLIN, 0};
      if (poll(&p, 1, 5000) != 1) return false;
      const int n = recvmmsg(peer_fd_, rx_msgs_, kBatch - got, MSG_DONTWAIT,
                             nullptr);
      if (n <= 0) return false;
      for (int i = 0; i < n; ++i) {
        if (rx_msgs_[i].msg_len != kPayload) return false;
      }
      got += static_cast<size_t>(n);
    }
    return true;
  }

  bool PeerSend() {
    if (mode_ == Mode::kH2g) {
      return sendmmsg(peer_fd_, tx_msgs_, kBatch, 0) ==
             static_cast<int>(kBatch);
    }
    // One UDP_SEGMENT send of kBatch datagrams.
    alignas(cmsghdr) uint8_t control[CMSG_SPACE(sizeof(uint16_t))] = {};
    iovec iov{tx_buf_, kPayload * kBatch};
    msghdr m{};
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    m.msg_control = control;
    m.msg_controllen = sizeof(control);
    cmsghdr* c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_UDP;
    c->cmsg_type = UDP_SEGMENT;
    c->cmsg_len = CMSG_LEN(sizeof(uint16_t));
    const uint16_t size = kPayload;
    std::memcpy(CMSG_DATA(c), &size, sizeof(size));
    return sendmsg(peer_fd_, &m, 0) ==
           static_cast<ssize_t>(kPayload * kBatch);
  }

  Mode mode_ = Mode::kG2h;
  buffer::ChunkPool chunks_;
  buffer::PacketPool packets_;
  std::unique_ptr<eventloop::EventLoop> loop_;
  std::unique_ptr<stack::FakeLink> link_;
  std::unique_ptr<stack::Stack> stack_;
  transport::Notifier notifier_;
  std::unique_ptr<udp::UdpLayer> udp_;
  std::unique_ptr<backend::UdpFlowTable> table_;
  stack::testing::Peer guest_;
  std::vector<link::InboundFrame> frames_;
  link::InboundFrame uso_;
  int peer_fd_ = -1;
  sockaddr_storage flow_{};
  socklen_t flow_len_ = 0;
  mmsghdr rx_msgs_[kBatch];
  iovec rx_iov_[kBatch];
  uint8_t rx_buf_[kBatch][2048];
  mmsghdr tx_msgs_[kBatch];
  iovec tx_iov_[kBatch];
  uint8_t tx_buf_[kPayload * kBatch];
};

int Run(Mode mode, bool coalesce, long datagrams) {
  auto relay = std::make_unique<UdpRelay>();
  if (!relay->Init(mode, coalesce)) return 3;
  // Warm-up: the pools, the socket's and the table's arrays.
  for (int i = 0; i < 2; ++i) {
    if (!relay->Round()) {
      std::fprintf(stderr, "warm-up round lost datagrams\n");
      return 1;
    }
  }
  const uint64_t heap = ip::testing::HeapAllocations();
  for (long i = 0; i < datagrams / static_cast<long>(kBatch); ++i) {
    if (!relay->Round()) {
      std::fprintf(stderr, "round %ld lost datagrams\n", i);
      return 1;
    }
  }
  const uint64_t allocations = ip::testing::HeapAllocations() - heap;
  const auto& c = relay->counters();
  std::printf("%llu datagrams to the host, %llu to the guest (%llu frames), "
              "%llu heap allocations in the measured rounds\n",
              static_cast<unsigned long long>(c.datagrams_to_host),
              static_cast<unsigned long long>(c.datagrams_to_guest),
              static_cast<unsigned long long>(relay->frames_to_guest()),
              static_cast<unsigned long long>(allocations));
  if (allocations != 0) {
    std::fprintf(stderr, "FAIL: %llu heap allocations for %ld datagrams\n",
                 static_cast<unsigned long long>(allocations), datagrams);
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace netstack::bench

int main(int argc, char** argv) {
  using netstack::bench::Mode;
  const std::string usage = std::string("usage: ") + argv[0] +
                            " g2h|g2h-uso|h2g|h2g-gso|h2g-uso "
                            "plain|coalesce "
                            "DATAGRAMS (a multiple of 32)\n";
  if (argc != 4) {
    std::fputs(usage.c_str(), stderr);
    return 2;
  }
  const std::string m = argv[1];
  const std::string flows = argv[2];
  Mode mode;
  if (m == "g2h") {
    mode = Mode::kG2h;
  } else if (m == "g2h-uso") {
    mode = Mode::kG2hUso;
  } else if (m == "h2g") {
    mode = Mode::kH2g;
  } else if (m == "h2g-gso") {
    mode = Mode::kH2gGso;
  } else if (m == "h2g-uso") {
    mode = Mode::kH2gUso;
  } else {
    std::fputs(usage.c_str(), stderr);
    return 2;
  }
  const long datagrams = std::atol(argv[3]);
  if ((flows != "plain" && flows != "coalesce") || datagrams <= 0 ||
      datagrams % 32 != 0) {
    std::fputs(usage.c_str(), stderr);
    return 2;
  }
  return netstack::bench::Run(mode, flows == "coalesce", datagrams);
}
