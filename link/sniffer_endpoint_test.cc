#include "link/sniffer_endpoint.h"

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "link/channel_endpoint.h"
#include "link/link_test_util.h"
#include "netstack/buffer/chunk.h"
#include "netstack/buffer/packet.h"
#include "netstack/link/link_endpoint.h"
#include "tests/pcap_fixture.h"

namespace netstack::link {
namespace {

using ::netstack::link::testing::FrameId;
using ::netstack::link::testing::MakePacket;
using ::netstack::link::testing::RecordingEndpoint;
using ::netstack::link::testing::RecordingReceiver;
using ::netstack::link::testing::TestFrame;
using ::netstack::testing::CapturedFrame;
using ::netstack::testing::PcapCapture;
using ::netstack::testing::ReadPcapFile;

// Whole microseconds: pcap keeps microseconds.
const Instant kT0 = absl::FromUnixMicros(1'700'000'000'123'456);

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return absl::StrCat(dir != nullptr ? dir : "/tmp", "/", name);
}

// What tshark makes of the file: one frame.len per line. Fails (not skips)
// when tshark is missing: .ci installs it, and this test exists to check
// our files against a reader nobody here wrote.
std::vector<std::string> TsharkFrameLengths(const std::string& path) {
  constexpr char kTshark[] = "/usr/bin/tshark";
  if (access(kTshark, X_OK) != 0) {
    ADD_FAILURE() << kTshark
                  << " is missing: install Debian's tshark package "
                     "(tools/dev/install-deps does)";
    return {};
  }
  const std::string err = path + ".tshark.stderr";
  // tshark wants a writable home for its profile directory.
  const std::string command =
      absl::StrCat("HOME='", TempPath(""), "' ", kTshark, " -r '", path,
                   "' -T fields -e frame.len 2>'", err, "'");
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) {
    ADD_FAILURE() << "popen(" << command << ") failed";
    return {};
  }
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), pipe)) > 0) out.append(buf, n);
  const int status = pclose(pipe);
  if (status != 0) {
    ADD_FAILURE() << "tshark exited with status " << status << "; see " << err;
    return {};
  }
  std::vector<std::string> lines = absl::StrSplit(out, '\n', absl::SkipEmpty());
  return lines;
}

class SnifferTest : public ::testing::Test {
 protected:
  void TearDown() override {
    EXPECT_EQ(packets_.stats().in_use, 0u);
    EXPECT_EQ(chunks_.stats().in_use, 0u);
  }
  buffer::ChunkPool chunks_{256};
  buffer::PacketPool packets_{512};
};

// Frames in both directions land in the file with identical bytes, in the
// order they crossed, with the `now` of their crossing; libpcap and tshark
// both read it back.
TEST_F(SnifferTest, RecordsBothDirections) {
  const std::string path = TempPath("both.pcap");
  auto pair = CreateChannelPair(chunks_, ChannelOptions{});
  ASSERT_TRUE(pair.ok()) << pair.status();
  ChannelEndpoint* a = pair->a.get();
  auto sniffer = SnifferEndpoint::Create(std::move(pair->a), path);
  ASSERT_TRUE(sniffer.ok()) << sniffer.status();
  RecordingReceiver rx_a;
  RecordingReceiver rx_b;
  (*sniffer)->Attach(&rx_a);
  pair->b->Attach(&rx_b);

  std::vector<std::pair<Instant, std::vector<uint8_t>>> expected;
  // Out: five frames of different sizes, scattered over headers and views.
  const size_t sizes[] = {60, 1514, 342, 1000, 64};
  buffer::PacketChain out;
  for (uint32_t i = 0; i < 5; ++i) {
    std::vector<uint8_t> f = TestFrame(sizes[i], i);
    out.PushBack(MakePacket(packets_, chunks_, f, 54, 1 + i % 3));
    expected.emplace_back(kT0, std::move(f));
  }
  EXPECT_EQ((*sniffer)->Transmit(out, kT0), 5u);

  // In: three frames from B, delivered at a later Poll.
  const Instant t1 = kT0 + absl::Microseconds(2500);
  buffer::PacketChain in;
  for (uint32_t i = 0; i < 3; ++i) {
    std::vector<uint8_t> f = TestFrame(100 + 400 * i, 100 + i);
    in.PushBack(MakePacket(packets_, chunks_, f, 14));
    expected.emplace_back(t1, std::move(f));
  }
  pair->b->Transmit(in, kT0);
  EXPECT_EQ((*sniffer)->NextDeadline(), kT0);  // forwarded from A
  (*sniffer)->Poll(t1);
  ASSERT_EQ(rx_a.frames.size(), 3u);  // passed on to the receiver
  EXPECT_EQ(FrameId(rx_a.frames[2].bytes), 102u);

  // Out again, later.
  const Instant t2 = t1 + absl::Seconds(3);
  buffer::PacketChain last;
  std::vector<uint8_t> f = TestFrame(1514, 200);
  last.PushBack(MakePacket(packets_, chunks_, f, 54, 2));
  expected.emplace_back(t2, std::move(f));
  (*sniffer)->Transmit(last, t2);
  pair->b->Poll(t2);
  EXPECT_EQ(rx_b.frames.size(), 6u);

  EXPECT_EQ((*sniffer)->frames_out(), 6u);
  EXPECT_EQ((*sniffer)->frames_in(), 3u);
  EXPECT_EQ((*sniffer)->Stats().tx_frames, a->Stats().tx_frames);
  EXPECT_EQ((*sniffer)->Name(),
            absl::StrCat("sniffer(pcap:", path, ") -> channel:a"));
  sniffer->reset();  // flushes and closes

  absl::StatusOr<PcapCapture> capture = ReadPcapFile(path);
  ASSERT_TRUE(capture.ok()) << capture.status();
  EXPECT_EQ(capture->link_type, 1);  // DLT_EN10MB
  EXPECT_EQ(capture->snaplen, SnifferEndpoint::kSnapLen);
  ASSERT_EQ(capture->frames.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    const CapturedFrame& c = capture->frames[i];
    EXPECT_EQ(c.timestamp, expected[i].first) << "frame " << i;
    EXPECT_EQ(c.bytes, expected[i].second) << "frame " << i;
    EXPECT_EQ(c.original_length, expected[i].second.size()) << "frame " << i;
  }

  const std::vector<std::string> lengths = TsharkFrameLengths(path);
  ASSERT_EQ(lengths.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(lengths[i], absl::StrCat(expected[i].second.size()));
  }
}

// Packets the inner endpoint leaves in the chain (its fd would block) are
// recorded once, when a later Transmit consumes them.
TEST_F(SnifferTest, RetriedPacketsAreRecordedOnce) {
  const std::string path = TempPath("retry.pcap");
  auto inner = std::make_unique<RecordingEndpoint>(chunks_, 2);
  RecordingEndpoint* rec = inner.get();
  auto sniffer = SnifferEndpoint::Create(std::move(inner), path);
  ASSERT_TRUE(sniffer.ok()) << sniffer.status();
  buffer::PacketChain chain;
  for (uint32_t i = 0; i < 5; ++i) {
    chain.PushBack(MakePacket(packets_, chunks_, TestFrame(80, i), 54));
  }
  Instant now = kT0;
  EXPECT_EQ((*sniffer)->Transmit(chain, now), 2u);
  EXPECT_EQ(chain.size(), 3u);
  EXPECT_EQ((*sniffer)->frames_out(), 2u);
  while (!chain.empty()) {
    now += absl::Milliseconds(1);
    (*sniffer)->Transmit(chain, now);
  }
  // The sniffer owns (and destroys) the recording endpoint.
  const std::vector<RecordingEndpoint::Sent> sent = rec->sent;
  ASSERT_EQ(sent.size(), 5u);
  sniffer->reset();
  absl::StatusOr<PcapCapture> capture = ReadPcapFile(path);
  ASSERT_TRUE(capture.ok()) << capture.status();
  ASSERT_EQ(capture->frames.size(), 5u);
  for (uint32_t i = 0; i < 5; ++i) {
    EXPECT_EQ(FrameId(capture->frames[i].bytes), i);
    EXPECT_EQ(capture->frames[i].bytes, sent[i].bytes);
    EXPECT_EQ(capture->frames[i].timestamp, sent[i].time);
  }
  EXPECT_EQ(TsharkFrameLengths(path).size(), 5u);
}

// A GSO super-frame is longer than 65,535 bytes with its headers; the
// snap length (tcpdump's default) records it whole, so tshark does not
// call it cut short.
TEST_F(SnifferTest, RecordsSuperFramesWhole) {
  const std::string path = TempPath("snaplen.pcap");
  auto sniffer = SnifferEndpoint::Create(
      std::make_unique<RecordingEndpoint>(chunks_), path);
  ASSERT_TRUE(sniffer.ok()) << sniffer.status();
  const std::vector<uint8_t> big = TestFrame(54 + 65536, 1);
  buffer::PacketChain chain;
  chain.PushBack(MakePacket(packets_, chunks_, big, 54));
  (*sniffer)->Transmit(chain, kT0);
  sniffer->reset();
  absl::StatusOr<PcapCapture> capture = ReadPcapFile(path);
  ASSERT_TRUE(capture.ok()) << capture.status();
  ASSERT_EQ(capture->frames.size(), 1u);
  EXPECT_EQ(capture->frames[0].original_length, big.size());
  EXPECT_EQ(capture->frames[0].bytes, big);
}

// Records reach the file within the flush interval, while the sniffer is
// still open; NextDeadline asks for the Poll that flushes.
TEST_F(SnifferTest, FlushesPeriodically) {
  const std::string path = TempPath("flush.pcap");
  auto inner = std::make_unique<RecordingEndpoint>(chunks_);
  RecordingEndpoint* rec = inner.get();
  SnifferOptions options;
  options.flush_interval = absl::Milliseconds(100);
  auto sniffer = SnifferEndpoint::Create(std::move(inner), path, options);
  ASSERT_TRUE(sniffer.ok()) << sniffer.status();
  EXPECT_EQ((*sniffer)->NextDeadline(), kNever);
  RecordingReceiver rx;
  (*sniffer)->Attach(&rx);
  rec->Receive(TestFrame(60, 1), kT0);
  ASSERT_EQ(rx.frames.size(), 1u);
  EXPECT_EQ((*sniffer)->NextDeadline(), kT0 + absl::Milliseconds(100));
  (*sniffer)->Poll(kT0 + absl::Milliseconds(100));
  EXPECT_EQ((*sniffer)->NextDeadline(), kNever);
  EXPECT_EQ(rec->polls, 1u);  // Poll is forwarded too
  absl::StatusOr<PcapCapture> capture = ReadPcapFile(path);
  ASSERT_TRUE(capture.ok()) << capture.status();
  ASSERT_EQ(capture->frames.size(), 1u);
  EXPECT_EQ(capture->frames[0].bytes, TestFrame(60, 1));
  EXPECT_EQ((*sniffer)->write_errors(), 0u);
}

TEST_F(SnifferTest, UnwritablePathIsAClearError) {
  const std::string path = "/nonexistent-dir/x.pcap";
  auto sniffer = SnifferEndpoint::Create(
      std::make_unique<RecordingEndpoint>(chunks_), path);
  ASSERT_FALSE(sniffer.ok());
  EXPECT_EQ(sniffer.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string message(sniffer.status().message());
  EXPECT_NE(message.find(path), std::string::npos) << message;
  EXPECT_NE(message.find("No such file"), std::string::npos) << message;
}

TEST_F(SnifferTest, RejectsNullInner) {
  auto sniffer = SnifferEndpoint::Create(nullptr, TempPath("null.pcap"));
  EXPECT_EQ(sniffer.status().code(), absl::StatusCode::kInvalidArgument);
}

// A link that completes partial checksums is reported as one that does
// not: the stack then completes single TCP segments' sums itself, so the
// capture shows them right (issue #34).
TEST_F(SnifferTest, ReportsNoChecksumOffloadSoCapturesHoldFullSums) {
  class OffloadingEndpoint : public RecordingEndpoint {
   public:
    using RecordingEndpoint::RecordingEndpoint;
    LinkCapabilities Capabilities() const override {
      LinkCapabilities caps = RecordingEndpoint::Capabilities();
      caps.tx_checksum_offload = true;
      return caps;
    }
  };
  auto inner = std::make_unique<OffloadingEndpoint>(chunks_);
  ASSERT_TRUE(inner->Capabilities().tx_checksum_offload);
  auto sniffer =
      SnifferEndpoint::Create(std::move(inner), TempPath("csum.pcap"));
  ASSERT_TRUE(sniffer.ok());
  EXPECT_FALSE((*sniffer)->Capabilities().tx_checksum_offload);
}

TEST_F(SnifferTest, ForwardsCapabilitiesAndFds) {
  ChannelOptions options;
  options.mtu = 9000;
  auto pair = CreateChannelPair(chunks_, options);
  ASSERT_TRUE(pair.ok());
  auto sniffer =
      SnifferEndpoint::Create(std::move(pair->a), TempPath("caps.pcap"));
  ASSERT_TRUE(sniffer.ok());
  EXPECT_EQ((*sniffer)->Capabilities().mtu, 9000u);
  EXPECT_EQ((*sniffer)->ReadFd(), -1);
  EXPECT_EQ((*sniffer)->WriteFd(), -1);
}

}  // namespace
}  // namespace netstack::link
