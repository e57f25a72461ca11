// The vhost-user back-end against a fake front-end written here: guest
// memory is a memfd both sides map, the control socket a socketpair, and
// the test plays QEMU (messages) and the guest's driver (rings).
#include "link/vhost_user_endpoint.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <vector>

#include "gtest/gtest.h"
#include "link/fd_util.h"
#include "link/frame_util.h"
#include "link/link_test_util.h"
#include "link/vhost_user_device.h"
#include "link/vnet_header.h"
#include "link/vnet_header_test_util.h"
#include "netstack/buffer/chunk.h"
#include "netstack/buffer/packet.h"

namespace netstack::link {
namespace {

namespace vu = vhost_user;
using testing::MakePacket;
using testing::RecordingReceiver;
using testing::TestFrame;

constexpr uint64_t kGpaBase = 0x100000;          // guest-physical
constexpr uint64_t kUvaBase = 0x7f0012340000;    // "QEMU's" address of it
constexpr size_t kMemSize = 4 << 20;
constexpr uint32_t kQueueSize = 256;
// Layout of the fake guest memory: the two rings, then buffers.
constexpr size_t kRingArea = 16384;  // per queue: desc, avail, used
constexpr size_t kDescOff = 0, kAvailOff = 4096, kUsedOff = 8192;
constexpr size_t kBufferArea = 2 * kRingArea;

void Put16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); }
void Put32(uint8_t* p, uint32_t v) { std::memcpy(p, &v, 4); }
void Put64(uint8_t* p, uint64_t v) { std::memcpy(p, &v, 8); }
uint16_t Get16(const uint8_t* p) { uint16_t v; std::memcpy(&v, p, 2); return v; }
uint32_t Get32(const uint8_t* p) { uint32_t v; std::memcpy(&v, p, 4); return v; }

constexpr uint64_t kAllFeatures =
    vu::Bit(vu::feature::kCsum) | vu::Bit(vu::feature::kGuestCsum) |
    vu::Bit(vu::feature::kGuestTso4) | vu::Bit(vu::feature::kGuestTso6) |
    vu::Bit(vu::feature::kHostTso4) | vu::Bit(vu::feature::kHostTso6) |
    vu::Bit(vu::feature::kMrgRxbuf) | vu::Bit(vu::feature::kIndirectDesc) |
    vu::Bit(vu::feature::kEventIdx) | vu::Bit(vu::feature::kProtocolFeatures) |
    vu::Bit(vu::feature::kVersion1);

// QEMU and the guest's driver, in one.
class FakeFrontEnd {
 public:
  struct Used {
    uint32_t id;
    uint32_t len;
  };

  FakeFrontEnd() {
    mem_fd_ = UniqueFd(::memfd_create("guest", MFD_CLOEXEC));
    EXPECT_TRUE(mem_fd_.valid());
    EXPECT_EQ(::ftruncate(mem_fd_.get(), kMemSize), 0);
    void* p = ::mmap(nullptr, kMemSize, PROT_READ | PROT_WRITE, MAP_SHARED,
                     mem_fd_.get(), 0);
    EXPECT_NE(p, MAP_FAILED);
    mem_ = static_cast<uint8_t*>(p);
    int sv[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    sock_ = UniqueFd(sv[0]);
    backend_fd_ = sv[1];
    for (int q = 0; q < 2; ++q) {
      kick_[q] = UniqueFd(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
      call_[q] = UniqueFd(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
    }
  }
  ~FakeFrontEnd() { ::munmap(mem_, kMemSize); }

  int TakeBackendFd() { return std::exchange(backend_fd_, -1); }

  // --- Messages.
  void Send(uint32_t request, std::vector<uint8_t> payload,
            std::vector<int> fds = {}, uint32_t flags = vu::kVersion) {
    uint8_t hdr[12];
    const uint32_t size = static_cast<uint32_t>(payload.size());
    Put32(hdr, request);
    Put32(hdr + 4, flags);
    Put32(hdr + 8, size);
    std::vector<uint8_t> all(hdr, hdr + 12);
    all.insert(all.end(), payload.begin(), payload.end());
    iovec iov{all.data(), all.size()};
    msghdr m{};
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof(int) * 16)];
    if (!fds.empty()) {
      m.msg_control = cbuf;
      m.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
      cmsghdr* c = CMSG_FIRSTHDR(&m);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
      std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
    }
    ASSERT_EQ(::sendmsg(sock_.get(), &m, 0), static_cast<ssize_t>(all.size()));
  }
  // The reply to the last request, after the back-end ran.
  std::optional<std::vector<uint8_t>> Reply() {
    pollfd p{sock_.get(), POLLIN, 0};
    if (::poll(&p, 1, 0) != 1) return std::nullopt;
    uint8_t hdr[12];
    if (::recv(sock_.get(), hdr, 12, MSG_WAITALL) != 12) return std::nullopt;
    EXPECT_EQ(Get32(hdr + 4), vu::kVersion | vu::kFlagReply);
    std::vector<uint8_t> payload(Get32(hdr + 8));
    if (!payload.empty()) {
      EXPECT_EQ(::recv(sock_.get(), payload.data(), payload.size(), MSG_WAITALL),
                static_cast<ssize_t>(payload.size()));
    }
    return payload;
  }
  static std::vector<uint8_t> U64(uint64_t v) {
    std::vector<uint8_t> b(8);
    Put64(b.data(), v);
    return b;
  }
  static std::vector<uint8_t> State(uint32_t index, uint32_t num) {
    std::vector<uint8_t> b(8);
    Put32(b.data(), index);
    Put32(b.data() + 4, num);
    return b;
  }
  std::vector<uint8_t> MemTable() const {
    std::vector<uint8_t> b(8 + 32);
    Put32(b.data(), 1);
    Put64(b.data() + 8, kGpaBase);
    Put64(b.data() + 16, kMemSize);
    Put64(b.data() + 24, kUvaBase);
    Put64(b.data() + 32, 0);
    return b;
  }
  std::vector<uint8_t> Addr(uint32_t q) const {
    std::vector<uint8_t> b(40);
    const uint64_t base = kUvaBase + q * kRingArea;
    Put32(b.data(), q);
    Put64(b.data() + 8, base + kDescOff);
    Put64(b.data() + 16, base + kUsedOff);
    Put64(b.data() + 24, base + kAvailOff);
    return b;
  }

  // The whole start-up QEMU does, in its order. `step` runs the back-end.
  template <typename Step>
  void Negotiate(uint64_t features, Step step) {
    features_ = features;
    Send(vu::kGetFeatures, {});
    step();
    auto offered = Reply();
    ASSERT_TRUE(offered && offered->size() == 8);
    uint64_t off;
    std::memcpy(&off, offered->data(), 8);
    ASSERT_EQ(off & features, features);
    Send(vu::kGetProtocolFeatures, {});
    step();
    ASSERT_TRUE(Reply());
    Send(vu::kSetProtocolFeatures, U64(vu::Bit(vu::protocol_feature::kReplyAck)));
    Send(vu::kSetOwner, {});
    Send(vu::kSetFeatures, U64(features));
    const uint32_t ack = vu::kVersion | vu::kFlagNeedReply;
    Send(vu::kSetMemTable, MemTable(), {mem_fd_.get()}, ack);
    step();
    auto r = Reply();
    ASSERT_TRUE(r);
    ASSERT_EQ((*r)[0], 0) << "SET_MEM_TABLE refused";
    for (uint32_t q = 0; q < 2; ++q) {
      Send(vu::kSetVringNum, State(q, kQueueSize));
      Send(vu::kSetVringBase, State(q, 0));
      Send(vu::kSetVringAddr, Addr(q), {}, ack);
      step();
      r = Reply();
      ASSERT_TRUE(r);
      ASSERT_EQ((*r)[0], 0) << "SET_VRING_ADDR refused";
      Send(vu::kSetVringKick, U64(q), {kick_[q].get()});
      Send(vu::kSetVringCall, U64(q), {call_[q].get()});
      Send(vu::kSetVringEnable, State(q, 1));
    }
    step();
    next_desc_[0] = next_desc_[1] = 0;
    avail_[0] = avail_[1] = 0;
    used_seen_[0] = used_seen_[1] = 0;
  }

  // --- The driver.
  uint8_t* Ring(int q, size_t off) { return mem_ + q * kRingArea + off; }
  uint8_t* Desc(int q, uint32_t i) { return Ring(q, kDescOff) + 16 * i; }
  // Guest-physical address of buffer memory at `off` from the buffer area.
  static uint64_t BufGpa(size_t off) { return kGpaBase + kBufferArea + off; }
  uint8_t* Buf(size_t off) { return mem_ + kBufferArea + off; }

  void WriteDesc(int q, uint32_t i, uint64_t gpa, uint32_t len, uint16_t flags,
                 uint16_t next) {
    uint8_t* d = Desc(q, i);
    Put64(d, gpa);
    Put32(d + 8, len);
    Put16(d + 12, flags);
    Put16(d + 14, next);
  }
  // Makes head `head` available and kicks.
  void Publish(int q, uint16_t head, bool kick = true) {
    Put16(Ring(q, kAvailOff) + 4 + 2 * (avail_[q] % kQueueSize), head);
    ++avail_[q];
    __atomic_store_n(reinterpret_cast<uint16_t*>(Ring(q, kAvailOff) + 2),
                     avail_[q], __ATOMIC_RELEASE);
    if (kick) Kick(q);
  }
  void Kick(int q) {
    const uint64_t one = 1;
    ASSERT_EQ(::write(kick_[q].get(), &one, 8), 8);
  }
  // Posts `bytes` (vnet header + frame) on the TX queue in `pieces`
  // descriptors (or through an indirect table). Returns the head.
  uint16_t PostTx(std::span<const uint8_t> bytes, size_t pieces = 1,
                  bool indirect = false) {
    const size_t off = buf_off_;
    buf_off_ += (bytes.size() + 63) & ~size_t{63};
    std::memcpy(Buf(off), bytes.data(), bytes.size());
    const uint16_t head = static_cast<uint16_t>(next_desc_[1]);
    const size_t per = (bytes.size() + pieces - 1) / pieces;
    uint8_t* table = nullptr;
    uint64_t table_gpa = 0;
    if (indirect) {
      table_gpa = BufGpa(buf_off_);
      table = Buf(buf_off_);
      buf_off_ += 16 * pieces + 64;
      WriteDesc(1, NextDesc(1), table_gpa, static_cast<uint32_t>(16 * pieces),
                vu::kDescFlagIndirect, 0);
    }
    for (size_t i = 0, at = 0; i < pieces; ++i, at += per) {
      const uint32_t len = static_cast<uint32_t>(std::min(per, bytes.size() - at));
      const uint16_t flags = i + 1 < pieces ? vu::kDescFlagNext : 0;
      if (indirect) {
        uint8_t* d = table + 16 * i;
        Put64(d, BufGpa(off + at));
        Put32(d + 8, len);
        Put16(d + 12, flags);
        Put16(d + 14, static_cast<uint16_t>(i + 1));
      } else {
        const uint32_t idx = NextDesc(1);
        WriteDesc(1, idx, BufGpa(off + at), len, flags,
                  static_cast<uint16_t>((idx + 1) % kQueueSize));
      }
    }
    Publish(1, head);
    return head;
  }
  // Posts `n` receive buffers of `size` bytes each, one descriptor each.
  void PostRx(size_t n, uint32_t size, bool kick = true) {
    for (size_t i = 0; i < n; ++i) {
      const size_t off = buf_off_;
      buf_off_ += (size + 63) & ~uint32_t{63};
      const uint32_t idx = NextDesc(0);
      rx_buf_[idx] = off;
      WriteDesc(0, idx, BufGpa(off), size, vu::kDescFlagWrite, 0);
      Publish(0, static_cast<uint16_t>(idx), kick && i + 1 == n);
    }
  }
  uint32_t NextDesc(int q) { return next_desc_[q]++ % kQueueSize; }
  // Used entries the device added since the last call.
  std::vector<Used> TakeUsed(int q) {
    std::vector<Used> out;
    const uint16_t idx = __atomic_load_n(
        reinterpret_cast<uint16_t*>(Ring(q, kUsedOff) + 2), __ATOMIC_ACQUIRE);
    while (used_seen_[q] != idx) {
      const uint8_t* e = Ring(q, kUsedOff) + 4 + 8 * (used_seen_[q] % kQueueSize);
      out.push_back(Used{Get32(e), Get32(e + 4)});
      ++used_seen_[q];
    }
    return out;
  }
  // Received frames: used RX entries reassembled (num_buffers).
  std::vector<std::vector<uint8_t>> TakeRxFrames(std::vector<uint8_t>* hdr0 = nullptr) {
    std::vector<std::vector<uint8_t>> frames;
    std::vector<Used> used = TakeUsed(0);
    for (size_t i = 0; i < used.size();) {
      const uint8_t* b = Buf(rx_buf_[used[i].id]);
      const uint16_t nbuf = Get16(b + 10);
      if (hdr0 != nullptr && frames.empty()) hdr0->assign(b, b + 12);
      std::vector<uint8_t> f(b + 12, b + used[i].len);
      for (uint16_t k = 1; k < nbuf && i + k < used.size(); ++k) {
        const uint8_t* c = Buf(rx_buf_[used[i + k].id]);
        f.insert(f.end(), c, c + used[i + k].len);
      }
      frames.push_back(std::move(f));
      i += std::max<uint16_t>(nbuf, 1);
    }
    return frames;
  }
  // Was the call eventfd signalled (and reset)?
  bool Called(int q) {
    uint64_t v;
    return ::read(call_[q].get(), &v, 8) == 8;
  }
  void SetUsedEvent(int q, uint16_t v) {
    Put16(Ring(q, kAvailOff) + 4 + 2 * kQueueSize, v);
  }
  uint16_t AvailEvent(int q) { return Get16(Ring(q, kUsedOff) + 4 + 8 * kQueueSize); }

  int sock() const { return sock_.get(); }
  int mem_fd() const { return mem_fd_.get(); }
  uint8_t* mem() { return mem_; }

 private:
  UniqueFd mem_fd_;
  uint8_t* mem_ = nullptr;
  UniqueFd sock_;
  int backend_fd_ = -1;
  UniqueFd kick_[2];
  UniqueFd call_[2];
  uint64_t features_ = 0;
  uint32_t next_desc_[2] = {0, 0};
  uint16_t avail_[2] = {0, 0};
  uint16_t used_seen_[2] = {0, 0};
  size_t buf_off_ = 0;
  std::map<uint32_t, size_t> rx_buf_;
};

// A 12-byte vnet header (num_buffers 0) followed by `frame`.
std::vector<uint8_t> WithHeader(std::span<const uint8_t> frame,
                                std::span<const uint8_t> hdr = {}) {
  std::vector<uint8_t> b(12, 0);
  std::copy(hdr.begin(), hdr.end(), b.begin());
  b.insert(b.end(), frame.begin(), frame.end());
  return b;
}

testing::TcpGsoSpec Spec(bool v6) {
  testing::TcpGsoSpec s;
  s.src_mac = *wire::MacAddress::Parse("02:00:00:00:00:01");
  s.dst_mac = *wire::MacAddress::Parse("02:00:00:00:00:02");
  s.v6 = v6;
  s.src4 = *wire::Ipv4Address::Parse("10.0.2.100");
  s.dst4 = *wire::Ipv4Address::Parse("10.0.2.2");
  s.src6 = *wire::Ipv6Address::Parse("fd00::100");
  s.dst6 = *wire::Ipv6Address::Parse("fd00::2");
  s.mss = v6 ? 1428 : 1448;
  return s;
}

class VhostUserTest : public ::testing::Test {
 protected:
  void SetUp() override { Connect(kAllFeatures); }
  void Connect(uint64_t features) {
    fe_ = std::make_unique<FakeFrontEnd>();
    VhostUserOptions o;
    o.path = "test";
    auto ep = VhostUserEndpoint::FromConnectedFd(fe_->TakeBackendFd(), o,
                                                 chunks_, packets_);
    ASSERT_TRUE(ep.ok()) << ep.status();
    ep_ = *std::move(ep);
    ep_->Attach(&rx_);
    fe_->Negotiate(features, [this] { Step(); });
  }
  // Runs the back-end until it has nothing readable and no more work.
  void Step() {
    for (int i = 0; i < 100; ++i) {
      pollfd p{ep_->ReadFd(), POLLIN, 0};
      const bool readable = ::poll(&p, 1, 0) == 1;
      const bool due = ep_->NextDeadline() <= now_;
      if (!readable && !due) return;
      if (readable) ep_->OnReadable(now_);
      if (due) ep_->Poll(now_);
    }
  }
  size_t Send(buffer::PacketPtr p) {
    buffer::PacketChain chain;
    chain.PushBack(std::move(p));
    const size_t n = ep_->Transmit(chain, now_);
    left_ = chain.size();
    return n;
  }
  uint64_t ChainRefused(vu::ChainError e) const {
    return ep_->vhost_stats().from_guest_chain_refused[static_cast<size_t>(e)];
  }
  uint64_t VnetRefused(VnetRxVerdict v) const {
    return ep_->vhost_stats().from_guest_vnet_refused[static_cast<size_t>(v)];
  }
  // Sends one good frame from the guest and checks it arrives.
  void ExpectGoodFrameStillPasses(uint32_t id) {
    const size_t before = rx_.frames.size();
    fe_->PostTx(WithHeader(TestFrame(100, id)));
    Step();
    ASSERT_EQ(rx_.frames.size(), before + 1);
    EXPECT_EQ(testing::FrameId(rx_.frames.back().bytes), id);
  }

  buffer::ChunkPool chunks_{256};
  buffer::PacketPool packets_{256};
  std::unique_ptr<FakeFrontEnd> fe_;
  std::unique_ptr<VhostUserEndpoint> ep_;
  RecordingReceiver rx_;
  Instant now_ = absl::UnixEpoch();
  size_t left_ = 0;
};

TEST_F(VhostUserTest, NegotiatesFeaturesAndRings) {
  EXPECT_EQ(ep_->negotiated_features(), kAllFeatures);
  EXPECT_EQ(ep_->mapped_bytes(), kMemSize);
  EXPECT_EQ(ep_->device_stats().mem_tables, 1u);
  for (size_t i = 0; i < vu::kRefusalCount; ++i) {
    EXPECT_EQ(ep_->device_stats().refused[i], 0u) << vu::RefusalName(
        static_cast<vu::Refusal>(i));
  }
  EXPECT_EQ(ep_->Capabilities().gso_max_size, 65535u);
}

TEST_F(VhostUserTest, FramesFromTheGuestInOneOrManyDescriptors) {
  fe_->PostTx(WithHeader(TestFrame(60, 1)));
  fe_->PostTx(WithHeader(TestFrame(1514, 2)), 5);
  fe_->PostTx(WithHeader(TestFrame(800, 3)), 3, /*indirect=*/true);
  Step();
  ASSERT_EQ(rx_.frames.size(), 3u);
  EXPECT_EQ(rx_.frames[0].bytes, TestFrame(60, 1));
  EXPECT_EQ(rx_.frames[1].bytes, TestFrame(1514, 2));
  EXPECT_EQ(rx_.frames[2].bytes, TestFrame(800, 3));
  // Every chain went back to the driver.
  EXPECT_EQ(fe_->TakeUsed(1).size(), 3u);
  // EVENT_IDX: we ask to be kicked for the next chain.
  EXPECT_EQ(fe_->AvailEvent(1), 3);
}

TEST_F(VhostUserTest, FramesToTheGuest) {
  fe_->PostRx(8, 2048);
  Step();
  const std::vector<uint8_t> f = TestFrame(1514, 7);
  EXPECT_EQ(Send(MakePacket(packets_, chunks_, f, 14, 3)), 1u);
  std::vector<uint8_t> hdr;
  auto frames = fe_->TakeRxFrames(&hdr);
  ASSERT_EQ(frames.size(), 1u);
  EXPECT_EQ(frames[0], f);
  EXPECT_EQ(Get16(hdr.data() + 10), 1);  // num_buffers
  EXPECT_EQ(hdr[0], 0);                  // complete checksum, no GSO
}

TEST_F(VhostUserTest, TsoSuperSegmentsCrossWholeBothWays) {
  // To the guest: 60000 payload bytes, one frame over MRG_RXBUF buffers.
  fe_->PostRx(64, 4096);
  Step();
  buffer::PacketPtr p = testing::MakeTcpGsoPacket(
      packets_, chunks_, Spec(false), testing::PatternBytes(60000, 3));
  ASSERT_NE(p, nullptr);
  const std::vector<uint8_t> want = PacketBytes(*p);
  EXPECT_EQ(Send(std::move(p)), 1u);
  std::vector<uint8_t> hdr;
  auto frames = fe_->TakeRxFrames(&hdr);
  ASSERT_EQ(frames.size(), 1u);
  EXPECT_EQ(frames[0], want);
  EXPECT_EQ(hdr[1], vnet::kGsoTcpV4);
  EXPECT_EQ(hdr[0], vnet::kFlagNeedsCsum);
  EXPECT_EQ(Get16(hdr.data() + 10), (12 + want.size() + 4095) / 4096);
  EXPECT_EQ(ep_->vhost_stats().to_guest_gso, 1u);
  EXPECT_EQ(ep_->vhost_stats().to_guest_merged, 1u);

  // From the guest: a 64 KiB TSO frame in 18 descriptors, whole.
  buffer::PacketPtr g = testing::MakeTcpGsoPacket(
      packets_, chunks_, Spec(true), testing::PatternBytes(62000, 4));
  uint8_t vh[kVnetHdrLen];
  ASSERT_EQ(FillVnetHeader(*g, std::span<uint8_t, kVnetHdrLen>(vh)),
            VnetTxKind::kGso);
  const std::vector<uint8_t> gf = PacketBytes(*g);
  fe_->PostTx(WithHeader(gf, vh), 18);
  Step();
  ASSERT_EQ(rx_.frames.size(), 1u);
  EXPECT_EQ(rx_.frames[0].bytes, gf);
  EXPECT_TRUE(rx_.frames[0].checksum_partial);
  EXPECT_EQ(ep_->vhost_stats().from_guest_gso, 1u);
}

TEST_F(VhostUserTest, WaitsForGuestBuffersAndFlushesOnTheirKick) {
  const std::vector<uint8_t> f = TestFrame(1000, 9);
  EXPECT_EQ(Send(MakePacket(packets_, chunks_, f)), 0u);
  EXPECT_EQ(left_, 1u);  // kept for later, not dropped
  EXPECT_EQ(ep_->vhost_stats().to_guest_waits, 1u);
  size_t flushes = rx_.calls;
  fe_->PostRx(1, 2048);
  Step();
  // The kick made the endpoint hand the stack an empty batch (its flush).
  EXPECT_EQ(rx_.calls, flushes + 1);
  EXPECT_EQ(Send(MakePacket(packets_, chunks_, f)), 1u);
  auto frames = fe_->TakeRxFrames();
  ASSERT_EQ(frames.size(), 1u);
  EXPECT_EQ(frames[0], f);
}

TEST_F(VhostUserTest, EventIdxDecidesTheCall) {
  fe_->PostRx(4, 2048);
  Step();
  fe_->SetUsedEvent(0, 1);  // "tell me when used passes index 1"
  (void)fe_->Called(0);
  EXPECT_EQ(Send(MakePacket(packets_, chunks_, TestFrame(100, 1))), 1u);
  EXPECT_FALSE(fe_->Called(0));  // used idx 0 -> 1: not past used_event 1
  EXPECT_EQ(Send(MakePacket(packets_, chunks_, TestFrame(100, 2))), 1u);
  EXPECT_TRUE(fe_->Called(0));   // 1 -> 2 crossed it
  EXPECT_EQ(Send(MakePacket(packets_, chunks_, TestFrame(100, 3))), 1u);
  EXPECT_FALSE(fe_->Called(0));  // no new request
}

TEST_F(VhostUserTest, WithoutMrgRxbufOneChainHoldsTheFrame) {
  Connect(kAllFeatures & ~vu::Bit(vu::feature::kMrgRxbuf));
  fe_->PostRx(1, 1024);
  Step();
  EXPECT_EQ(Send(MakePacket(packets_, chunks_, TestFrame(1500, 1))), 0u);
  EXPECT_EQ(left_, 0u);  // dropped, counted
  EXPECT_EQ(ep_->vhost_stats().to_guest_too_small, 1u);
  // The buffer was not used up: a frame that fits takes it.
  EXPECT_EQ(Send(MakePacket(packets_, chunks_, TestFrame(500, 2))), 1u);
  auto frames = fe_->TakeRxFrames();
  ASSERT_EQ(frames.size(), 1u);
  EXPECT_EQ(frames[0], TestFrame(500, 2));
}

TEST_F(VhostUserTest, GuestWithoutTsoGetsSplitSegments) {
  Connect(kAllFeatures & ~(vu::Bit(vu::feature::kGuestTso4) |
                           vu::Bit(vu::feature::kGuestTso6)));
  fe_->PostRx(64, 2048);
  Step();
  buffer::PacketPtr p = testing::MakeTcpGsoPacket(
      packets_, chunks_, Spec(false), testing::PatternBytes(10000, 3));
  EXPECT_EQ(Send(std::move(p)), 7u);  // ceil(10000 / 1448)
  auto frames = fe_->TakeRxFrames();
  ASSERT_EQ(frames.size(), 7u);
  for (const auto& f : frames) EXPECT_LE(f.size(), 1514u);
  EXPECT_EQ(ep_->vhost_stats().to_guest_split, 1u);
}

// --- Hostile guests: each refused and counted; the next frame passes.

TEST_F(VhostUserTest, DescriptorOutsideGuestMemory) {
  const uint32_t i = fe_->NextDesc(1);
  fe_->WriteDesc(1, i, kGpaBase + kMemSize - 8, 64, 0, 0);  // crosses the end
  fe_->Publish(1, static_cast<uint16_t>(i));
  const uint32_t j = fe_->NextDesc(1);
  fe_->WriteDesc(1, j, 0x10, 64, 0, 0);  // below the region
  fe_->Publish(1, static_cast<uint16_t>(j));
  Step();
  EXPECT_EQ(ChainRefused(vu::ChainError::kOutsideMemory), 2u);
  EXPECT_TRUE(rx_.frames.empty());
  // Both went back to the driver, empty.
  auto used = fe_->TakeUsed(1);
  ASSERT_EQ(used.size(), 2u);
  EXPECT_EQ(used[0].len, 0u);
  ExpectGoodFrameStillPasses(11);
}

TEST_F(VhostUserTest, DescriptorLoop) {
  const uint32_t a = fe_->NextDesc(1);
  const uint32_t b = fe_->NextDesc(1);
  fe_->WriteDesc(1, a, FakeFrontEnd::BufGpa(0), 16, vu::kDescFlagNext, b);
  fe_->WriteDesc(1, b, FakeFrontEnd::BufGpa(0), 16, vu::kDescFlagNext, a);
  fe_->Publish(1, static_cast<uint16_t>(a));
  Step();
  // 256 * 16 bytes would pass the frame limit first; with a 16-byte
  // buffer the walk hits the queue size.
  EXPECT_EQ(ChainRefused(vu::ChainError::kLoop) +
                ChainRefused(vu::ChainError::kTooLong),
            1u);
  EXPECT_EQ(ChainRefused(vu::ChainError::kLoop), 1u);
  ExpectGoodFrameStillPasses(12);
}

TEST_F(VhostUserTest, BadIndicesAndIndirectTables) {
  fe_->Publish(1, 300);  // head past the table
  const uint32_t a = fe_->NextDesc(1);
  fe_->WriteDesc(1, a, FakeFrontEnd::BufGpa(0), 16, vu::kDescFlagNext, 999);
  fe_->Publish(1, static_cast<uint16_t>(a));
  const uint32_t c = fe_->NextDesc(1);  // indirect table of 17 bytes
  fe_->WriteDesc(1, c, FakeFrontEnd::BufGpa(0), 17, vu::kDescFlagIndirect, 0);
  fe_->Publish(1, static_cast<uint16_t>(c));
  const uint32_t d = fe_->NextDesc(1);  // a writable buffer on TX
  fe_->WriteDesc(1, d, FakeFrontEnd::BufGpa(0), 100, vu::kDescFlagWrite, 0);
  fe_->Publish(1, static_cast<uint16_t>(d));
  Step();
  EXPECT_EQ(ChainRefused(vu::ChainError::kBadHead), 1u);
  EXPECT_EQ(ChainRefused(vu::ChainError::kBadNext), 1u);
  EXPECT_EQ(ChainRefused(vu::ChainError::kBadIndirect), 1u);
  EXPECT_EQ(ChainRefused(vu::ChainError::kWrongDirection), 1u);
  ExpectGoodFrameStillPasses(13);
}

TEST_F(VhostUserTest, LengthItDoesNotHave) {
  // 4 GiB - 1 claimed: outside memory (and past any frame).
  const uint32_t a = fe_->NextDesc(1);
  fe_->WriteDesc(1, a, FakeFrontEnd::BufGpa(0), 0xffffffff, 0, 0);
  fe_->Publish(1, static_cast<uint16_t>(a));
  // A frame longer than a chunk, in memory: too long.
  const uint32_t b = fe_->NextDesc(1);
  fe_->WriteDesc(1, b, FakeFrontEnd::BufGpa(0), 70000, 0, 0);
  fe_->Publish(1, static_cast<uint16_t>(b));
  // Shorter than header + Ethernet.
  fe_->PostTx(std::vector<uint8_t>(20, 0));
  Step();
  EXPECT_EQ(ChainRefused(vu::ChainError::kTooLong), 2u);
  EXPECT_EQ(ep_->vhost_stats().from_guest_runt, 1u);
  ExpectGoodFrameStillPasses(14);
}

TEST_F(VhostUserTest, LyingVnetHeader) {
  buffer::PacketPtr g = testing::MakeTcpGsoPacket(
      packets_, chunks_, Spec(false), testing::PatternBytes(20000, 4));
  uint8_t vh[kVnetHdrLen];
  ASSERT_EQ(FillVnetHeader(*g, std::span<uint8_t, kVnetHdrLen>(vh)),
            VnetTxKind::kGso);
  const std::vector<uint8_t> gf = PacketBytes(*g);
  uint8_t lie[kVnetHdrLen];
  std::memcpy(lie, vh, sizeof(lie));
  lie[1] = vnet::kGsoTcpV6;  // gso_type of another IP version
  fe_->PostTx(WithHeader(gf, lie), 4);
  std::memcpy(lie, vh, sizeof(lie));
  vnet::StoreLe16(lie + vnet::kGsoSizeOffset, 0);
  fe_->PostTx(WithHeader(gf, lie), 4);
  std::memcpy(lie, vh, sizeof(lie));
  vnet::StoreLe16(lie + vnet::kGsoSizeOffset, 9000);  // past the MTU
  fe_->PostTx(WithHeader(gf, lie), 4);
  std::memcpy(lie, vh, sizeof(lie));
  vnet::StoreLe16(lie + vnet::kCsumStartOffset, 0xff00);
  fe_->PostTx(WithHeader(gf, lie), 4);
  std::memcpy(lie, vh, sizeof(lie));
  vnet::StoreLe16(lie + vnet::kHdrLenOffset, 0xffff);
  fe_->PostTx(WithHeader(gf, lie), 4);
  Step();
  EXPECT_TRUE(rx_.frames.empty());
  EXPECT_EQ(VnetRefused(VnetRxVerdict::kGsoTypeMismatch), 1u);
  EXPECT_EQ(VnetRefused(VnetRxVerdict::kGsoBadSize), 2u);
  EXPECT_EQ(VnetRefused(VnetRxVerdict::kBadCsum), 1u);
  EXPECT_EQ(VnetRefused(VnetRxVerdict::kGsoBadHdrLen), 1u);
  // The honest header passes.
  fe_->PostTx(WithHeader(gf, vh), 4);
  Step();
  ASSERT_EQ(rx_.frames.size(), 1u);
  EXPECT_EQ(rx_.frames[0].bytes, gf);
}

TEST_F(VhostUserTest, RunawayAvailIndexStopsTheQueue) {
  __atomic_store_n(reinterpret_cast<uint16_t*>(fe_->Ring(1, kAvailOff) + 2),
                   uint16_t{1000}, __ATOMIC_RELEASE);
  fe_->Kick(1);
  Step();
  EXPECT_EQ(ep_->vhost_stats().queue_broken, 1u);
  EXPECT_TRUE(rx_.frames.empty());
}

// vhost-user.rst: a ring that is started but disabled is processed
// without side effects; for a net device, TX chains are taken and
// discarded. They go back to the guest empty, and none reaches the stack.
TEST_F(VhostUserTest, DisabledTxRingIsDrainedAndDiscarded) {
  ExpectGoodFrameStillPasses(1);
  fe_->Send(vu::kSetVringEnable, FakeFrontEnd::State(1, 0));
  Step();
  const uint16_t head = fe_->PostTx(WithHeader(TestFrame(100, 2)));
  Step();
  EXPECT_EQ(rx_.frames.size(), 1u);
  const auto used = fe_->TakeUsed(1);
  ASSERT_EQ(used.size(), 2u);
  EXPECT_EQ(used[1].id, head);
  EXPECT_EQ(used[1].len, 0u);
  EXPECT_EQ(ep_->vhost_stats().from_guest_disabled, 1u);
  EXPECT_EQ(ep_->Stats().rx_dropped, 1u);
  // EVENT_IDX: the driver is asked to kick for the next chain, as ever.
  EXPECT_EQ(fe_->AvailEvent(1), 2);
  // Enabled again, frames flow.
  fe_->Send(vu::kSetVringEnable, FakeFrontEnd::State(1, 1));
  Step();
  ExpectGoodFrameStillPasses(3);
  EXPECT_EQ(ep_->vhost_stats().from_guest_disabled, 1u);
}

// A guest reset mid-transfer: QEMU stops the rings (GET_VRING_BASE),
// the driver starts again from the bases it was told, and the frames
// flow again; a chain posted while the ring was stopped is not touched.
TEST_F(VhostUserTest, RingsStopAndRestartMidTransfer) {
  ExpectGoodFrameStillPasses(1);
  fe_->PostRx(2, 2048);
  Step();
  for (uint32_t q = 0; q < 2; ++q) {
    fe_->Send(vu::kGetVringBase, FakeFrontEnd::State(q, 0));
    Step();
    auto r = fe_->Reply();
    ASSERT_TRUE(r);
    ASSERT_EQ(r->size(), 8u);
    EXPECT_EQ(Get32(r->data()), q);
    EXPECT_EQ(Get32(r->data() + 4), q == 0 ? 0u : 1u);  // chains taken
  }
  EXPECT_EQ(ep_->device_stats().ring_stops, 2u);
  // Stopped: no frame goes to the guest, none is taken from it.
  EXPECT_EQ(Send(MakePacket(packets_, chunks_, TestFrame(100, 2))), 0u);
  EXPECT_EQ(ep_->vhost_stats().to_guest_not_ready, 1u);
  fe_->PostTx(WithHeader(TestFrame(100, 3)));
  Step();
  EXPECT_EQ(rx_.frames.size(), 1u);
  // Restart from the bases (the chain posted meanwhile is taken now).
  for (uint32_t q = 0; q < 2; ++q) {
    fe_->Send(vu::kSetVringBase, FakeFrontEnd::State(q, q == 0 ? 0 : 1));
    fe_->Send(vu::kSetVringAddr, fe_->Addr(q));
    UniqueFd kick(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
    fe_->Send(vu::kSetVringKick, FakeFrontEnd::U64(q), {kick.get()});
    fe_->Send(vu::kSetVringEnable, FakeFrontEnd::State(q, 1));
  }
  Step();
  ASSERT_EQ(rx_.frames.size(), 2u);
  EXPECT_EQ(testing::FrameId(rx_.frames.back().bytes), 3u);
  // The old kick fds (QEMU still holds them) are no longer watched: a
  // kick there leaves the endpoint quiet.
  fe_->Kick(1);
  pollfd p{ep_->ReadFd(), POLLIN, 0};
  EXPECT_EQ(::poll(&p, 1, 0), 0);
  EXPECT_EQ(Send(MakePacket(packets_, chunks_, TestFrame(100, 4))), 1u);
  auto frames = fe_->TakeRxFrames();
  ASSERT_EQ(frames.size(), 1u);
  EXPECT_EQ(frames[0], TestFrame(100, 4));
}

// --- Hostile or broken front-ends: messages refused and counted.

TEST_F(VhostUserTest, BadMessagesAreRefusedAndCounted) {
  const uint32_t ack = vu::kVersion | vu::kFlagNeedReply;
  auto refused = [&](vu::Refusal r) {
    return ep_->device_stats().refused[static_cast<size_t>(r)];
  };
  // SET_FEATURES with 4 bytes.
  fe_->Send(vu::kSetFeatures, {1, 2, 3, 4}, {}, ack);
  Step();
  auto r = fe_->Reply();
  ASSERT_TRUE(r);
  EXPECT_NE((*r)[0], 0);
  EXPECT_EQ(refused(vu::Refusal::kBadSize), 1u);
  // SET_OWNER with an fd it does not take: the fd is closed, refused.
  UniqueFd extra(::eventfd(0, EFD_CLOEXEC));
  fe_->Send(vu::kSetOwner, {}, {extra.get()}, ack);
  Step();
  ASSERT_TRUE(fe_->Reply());
  EXPECT_EQ(refused(vu::Refusal::kBadFds), 1u);
  // A mem table with two regions and one fd.
  std::vector<uint8_t> two(8 + 64, 0);
  Put32(two.data(), 2);
  fe_->Send(vu::kSetMemTable, two, {fe_->mem_fd()}, ack);
  Step();
  ASSERT_TRUE(fe_->Reply());
  EXPECT_EQ(refused(vu::Refusal::kBadFds), 2u);
  // A region whose offset runs past the memfd.
  std::vector<uint8_t> far = fe_->MemTable();
  Put64(far.data() + 32, kMemSize);
  fe_->Send(vu::kSetMemTable, far, {fe_->mem_fd()}, ack);
  Step();
  ASSERT_TRUE(fe_->Reply());
  EXPECT_EQ(refused(vu::Refusal::kBadMemTable), 1u);
  EXPECT_EQ(ep_->mapped_bytes(), 0u);  // a bad table leaves no memory
  // Queue index 5, a feature never offered, SET_LOG_BASE.
  fe_->Send(vu::kSetVringNum, FakeFrontEnd::State(5, 256), {}, ack);
  fe_->Send(vu::kSetFeatures, FakeFrontEnd::U64(vu::Bit(vu::feature::kLogAll)),
            {}, ack);
  fe_->Send(vu::kSetLogBase, FakeFrontEnd::U64(0), {}, ack);
  Step();
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(fe_->Reply());
  EXPECT_EQ(refused(vu::Refusal::kBadIndex), 1u);
  EXPECT_EQ(refused(vu::Refusal::kBadFeatures), 1u);
  EXPECT_EQ(refused(vu::Refusal::kUnsupported), 1u);
  EXPECT_TRUE(ep_->connected());
  // And the device still takes a good table.
  fe_->Send(vu::kSetMemTable, fe_->MemTable(), {fe_->mem_fd()}, ack);
  Step();
  r = fe_->Reply();
  ASSERT_TRUE(r);
  EXPECT_EQ((*r)[0], 0);
  EXPECT_EQ(ep_->mapped_bytes(), kMemSize);
}

TEST_F(VhostUserTest, OversizedPayloadEndsTheConnection) {
  uint8_t hdr[12];
  Put32(hdr, vu::kSetMemTable);
  Put32(hdr + 4, vu::kVersion);
  Put32(hdr + 8, 1 << 20);
  ASSERT_EQ(::send(fe_->sock(), hdr, 12, 0), 12);
  Step();
  EXPECT_FALSE(ep_->connected());
  EXPECT_EQ(ep_->vhost_stats().bad_streams, 1u);
  EXPECT_EQ(ep_->mapped_bytes(), 0u);
}

// Counts this process's open fds.
size_t OpenFds() {
  size_t n = 0;
  for (int fd = 0; fd < 4096; ++fd) n += ::fcntl(fd, F_GETFD) >= 0;
  return n;
}

TEST(VhostUserListenTest, ReconnectLeavesNothingBehind) {
  buffer::ChunkPool chunks(64);
  buffer::PacketPool packets(64);
  VhostUserOptions o;
  o.path = absl::StrCat("@netstack-vhost-test-", ::getpid());
  auto ep = VhostUserEndpoint::Listen(o, chunks, packets);
  ASSERT_TRUE(ep.ok()) << ep.status();
  RecordingReceiver rx;
  (*ep)->Attach(&rx);
  const Instant now = absl::UnixEpoch();
  auto step = [&] {
    for (int i = 0; i < 100; ++i) {
      pollfd p{(*ep)->ReadFd(), POLLIN, 0};
      if (::poll(&p, 1, 0) != 1) return;
      (*ep)->OnReadable(now);
    }
  };
  const size_t fds_idle = OpenFds();
  for (int round = 0; round < 3; ++round) {
    // A front-end connects through the socket, sets everything up and
    // sends a frame; then it goes away mid-transfer.
    FakeFrontEnd fe;
    ::close(fe.TakeBackendFd());
    UniqueFd c(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::memcpy(a.sun_path + 1, o.path.data() + 1, o.path.size() - 1);
    ASSERT_EQ(::connect(c.get(), reinterpret_cast<sockaddr*>(&a),
                        offsetof(sockaddr_un, sun_path) + o.path.size()),
              0);
    step();
    // A second front-end meanwhile is turned away.
    UniqueFd c2(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    ASSERT_EQ(::connect(c2.get(), reinterpret_cast<sockaddr*>(&a),
                        offsetof(sockaddr_un, sun_path) + o.path.size()),
              0);
    step();
    EXPECT_EQ((*ep)->vhost_stats().rejected_peers, round + 1u);
    // Speak through `c`: swap it in as the fake's socket.
    ASSERT_EQ(::dup2(c.get(), fe.sock()), fe.sock());
    fe.Negotiate(kAllFeatures, step);
    EXPECT_EQ((*ep)->mapped_bytes(), kMemSize);
    fe.PostTx(WithHeader(TestFrame(200, round)));
    step();
    ASSERT_EQ(rx.frames.size(), round + 1u);
    c.reset();
    ::shutdown(fe.sock(), SHUT_RDWR);
    step();
    EXPECT_FALSE((*ep)->connected());
    EXPECT_EQ((*ep)->mapped_bytes(), 0u);
  }
  EXPECT_EQ((*ep)->vhost_stats().connections, 3u);
  EXPECT_EQ((*ep)->vhost_stats().disconnects, 3u);
  // Every fd the front-ends passed (memfd, kick and call eventfds) is
  // closed on our side: only the test's own are gone with them.
  EXPECT_EQ(OpenFds(), fds_idle);
}

}  // namespace
}  // namespace netstack::link
