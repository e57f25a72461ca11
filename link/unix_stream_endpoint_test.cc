#include "link/unix_stream_endpoint.h"

#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "link/fd_test_util.h"
#include "netstack/buffer/chunk.h"
#include "netstack/buffer/packet.h"
#include "netstack/wire/bytes.h"

namespace netstack::link {
namespace {

using testing::CapturedFrame;
using testing::CapturingReceiver;
using testing::WaitReadable;

const Instant kT0 = absl::UnixEpoch() + absl::Seconds(1000);

// A frame of `len` bytes whose bytes are derived from `id` (id first, big
// endian, so frames can be told apart).
std::vector<uint8_t> Frame(size_t len, uint32_t id) {
  std::vector<uint8_t> f(len);
  for (size_t i = 0; i < len; ++i) {
    f[i] = static_cast<uint8_t>(id * 31 + i * 7);
  }
  if (len >= 4) wire::StoreBe32(f.data(), id);
  return f;
}

std::vector<uint8_t> Framed(const std::vector<uint8_t>& frame) {
  std::vector<uint8_t> out(4 + frame.size());
  wire::StoreBe32(out.data(), static_cast<uint32_t>(frame.size()));
  std::memcpy(out.data() + 4, frame.data(), frame.size());
  return out;
}

void WriteAll(int fd, const std::vector<uint8_t>& bytes) {
  size_t off = 0;
  while (off < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + off, bytes.size() - off);
    ASSERT_GT(n, 0) << std::strerror(errno);
    off += static_cast<size_t>(n);
  }
}

// Reads whatever is available (non-blocking) and appends it.
void ReadAvailable(int fd, std::vector<uint8_t>& out) {
  uint8_t buf[65536];
  for (;;) {
    const ssize_t n = ::recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n <= 0) return;
    out.insert(out.end(), buf, buf + n);
  }
}

// Splits a framed stream into frames; false if it does not parse exactly.
bool Unframe(const std::vector<uint8_t>& stream,
             std::vector<std::vector<uint8_t>>& frames) {
  size_t pos = 0;
  while (pos < stream.size()) {
    if (stream.size() - pos < 4) return false;
    const uint32_t len = wire::LoadBe32(&stream[pos]);
    pos += 4;
    if (stream.size() - pos < len) return false;
    frames.emplace_back(stream.begin() + pos, stream.begin() + pos + len);
    pos += len;
  }
  return true;
}

// Packets as the stack builds them: the first `header_len` bytes in the
// headers, the rest as a payload view. Payloads are packed one after the
// other into shared chunks, like a TCP send queue.
class PacketMaker {
 public:
  PacketMaker(buffer::PacketPool& packets, buffer::ChunkPool& chunks)
      : packets_(packets), chunks_(chunks) {}

  buffer::PacketPtr Make(const std::vector<uint8_t>& bytes, size_t header_len) {
    buffer::PacketPtr p = packets_.Allocate();
    if (!p) return p;
    auto h = p->headers().Prepend(header_len);
    std::memcpy(h->data(), bytes.data(), header_len);
    const size_t n = bytes.size() - header_len;
    if (n == 0) return p;
    if (!chunk_ || used_ + n > buffer::kChunkSize) {
      chunk_ = chunks_.Allocate();
      if (!chunk_) return nullptr;
      base_ = chunk_->mutable_data().data();
      used_ = 0;
    }
    std::memcpy(base_ + used_, bytes.data() + header_len, n);
    if (!p->AppendPayload(
            buffer::PayloadView(chunk_, used_, static_cast<uint32_t>(n)))) {
      return nullptr;
    }
    used_ += static_cast<uint32_t>(n);
    return p;
  }

 private:
  buffer::PacketPool& packets_;
  buffer::ChunkPool& chunks_;
  buffer::ChunkRef chunk_;
  uint8_t* base_ = nullptr;
  uint32_t used_ = 0;
};

class UnixStreamTest : public ::testing::Test {
 protected:
  void SetUp() override { OpenPair(UnixStreamOptions{}); }

  void OpenPair(const UnixStreamOptions& options) {
    ep_.reset();
    peer_.reset();
    int sv[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    peer_.reset(sv[1]);
    auto ep = UnixStreamEndpoint::FromConnectedFd(sv[0], options, chunks_);
    ASSERT_TRUE(ep.ok()) << ep.status();
    ep_ = std::move(*ep);
    ep_->Attach(&rx_);
  }

  // Calls OnReadable while ReadFd() polls readable (up to `timeout_ms`
  // for the first wake-up).
  void Pump(int timeout_ms = 100) {
    while (WaitReadable(ep_->ReadFd(), timeout_ms)) {
      ep_->OnReadable(kT0);
      timeout_ms = 0;
    }
  }

  buffer::ChunkPool chunks_{64};
  buffer::PacketPool packets_{256};
  PacketMaker maker_{packets_, chunks_};
  CapturingReceiver rx_;
  UniqueFd peer_;
  std::unique_ptr<UnixStreamEndpoint> ep_;
};

TEST_F(UnixStreamTest, FramesFromPeerAreDeliveredInOneChunk) {
  std::vector<uint8_t> stream;
  std::vector<std::vector<uint8_t>> sent;
  for (uint32_t id = 1; id <= 3; ++id) {
    sent.push_back(Frame(60 + id * 100, id));
    const auto f = Framed(sent.back());
    stream.insert(stream.end(), f.begin(), f.end());
  }
  rx_.keep_views = true;
  WriteAll(peer_.get(), stream);
  Pump();
  ASSERT_EQ(rx_.frames.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(rx_.frames[i].bytes, sent[i]) << i;
    EXPECT_FALSE(rx_.frames[i].checksum_partial);
  }
  // No copies: the frames are views of the chunk the stream was read into.
  EXPECT_EQ(rx_.frames[0].view.chunk().get(), rx_.frames[2].view.chunk().get());
  EXPECT_EQ(rx_.frames[1].view.offset(), 4 + sent[0].size() + 4);
  EXPECT_EQ(rx_.batches, 1u);
  const LinkStats s = ep_->Stats();
  EXPECT_EQ(s.rx_frames, 3u);
  EXPECT_EQ(s.rx_bytes, sent[0].size() + sent[1].size() + sent[2].size());
}

TEST_F(UnixStreamTest, ByteAtATimeReassembles) {
  std::vector<uint8_t> stream;
  std::vector<std::vector<uint8_t>> sent;
  for (uint32_t id = 1; id <= 4; ++id) {
    sent.push_back(Frame(14 + id * 37, id));
    const auto f = Framed(sent.back());
    stream.insert(stream.end(), f.begin(), f.end());
  }
  size_t frame_end = 0;
  size_t expected = 0;
  for (size_t i = 0; i < stream.size(); ++i) {
    ASSERT_EQ(::write(peer_.get(), &stream[i], 1), 1);
    ep_->OnReadable(kT0);
    if (i + 1 == frame_end + 4 + sent[expected].size()) {
      frame_end = i + 1;
      ++expected;
    }
    // A frame appears exactly when its last byte arrived, not before.
    ASSERT_EQ(rx_.frames.size(), expected) << "after byte " << i;
    if (expected == sent.size()) break;
  }
  for (size_t i = 0; i < sent.size(); ++i)
    EXPECT_EQ(rx_.frames[i].bytes, sent[i]);
  EXPECT_EQ(ep_->stream_stats().disconnect_bad_length, 0u);
  EXPECT_TRUE(ep_->connected());
}

TEST_F(UnixStreamTest, FramesAcrossChunkBoundariesAreIntact) {
  // 300 frames of varying size: about 230 KB, four chunks' worth, with
  // frames and prefixes cut at every chunk end.
  std::vector<uint8_t> stream;
  std::vector<std::vector<uint8_t>> sent;
  for (uint32_t id = 0; id < 300; ++id) {
    sent.push_back(Frame(14 + (id * 997) % 1501, id));
    const auto f = Framed(sent.back());
    stream.insert(stream.end(), f.begin(), f.end());
  }
  // The receiver keeps every view, so a chunk cannot be reused and the
  // start of a frame cut at a chunk end moves to a fresh chunk.
  rx_.keep_views = true;
  // Write in odd-sized pieces while the endpoint reads.
  size_t off = 0;
  while (off < stream.size()) {
    const size_t n = std::min<size_t>(7777, stream.size() - off);
    WriteAll(peer_.get(), std::vector<uint8_t>(stream.begin() + off,
                                               stream.begin() + off + n));
    off += n;
    Pump(0);
  }
  Pump();
  ASSERT_EQ(rx_.frames.size(), sent.size());
  for (size_t i = 0; i < sent.size(); ++i) {
    ASSERT_EQ(rx_.frames[i].bytes, sent[i]) << i;
  }
  EXPECT_GT(ep_->stream_stats().rx_moved_bytes, 0u);
  const size_t chunks_used = chunks_.stats().in_use;
  EXPECT_GE(chunks_used, stream.size() / buffer::kChunkSize);
  // Only the cut frames moved: less than one frame per chunk.
  EXPECT_LT(ep_->stream_stats().rx_moved_bytes, chunks_used * 1600);
  EXPECT_LE(rx_.largest_batch, 64u);
  rx_.frames.clear();
  EXPECT_EQ(chunks_.stats().in_use, 1u);  // only the one being filled
}

TEST_F(UnixStreamTest, LargestFramesWithBigMtu) {
  UnixStreamOptions o;
  o.mtu = 65521;
  OpenPair(o);
  std::vector<std::vector<uint8_t>> sent = {Frame(65535, 1), Frame(65535, 2),
                                            Frame(100, 3), Frame(65535, 4)};
  std::vector<uint8_t> stream;
  for (const auto& f : sent) {
    const auto framed = Framed(f);
    stream.insert(stream.end(), framed.begin(), framed.end());
  }
  size_t off = 0;
  while (off < stream.size()) {
    const size_t n = std::min<size_t>(50000, stream.size() - off);
    WriteAll(peer_.get(), std::vector<uint8_t>(stream.begin() + off,
                                               stream.begin() + off + n));
    off += n;
    Pump(0);
  }
  Pump();
  ASSERT_EQ(rx_.frames.size(), sent.size());
  for (size_t i = 0; i < sent.size(); ++i)
    EXPECT_EQ(rx_.frames[i].bytes, sent[i]);
}

class BadLengthTest : public UnixStreamTest,
                      public ::testing::WithParamInterface<uint32_t> {};

TEST_P(BadLengthTest, DropsConnectionAfterEarlierFrames) {
  const auto good = Framed(Frame(100, 7));
  std::vector<uint8_t> stream = good;
  uint8_t bad[4];
  wire::StoreBe32(bad, GetParam());
  stream.insert(stream.end(), bad, bad + 4);
  stream.insert(stream.end(), 200, 0xab);  // garbage after the bad prefix
  WriteAll(peer_.get(), stream);
  Pump();
  ASSERT_EQ(rx_.frames.size(), 1u);  // the frame before it still arrives
  EXPECT_EQ(rx_.frames[0].bytes, Frame(100, 7));
  EXPECT_FALSE(ep_->connected());
  EXPECT_EQ(ep_->stream_stats().disconnect_bad_length, 1u);
  EXPECT_EQ(ep_->WriteFd(), -1);
  // The peer sees the connection closed.
  ASSERT_TRUE(WaitReadable(peer_.get(), 1000));
  uint8_t b;
  EXPECT_EQ(::read(peer_.get(), &b, 1), 0);
  // Transmit now drops, counted.
  buffer::PacketChain chain;
  chain.PushBack(maker_.Make(Frame(60, 1), 14));
  EXPECT_EQ(ep_->Transmit(chain, kT0), 0u);
  EXPECT_TRUE(chain.empty());
  EXPECT_EQ(ep_->stream_stats().tx_not_connected, 1u);
  EXPECT_EQ(ep_->Stats().tx_dropped, 1u);
}

INSTANTIATE_TEST_SUITE_P(Lengths, BadLengthTest,
                         ::testing::Values(0u, 65536u, 0x7fffffffu,
                                           0xffffffffu));

TEST_F(UnixStreamTest, RuntsAndOversizeFramesAreSkippedInSync) {
  std::vector<uint8_t> stream;
  for (const auto& f : {Frame(5, 1), Frame(1600, 2), Frame(1518, 3)}) {
    const auto framed = Framed(f);
    stream.insert(stream.end(), framed.begin(), framed.end());
  }
  WriteAll(peer_.get(), stream);
  Pump();
  ASSERT_EQ(rx_.frames.size(), 1u);  // MTU 1500: 1518 fits, 1600 does not
  EXPECT_EQ(rx_.frames[0].bytes, Frame(1518, 3));
  EXPECT_EQ(ep_->stream_stats().rx_runt, 1u);
  EXPECT_EQ(ep_->stream_stats().rx_oversize, 1u);
  EXPECT_EQ(ep_->Stats().rx_dropped, 2u);
  EXPECT_TRUE(ep_->connected());
}

TEST_F(UnixStreamTest, TransmitWritesPrefixedFramesInOneCall) {
  buffer::PacketChain chain;
  std::vector<std::vector<uint8_t>> sent;
  for (uint32_t id = 1; id <= 10; ++id) {
    sent.push_back(Frame(54 + id * 50, id));
    chain.PushBack(maker_.Make(sent.back(), 54));
  }
  EXPECT_EQ(ep_->Transmit(chain, kT0), 10u);
  EXPECT_TRUE(chain.empty());
  const LinkStats s = ep_->Stats();
  EXPECT_EQ(s.tx_syscalls, 1u);
  EXPECT_EQ(s.tx_frames, 10u);
  std::vector<uint8_t> stream;
  ReadAvailable(peer_.get(), stream);
  std::vector<std::vector<uint8_t>> got;
  ASSERT_TRUE(Unframe(stream, got));
  EXPECT_EQ(got, sent);
}

TEST_F(UnixStreamTest, BadPacketsAreDroppedOthersSent) {
  buffer::PacketChain chain;
  chain.PushBack(maker_.Make(Frame(10, 1), 10));  // runt
  chain.PushBack(maker_.Make(Frame(100, 2), 14));
  chain.PushBack(maker_.Make(Frame(3000, 3), 14));  // > MTU
  chain.PushBack(maker_.Make(Frame(100, 4), 14));
  EXPECT_EQ(ep_->Transmit(chain, kT0), 2u);
  EXPECT_TRUE(chain.empty());
  EXPECT_EQ(ep_->stream_stats().tx_runt, 1u);
  EXPECT_EQ(ep_->stream_stats().tx_oversize, 1u);
  std::vector<uint8_t> stream;
  ReadAvailable(peer_.get(), stream);
  std::vector<std::vector<uint8_t>> got;
  ASSERT_TRUE(Unframe(stream, got));
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0], Frame(100, 2));
  EXPECT_EQ(got[1], Frame(100, 4));
}

TEST_F(UnixStreamTest, PartialWritesResumeAndKeepTheStreamIntact) {
  // Small socket buffers, so a chain of 200 frames cannot go at once.
  const int small = 4096;
  ASSERT_EQ(::setsockopt(ep_->WriteFd(), SOL_SOCKET, SO_SNDBUF, &small,
                         sizeof(small)),
            0);
  ASSERT_EQ(
      ::setsockopt(peer_.get(), SOL_SOCKET, SO_RCVBUF, &small, sizeof(small)),
      0);
  buffer::PacketChain chain;
  std::vector<std::vector<uint8_t>> sent;
  for (uint32_t id = 0; id < 200; ++id) {
    sent.push_back(Frame(60 + (id * 131) % 1400, id));
    chain.PushBack(maker_.Make(sent.back(), 34));
  }
  std::vector<uint8_t> stream;
  size_t total_sent = 0;
  int rounds = 0;
  while (!chain.empty() && rounds < 10000) {
    const size_t before = chain.size();
    const size_t n = ep_->Transmit(chain, kT0);
    total_sent += n;
    EXPECT_EQ(before - chain.size(), n);
    ReadAvailable(peer_.get(), stream);
    ++rounds;
  }
  ASSERT_TRUE(chain.empty());
  ReadAvailable(peer_.get(), stream);
  EXPECT_EQ(total_sent, 200u);
  EXPECT_GT(rounds, 1);
  EXPECT_GT(ep_->stream_stats().tx_partial_writes, 0u);
  std::vector<std::vector<uint8_t>> got;
  ASSERT_TRUE(Unframe(stream, got));
  EXPECT_EQ(got, sent);
  EXPECT_EQ(ep_->Stats().tx_frames, 200u);
}

TEST_F(UnixStreamTest, SplitFrameIsFinishedEvenIfCallerDropsTheChain) {
  // The LinkEndpoint contract says to retry with the same chain; a caller
  // that drops it instead must not corrupt the stream.
  const int small = 4096;
  ASSERT_EQ(::setsockopt(ep_->WriteFd(), SOL_SOCKET, SO_SNDBUF, &small,
                         sizeof(small)),
            0);
  std::vector<std::vector<uint8_t>> sent;
  {
    buffer::PacketChain chain;
    for (uint32_t id = 0; id < 100; ++id) {
      sent.push_back(Frame(1400, id));
      chain.PushBack(maker_.Make(sent.back(), 34));
    }
    const size_t n = ep_->Transmit(chain, kT0);
    ASSERT_LT(n, 100u);
    // A UNIX stream socket takes what fits, so the last frame is split.
    ASSERT_EQ(ep_->stream_stats().tx_partial_writes, 1u);
    // Frames up to and including the split one reach the peer.
    sent.resize(n + 1);
  }  // chain (with the split packet at its front) dropped here
  std::vector<uint8_t> stream;
  buffer::PacketChain next;
  sent.push_back(Frame(200, 999));
  next.PushBack(maker_.Make(sent.back(), 34));
  for (int i = 0; i < 1000 && !next.empty(); ++i) {
    ReadAvailable(peer_.get(), stream);
    ep_->Transmit(next, kT0);
  }
  ASSERT_TRUE(next.empty());
  ReadAvailable(peer_.get(), stream);
  std::vector<std::vector<uint8_t>> got;
  ASSERT_TRUE(Unframe(stream, got));
  EXPECT_EQ(got, sent);
}

TEST_F(UnixStreamTest, PeerCloseIsCounted) {
  const int read_fd = ep_->ReadFd();
  peer_.reset();
  Pump();
  EXPECT_FALSE(ep_->connected());
  EXPECT_EQ(ep_->stream_stats().disconnect_peer_closed, 1u);
  EXPECT_EQ(ep_->ReadFd(), read_fd);  // stays the same for the event loop
  EXPECT_FALSE(WaitReadable(read_fd, 0));
}

TEST_F(UnixStreamTest, PausesWhenPoolIsExhaustedAndResumes) {
  buffer::ChunkPool tiny(1);
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  UniqueFd peer(sv[1]);
  auto ep =
      UnixStreamEndpoint::FromConnectedFd(sv[0], UnixStreamOptions{}, tiny);
  ASSERT_TRUE(ep.ok()) << ep.status();
  CapturingReceiver rx;
  rx.keep_views = true;  // the receiver holds the only chunk
  (*ep)->Attach(&rx);
  std::vector<uint8_t> stream;
  std::vector<std::vector<uint8_t>> sent;
  for (uint32_t id = 0; id < 60; ++id) {  // ~90 KB: more than one chunk
    sent.push_back(Frame(1500, id));
    const auto f = Framed(sent.back());
    stream.insert(stream.end(), f.begin(), f.end());
  }
  WriteAll(peer.get(), stream);
  Instant now = kT0;
  while (WaitReadable((*ep)->ReadFd(), 0)) (*ep)->OnReadable(now);
  EXPECT_LT(rx.frames.size(), sent.size());
  EXPECT_EQ((*ep)->stream_stats().rx_no_buffer, 1u);
  EXPECT_NE((*ep)->NextDeadline(), kNever);
  EXPECT_FALSE(WaitReadable((*ep)->ReadFd(), 0));  // paused: no busy loop
  // The receiver lets go; the endpoint resumes at its deadline.
  for (CapturedFrame& f : rx.frames) f.view = buffer::PayloadView();
  now = (*ep)->NextDeadline();
  (*ep)->Poll(now);
  EXPECT_EQ((*ep)->NextDeadline(), kNever);
  while (WaitReadable((*ep)->ReadFd(), 100)) {
    (*ep)->OnReadable(now);
    for (CapturedFrame& f : rx.frames) f.view = buffer::PayloadView();
  }
  ASSERT_EQ(rx.frames.size(), sent.size());
  for (size_t i = 0; i < sent.size(); ++i)
    EXPECT_EQ(rx.frames[i].bytes, sent[i]);
}

// Not under TEST_TMPDIR: Bazel's paths can exceed the 107 bytes of
// sun_path.
std::string TempSocketPath(const std::string& name) {
  return absl::StrCat("/tmp/nst-link-", ::getpid(), "-", name);
}

UniqueFd ConnectRaw(const std::string& path) {
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  socklen_t len;
  if (path[0] == '@') {
    std::memcpy(a.sun_path + 1, path.data() + 1, path.size() - 1);
    len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + path.size());
  } else {
    std::memcpy(a.sun_path, path.data(), path.size());
    len = sizeof(a);
  }
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&a), len) != 0) {
    ADD_FAILURE() << "connect " << path << ": " << std::strerror(errno);
  }
  return fd;
}

void ExpectFrameArrives(UnixStreamEndpoint& ep, CapturingReceiver& rx, int peer,
                        uint32_t id) {
  const size_t before = rx.frames.size();
  WriteAll(peer, Framed(Frame(100, id)));
  ASSERT_TRUE(WaitReadable(ep.ReadFd(), 1000));
  ep.OnReadable(kT0);
  ASSERT_EQ(rx.frames.size(), before + 1);
  EXPECT_EQ(rx.frames.back().bytes, Frame(100, id));
}

class UnixListenTest : public ::testing::TestWithParam<bool> {};

TEST_P(UnixListenTest, AcceptsOnePeerAtATime) {
  const bool abstract = GetParam();
  const std::string path = abstract
                               ? absl::StrCat("@nst-link-test-", ::getpid())
                               : TempSocketPath("listen.sock");
  buffer::ChunkPool chunks(16);
  UnixStreamOptions o;
  o.mode = UnixStreamOptions::Mode::kListen;
  o.path = path;
  CapturingReceiver rx;
  {
    auto ep = UnixStreamEndpoint::Open(o, chunks);
    ASSERT_TRUE(ep.ok()) << ep.status();
    (*ep)->Attach(&rx);
    const int read_fd = (*ep)->ReadFd();
    EXPECT_FALSE((*ep)->connected());
    EXPECT_EQ((*ep)->WriteFd(), -1);

    UniqueFd first = ConnectRaw(path);
    ASSERT_TRUE(WaitReadable(read_fd, 1000));
    (*ep)->OnReadable(kT0);
    EXPECT_TRUE((*ep)->connected());

    // A second peer is turned away while the first is connected.
    UniqueFd second = ConnectRaw(path);
    ASSERT_TRUE(WaitReadable(read_fd, 1000));
    (*ep)->OnReadable(kT0);
    EXPECT_EQ((*ep)->stream_stats().rejected_peers, 1u);
    ASSERT_TRUE(WaitReadable(second.get(), 1000));
    uint8_t b;
    EXPECT_EQ(::read(second.get(), &b, 1), 0);

    ExpectFrameArrives(**ep, rx, first.get(), 1);

    // After the first peer leaves, a new one is accepted.
    first.reset();
    ASSERT_TRUE(WaitReadable(read_fd, 1000));
    (*ep)->OnReadable(kT0);
    EXPECT_FALSE((*ep)->connected());
    UniqueFd third = ConnectRaw(path);
    ASSERT_TRUE(WaitReadable(read_fd, 1000));
    (*ep)->OnReadable(kT0);
    EXPECT_TRUE((*ep)->connected());
    EXPECT_EQ((*ep)->ReadFd(), read_fd);
    ExpectFrameArrives(**ep, rx, third.get(), 3);
    EXPECT_EQ((*ep)->stream_stats().connections, 2u);

    // Our frames reach the new peer.
    buffer::PacketPool packets(4);
    PacketMaker maker(packets, chunks);
    buffer::PacketChain chain;
    chain.PushBack(maker.Make(Frame(80, 42), 14));
    EXPECT_EQ((*ep)->Transmit(chain, kT0), 1u);
    std::vector<uint8_t> stream;
    ASSERT_TRUE(WaitReadable(third.get(), 1000));
    ReadAvailable(third.get(), stream);
    EXPECT_EQ(stream, Framed(Frame(80, 42)));
    EXPECT_EQ((*ep)->Name(), absl::StrCat("unix:", path));
  }
  if (!abstract) {
    struct stat st;
    EXPECT_NE(::lstat(path.c_str(), &st), 0) << "socket file left behind";
  }
}

INSTANTIATE_TEST_SUITE_P(PathKinds, UnixListenTest, ::testing::Bool(),
                         [](const auto& info) {
                           return info.param ? "Abstract" : "Filesystem";
                         });

// A peer of another user: a forked child that becomes uid/gid 65534,
// connects to `path`, says so on a pipe, and waits (up to 2 s) for the
// endpoint to close the connection. It exits 0 if it saw EOF (refused),
// 1 if the connection stayed open (accepted), 2 if it could not connect.
class OtherUserPeer {
 public:
  explicit OtherUserPeer(const std::string& path) {
    int p[2];
    if (::pipe2(p, O_CLOEXEC) != 0) return;
    pid_ = ::fork();
    if (pid_ == 0) {
      ::close(p[0]);
      if (::setgroups(0, nullptr) != 0 || ::setgid(65534) != 0 ||
          ::setuid(65534) != 0) {
        ::_exit(3);
      }
      const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_un a{};
      a.sun_family = AF_UNIX;
      std::memcpy(a.sun_path + 1, path.data() + 1, path.size() - 1);
      const socklen_t len =
          static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + path.size());
      if (::connect(fd, reinterpret_cast<sockaddr*>(&a), len) != 0) {
        ::_exit(2);
      }
      (void)!::write(p[1], "c", 1);
      pollfd pfd{fd, POLLIN, 0};
      if (::poll(&pfd, 1, 2000) != 1) ::_exit(1);
      char b;
      ::_exit(::read(fd, &b, 1) == 0 ? 0 : 1);
    }
    ::close(p[1]);
    char b;
    connected_ = ::read(p[0], &b, 1) == 1;
    ::close(p[0]);
  }
  bool connected() const { return connected_; }
  // The child's exit code (-1 if it did not exit normally).
  int Wait() {
    int status = 0;
    if (pid_ <= 0 || ::waitpid(pid_, &status, 0) != pid_) return -1;
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  ~OtherUserPeer() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }

 private:
  pid_t pid_ = -1;
  bool connected_ = false;
};

// The review's finding 11 (2026-12-06): any local user could connect to
// an abstract --unix name first and become the guest. A peer of another
// uid than ours (and not root) is closed at accept and counted; our own
// peer is accepted afterwards.
TEST(UnixStreamPeerTest, AnotherUserIsRefusedAndTheOwnerAccepted) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root (a peer as uid 65534)";
  const std::string path = absl::StrCat("@nst-link-peer-", ::getpid());
  buffer::ChunkPool chunks(16);
  UnixStreamOptions o;
  o.mode = UnixStreamOptions::Mode::kListen;
  o.path = path;
  auto ep = UnixStreamEndpoint::Open(o, chunks);
  ASSERT_TRUE(ep.ok()) << ep.status();
  CapturingReceiver rx;
  (*ep)->Attach(&rx);
  const int read_fd = (*ep)->ReadFd();

  OtherUserPeer stranger(path);
  ASSERT_TRUE(stranger.connected());
  ASSERT_TRUE(WaitReadable(read_fd, 1000));
  (*ep)->OnReadable(kT0);
  EXPECT_FALSE((*ep)->connected()) << "another user became the guest";
  EXPECT_EQ((*ep)->stream_stats().refused_peers, 1u);
  EXPECT_EQ(stranger.Wait(), 0) << "the stranger's connection stayed open";

  UniqueFd owner = ConnectRaw(path);
  ASSERT_TRUE(WaitReadable(read_fd, 1000));
  (*ep)->OnReadable(kT0);
  ASSERT_TRUE((*ep)->connected()) << "the owner was refused";
  ExpectFrameArrives(**ep, rx, owner.get(), 7);
  EXPECT_EQ((*ep)->stream_stats().connections, 1u);
}

// --unix-allow-uid: that user may be the guest too.
TEST(UnixStreamPeerTest, AnAllowedUidIsAccepted) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root (a peer as uid 65534)";
  const std::string path = absl::StrCat("@nst-link-allowed-", ::getpid());
  buffer::ChunkPool chunks(16);
  UnixStreamOptions o;
  o.mode = UnixStreamOptions::Mode::kListen;
  o.path = path;
  o.allow_uid = 65534;
  auto ep = UnixStreamEndpoint::Open(o, chunks);
  ASSERT_TRUE(ep.ok()) << ep.status();
  OtherUserPeer vm(path);
  ASSERT_TRUE(vm.connected());
  ASSERT_TRUE(WaitReadable((*ep)->ReadFd(), 1000));
  (*ep)->OnReadable(kT0);
  EXPECT_TRUE((*ep)->connected());
  EXPECT_EQ((*ep)->stream_stats().refused_peers, 0u);
  EXPECT_EQ(vm.Wait(), 1) << "the allowed peer was closed";
}

// A socket file is made 0600 whatever the umask: only our user (and
// root) can connect to it. With --unix-allow-uid it is 0666, and the
// peer check decides.
TEST(UnixStreamPeerTest, ASocketFileIsPrivate) {
  const mode_t old = ::umask(022);
  for (const bool allow : {false, true}) {
    const std::string path = TempSocketPath(allow ? "open.sock" : "own.sock");
    buffer::ChunkPool chunks(2);
    UnixStreamOptions o;
    o.mode = UnixStreamOptions::Mode::kListen;
    o.path = path;
    if (allow) o.allow_uid = 65534;
    auto ep = UnixStreamEndpoint::Open(o, chunks);
    ASSERT_TRUE(ep.ok()) << ep.status();
    struct stat st;
    ASSERT_EQ(::lstat(path.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, allow ? 0666u : 0600u) << path;
  }
  EXPECT_EQ(::umask(old), 022u) << "the umask was not restored";
}

// A listener of another user: a forked child that becomes uid/gid 65534,
// listens on abstract `path`, says so on a pipe, and waits (up to 2 s)
// for a connection. It exits 0 if the connection was closed at once
// (refused), 1 if it stayed open (taken), 2 if none came.
class OtherUserListener {
 public:
  explicit OtherUserListener(const std::string& path) {
    int p[2];
    if (::pipe2(p, O_CLOEXEC) != 0) return;
    pid_ = ::fork();
    if (pid_ == 0) {
      ::close(p[0]);
      if (::setgroups(0, nullptr) != 0 || ::setgid(65534) != 0 ||
          ::setuid(65534) != 0) {
        ::_exit(3);
      }
      const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_un a{};
      a.sun_family = AF_UNIX;
      std::memcpy(a.sun_path + 1, path.data() + 1, path.size() - 1);
      const socklen_t len =
          static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + path.size());
      if (::bind(fd, reinterpret_cast<sockaddr*>(&a), len) != 0 ||
          ::listen(fd, 4) != 0) {
        ::_exit(4);
      }
      (void)!::write(p[1], "l", 1);
      pollfd pfd{fd, POLLIN, 0};
      if (::poll(&pfd, 1, 2000) != 1) ::_exit(2);
      const int c = ::accept(fd, nullptr, nullptr);
      if (c < 0) ::_exit(2);
      pfd = {c, POLLIN, 0};
      if (::poll(&pfd, 1, 2000) != 1) ::_exit(1);
      char b;
      ::_exit(::read(c, &b, 1) == 0 ? 0 : 1);
    }
    ::close(p[1]);
    char b;
    listening_ = ::read(p[0], &b, 1) == 1;
    ::close(p[0]);
  }
  bool listening() const { return listening_; }
  // The child's exit code (-1 if it did not exit normally).
  int Wait() {
    int status = 0;
    if (pid_ <= 0 || ::waitpid(pid_, &status, 0) != pid_) return -1;
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  ~OtherUserListener() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }

 private:
  pid_t pid_ = -1;
  bool listening_ = false;
};

// The second review of issue #30, finding 8: --unix @name --unix-connect
// took whoever listened on the name as the guest's side. Any local user
// who binds an abstract name first (it has no permissions) would then
// get the guest's frames and could answer as the VM. The listener's uid
// (SO_PEERCRED, taken at its listen()) must be ours, root's or the
// allowed one; connect mode makes one connection, so a refusal is an
// error that names the uid.
TEST(UnixStreamPeerTest, ConnectModeRefusesAnotherUsersListener) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root (a listener as uid 65534)";
  const std::string path = absl::StrCat("@nst-link-squat-", ::getpid());
  OtherUserListener squatter(path);
  ASSERT_TRUE(squatter.listening());
  buffer::ChunkPool chunks(16);
  UnixStreamOptions o;
  o.mode = UnixStreamOptions::Mode::kConnect;
  o.path = path;
  auto ep = UnixStreamEndpoint::Open(o, chunks);
  ASSERT_FALSE(ep.ok()) << "uid 65534's listener became the guest's side";
  EXPECT_EQ(ep.status().code(), absl::StatusCode::kPermissionDenied)
      << ep.status();
  const std::string message(ep.status().message());
  EXPECT_NE(message.find("uid 65534"), std::string::npos) << message;
  EXPECT_EQ(squatter.Wait(), 0) << "the connection to it stayed open";
}

// --unix-allow-uid: that user's listener may be the guest's side.
TEST(UnixStreamPeerTest, ConnectModeTakesAnAllowedUidsListener) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root (a listener as uid 65534)";
  const std::string path = absl::StrCat("@nst-link-vm-", ::getpid());
  OtherUserListener vm(path);
  ASSERT_TRUE(vm.listening());
  buffer::ChunkPool chunks(16);
  UnixStreamOptions o;
  o.mode = UnixStreamOptions::Mode::kConnect;
  o.path = path;
  o.allow_uid = 65534;
  auto ep = UnixStreamEndpoint::Open(o, chunks);
  ASSERT_TRUE(ep.ok()) << ep.status();
  EXPECT_TRUE((*ep)->connected());
  EXPECT_EQ((*ep)->stream_stats().connections, 1u);
  EXPECT_EQ((*ep)->stream_stats().refused_peers, 0u);
  EXPECT_EQ(vm.Wait(), 1) << "the allowed listener's connection was closed";
}

TEST(UnixStreamOpenTest, ConnectModeTalksToAListener) {
  const std::string path = TempSocketPath("connect.sock");
  ::unlink(path.c_str());
  UniqueFd listener(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::memcpy(a.sun_path, path.data(), path.size());
  ASSERT_EQ(::bind(listener.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)),
            0);
  ASSERT_EQ(::listen(listener.get(), 1), 0);

  buffer::ChunkPool chunks(8);
  UnixStreamOptions o;
  o.path = path;
  auto ep = UnixStreamEndpoint::Open(o, chunks);
  ASSERT_TRUE(ep.ok()) << ep.status();
  UniqueFd peer(::accept(listener.get(), nullptr, nullptr));
  ASSERT_TRUE(peer.valid());
  CapturingReceiver rx;
  (*ep)->Attach(&rx);
  ExpectFrameArrives(**ep, rx, peer.get(), 5);
  ::unlink(path.c_str());
}

TEST(UnixStreamOpenTest, ClearErrors) {
  buffer::ChunkPool chunks(2);
  UnixStreamOptions o;
  o.path = TempSocketPath("nobody-here.sock");
  auto missing = UnixStreamEndpoint::Open(o, chunks);
  ASSERT_FALSE(missing.ok());
  EXPECT_TRUE(absl::IsNotFound(missing.status())) << missing.status();
  EXPECT_NE(std::string(missing.status().message()).find("no UNIX socket at"),
            std::string::npos);

  // A listener in use: a second endpoint cannot take the path.
  UnixStreamOptions l;
  l.mode = UnixStreamOptions::Mode::kListen;
  l.path = TempSocketPath("busy.sock");
  auto first = UnixStreamEndpoint::Open(l, chunks);
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = UnixStreamEndpoint::Open(l, chunks);
  ASSERT_FALSE(second.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(second.status())) << second.status();
  EXPECT_NE(std::string(second.status().message()).find("is in use"),
            std::string::npos);

  UnixStreamOptions long_path;
  long_path.path = "/" + std::string(200, 'x');
  EXPECT_TRUE(absl::IsInvalidArgument(
      UnixStreamEndpoint::Open(long_path, chunks).status()));
  UnixStreamOptions bad_mtu;
  bad_mtu.path = "/tmp/x";
  bad_mtu.mtu = 65522;
  EXPECT_TRUE(absl::IsInvalidArgument(
      UnixStreamEndpoint::Open(bad_mtu, chunks).status()));
  int pipefd[2];
  ASSERT_EQ(::pipe(pipefd), 0);
  ::close(pipefd[1]);
  EXPECT_FALSE(UnixStreamEndpoint::FromConnectedFd(pipefd[0],
                                                   UnixStreamOptions{}, chunks)
                   .ok());
}

TEST(UnixStreamOpenTest, StaleSocketFileIsReplaced) {
  const std::string path = TempSocketPath("stale.sock");
  ::unlink(path.c_str());
  {
    UniqueFd s(::socket(AF_UNIX, SOCK_STREAM, 0));
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::memcpy(a.sun_path, path.data(), path.size());
    ASSERT_EQ(::bind(s.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  }  // closed without unlink: a stale file, nobody listens
  buffer::ChunkPool chunks(2);
  UnixStreamOptions l;
  l.mode = UnixStreamOptions::Mode::kListen;
  l.path = path;
  auto ep = UnixStreamEndpoint::Open(l, chunks);
  EXPECT_TRUE(ep.ok()) << ep.status();
}

}  // namespace
}  // namespace netstack::link
