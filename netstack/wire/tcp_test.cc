#include "netstack/wire/tcp.h"

#include <algorithm>
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "gtest/gtest.h"
#include "netstack/wire/address.h"
#include "netstack/wire/checksum.h"
#include "netstack/wire/testing.h"

namespace netstack::wire {
namespace {

using testing::ExpectEveryTruncationFails;
using testing::Hex;

constexpr uint8_t kProtoTcp = 6;

// Real Linux segments (kernel 6.18, default sysctls except tcp_rmem max
// 6 MiB, which gives window scale 7), captured with dumpcap on a veth pair
// between two network namespaces with transmit checksum offload turned off,
// so every checksum below is the kernel's own. Host 1 is 10.9.0.1 /
// fd00:9::1 (client, ports 40000-40002), host 2 is 10.9.0.2 / fd00:9::2
// (server, port 80). tshark reports every checksum as good.

// SYN: MSS 1460, SACK_PERM, TS, NOP, WS 7.
const std::vector<uint8_t> kSyn =
    Hex("9c 40 00 50 94 dc dc 5a 00 00 00 00 a0 02 fa f0"
        "ac 3a 00 00 02 04 05 b4 04 02 08 0a 04 2d 7a cb"
        "00 00 00 00 01 03 03 07");
// Its SYN-ACK.
const std::vector<uint8_t> kSynAck =
    Hex("00 50 9c 40 b7 45 96 c9 94 dc dc 5b a0 12 fe 88"
        "6f 54 00 00 02 04 05 b4 04 02 08 0a cc 95 1e 98"
        "04 2d 7a cb 01 03 03 07");
// The handshake's final ACK: NOP NOP TS.
const std::vector<uint8_t> kAck =
    Hex("9c 40 00 50 94 dc dc 5b b7 45 96 ca 80 10 01 f6"
        "9a b3 00 00 01 01 08 0a 04 2d 7a cb cc 95 1e 98");
// PSH|ACK carrying "GET / HTTP/1.0\r\n\r\n".
const std::vector<uint8_t> kRequest =
    Hex("9c 40 00 50 94 dc dc 5b b7 45 96 ca 80 18 01 f6"
        "bb f9 00 00 01 01 08 0a 04 2d 7a cb cc 95 1e 98"
        "47 45 54 20 2f 20 48 54 54 50 2f 31 2e 30 0d 0a"
        "0d 0a");
// The server's response: 43 bytes of payload, an odd length.
const std::vector<uint8_t> kResponse =
    Hex("00 50 9c 40 b7 45 96 ca 94 dc dc 6d 80 18 01 fd"
        "a7 92 00 00 01 01 08 0a cc 95 1e 98 04 2d 7a cb"
        "48 54 54 50 2f 31 2e 30 20 32 30 30 20 4f 4b 0d"
        "0a 43 6f 6e 74 65 6e 74 2d 4c 65 6e 67 74 68 3a"
        "20 35 0d 0a 0d 0a 68 65 6c 6c 6f");
// The same exchange over IPv6: SYN (MSS 1440), SYN-ACK, request.
const std::vector<uint8_t> kSyn6 =
    Hex("9c 41 00 50 3f 6a f3 19 00 00 00 00 a0 02 fd 20"
        "2c d3 00 00 02 04 05 a0 04 02 08 0a 09 69 4b 8b"
        "00 00 00 00 01 03 03 07");
const std::vector<uint8_t> kSynAck6 =
    Hex("00 50 9c 41 d8 94 d0 70 3f 6a f3 1a a0 12 fb 04"
        "08 8f 00 00 02 04 05 a0 04 02 08 0a 7f 1f fe 29"
        "09 69 4b 8b 01 03 03 07");
const std::vector<uint8_t> kRequest6 =
    Hex("9c 41 00 50 3f 6a f3 1a d8 94 d0 71 80 18 01 fb"
        "51 97 00 00 01 01 08 0a 09 69 4b 8b 7f 1f fe 29"
        "47 45 54 20 2f 20 48 54 54 50 2f 31 2e 30 0d 0a"
        "0d 0a");
// Duplicate ACKs from the server after out-of-order data arrived: NOP NOP
// TS, NOP NOP SACK with one block, then with two (newest first, RFC 2018
// section 4).
const std::vector<uint8_t> kSack1 =
    Hex("00 50 9c 42 2b 23 45 40 4e 69 91 5b b0 10 01 fd"
        "3e 03 00 00 01 01 08 0a 67 52 24 e4 dd 93 d5 88"
        "01 01 05 0a 4e 69 91 bf 4e 69 91 f1");
const std::vector<uint8_t> kSack2 =
    Hex("00 50 9c 42 2b 23 45 40 4e 69 91 5b d0 10 01 fd"
        "5b 7a 00 00 01 01 08 0a 67 52 25 49 dd 93 d5 88"
        "01 01 05 12 4e 69 92 87 4e 69 92 b9 4e 69 91 bf"
        "4e 69 91 f1");
// A RST without ACK and without options.
const std::vector<uint8_t> kRst =
    Hex("9c 42 00 50 4e 69 91 5c 00 00 00 00 50 04 00 00"
        "1f 74 00 00");

constexpr Ipv4Address kHost1 = Ipv4Address::FromU32(0x0a090001);
constexpr Ipv4Address kHost2 = Ipv4Address::FromU32(0x0a090002);

Ipv6Address Ip6(const char* text) { return *Ipv6Address::Parse(text); }

// One captured segment and the pseudo-header sum it was sent with.
struct Capture {
  std::string name;
  const std::vector<uint8_t>* bytes;
  uint16_t pseudo;
};

uint16_t Pseudo4(bool from_host1, size_t len) {
  return from_host1 ? Ipv4PseudoHeaderSum(kHost1, kHost2, kProtoTcp, len)
                    : Ipv4PseudoHeaderSum(kHost2, kHost1, kProtoTcp, len);
}

uint16_t Pseudo6(bool from_host1, size_t len) {
  const Ipv6Address h1 = Ip6("fd00:9::1");
  const Ipv6Address h2 = Ip6("fd00:9::2");
  return from_host1 ? Ipv6PseudoHeaderSum(h1, h2, kProtoTcp, len)
                    : Ipv6PseudoHeaderSum(h2, h1, kProtoTcp, len);
}

std::vector<Capture> Captures() {
  return {
      {"syn", &kSyn, Pseudo4(true, kSyn.size())},
      {"syn_ack", &kSynAck, Pseudo4(false, kSynAck.size())},
      {"ack", &kAck, Pseudo4(true, kAck.size())},
      {"request", &kRequest, Pseudo4(true, kRequest.size())},
      {"response", &kResponse, Pseudo4(false, kResponse.size())},
      {"syn6", &kSyn6, Pseudo6(true, kSyn6.size())},
      {"syn_ack6", &kSynAck6, Pseudo6(false, kSynAck6.size())},
      {"request6", &kRequest6, Pseudo6(true, kRequest6.size())},
      {"sack1", &kSack1, Pseudo4(false, kSack1.size())},
      {"sack2", &kSack2, Pseudo4(false, kSack2.size())},
      {"rst", &kRst, Pseudo4(true, kRst.size())},
  };
}

WireError ParseBytes(std::span<const uint8_t> b) {
  TcpRepr r;
  return TcpRepr::Parse(TcpHeader(b), r);
}

TcpRepr MustParse(std::span<const uint8_t> b) {
  TcpRepr r;
  EXPECT_EQ(TcpRepr::Parse(TcpHeader(b), r), WireError::kOk);
  return r;
}

std::vector<uint8_t> EmitHeader(const TcpRepr& r) {
  std::vector<uint8_t> out(r.BufferLen(), 0xee);
  r.Emit(MutableTcpHeader(out));
  return out;
}

std::string_view AsText(std::span<const uint8_t> b) {
  return std::string_view(reinterpret_cast<const char*>(b.data()), b.size());
}

// ---------------------------------------------------------------------------
// Parsing real segments.

TEST(TcpTest, ParseLinuxSyn) {
  const TcpHeader h(kSyn);
  ASSERT_EQ(h.Check(), WireError::kOk);
  EXPECT_EQ(h.DataOffset(), 10);
  EXPECT_EQ(h.HeaderLen(), 40u);
  EXPECT_EQ(h.Options().size(), 20u);
  EXPECT_TRUE(h.Payload().empty());
  EXPECT_EQ(h.Checksum(), 0xac3a);

  TcpRepr expected;
  expected.src_port = 40000;
  expected.dst_port = 80;
  expected.seq = 0x94dcdc5a;
  expected.ack = 0;
  expected.flags = tcp_flag::kSyn;
  expected.window = 64240;
  expected.mss = 1460;
  expected.sack_permitted = true;
  expected.timestamps = TcpTimestamps{0x042d7acb, 0};
  expected.window_scale = 7;
  EXPECT_EQ(MustParse(kSyn), expected);
}

TEST(TcpTest, ParseLinuxSynAck) {
  TcpRepr expected;
  expected.src_port = 80;
  expected.dst_port = 40000;
  expected.seq = 0xb74596c9;
  expected.ack = 0x94dcdc5b;
  expected.flags = tcp_flag::kSyn | tcp_flag::kAck;
  expected.window = 65160;
  expected.mss = 1460;
  expected.sack_permitted = true;
  expected.timestamps = TcpTimestamps{0xcc951e98, 0x042d7acb};
  expected.window_scale = 7;
  EXPECT_EQ(MustParse(kSynAck), expected);
  EXPECT_TRUE(TcpHeader(kSynAck).HasFlags(tcp_flag::kSyn | tcp_flag::kAck));
}

TEST(TcpTest, ParseLinuxDataSegmentWithTimestamps) {
  const TcpHeader h(kRequest);
  ASSERT_EQ(h.Check(), WireError::kOk);
  EXPECT_EQ(h.HeaderLen(), 32u);
  EXPECT_EQ(AsText(h.Payload()), "GET / HTTP/1.0\r\n\r\n");

  TcpRepr expected;
  expected.src_port = 40000;
  expected.dst_port = 80;
  expected.seq = 0x94dcdc5b;
  expected.ack = 0xb74596ca;
  expected.flags = tcp_flag::kPsh | tcp_flag::kAck;
  expected.window = 502;  // raw; << 7 by the receiver
  expected.timestamps = TcpTimestamps{0x042d7acb, 0xcc951e98};
  EXPECT_EQ(MustParse(kRequest), expected);

  // The pure ACK before it differs only in flags.
  expected.flags = tcp_flag::kAck;
  EXPECT_EQ(MustParse(kAck), expected);
}

TEST(TcpTest, ParseLinuxIpv6Segments) {
  const TcpRepr syn = MustParse(kSyn6);
  EXPECT_EQ(syn.mss, 1440);  // 1500 - 40 (IPv6) - 20 (TCP)
  EXPECT_EQ(syn.window_scale, 7);
  EXPECT_TRUE(syn.sack_permitted);
  EXPECT_EQ(syn.timestamps, (TcpTimestamps{0x09694b8b, 0}));
  const TcpRepr synack = MustParse(kSynAck6);
  EXPECT_EQ(synack.ack, syn.seq + 1);
  EXPECT_EQ(synack.timestamps, (TcpTimestamps{0x7f1ffe29, 0x09694b8b}));
  EXPECT_EQ(AsText(TcpHeader(kRequest6).Payload()), "GET / HTTP/1.0\r\n\r\n");
}

TEST(TcpTest, ParseLinuxSackBlocks) {
  TcpRepr expected;
  expected.src_port = 80;
  expected.dst_port = 40002;
  expected.seq = 0x2b234540;
  expected.ack = 0x4e69915b;
  expected.flags = tcp_flag::kAck;
  expected.window = 509;
  expected.timestamps = TcpTimestamps{0x675224e4, 0xdd93d588};
  expected.sack_count = 1;
  expected.sack_blocks[0] = {0x4e6991bf, 0x4e6991f1};
  EXPECT_EQ(MustParse(kSack1), expected);

  expected.timestamps = TcpTimestamps{0x67522549, 0xdd93d588};
  expected.sack_count = 2;
  expected.sack_blocks[0] = {0x4e699287, 0x4e6992b9};
  expected.sack_blocks[1] = {0x4e6991bf, 0x4e6991f1};
  EXPECT_EQ(MustParse(kSack2), expected);
}

TEST(TcpTest, ParseRstWithoutOptions) {
  TcpRepr expected;
  expected.src_port = 40002;
  expected.dst_port = 80;
  expected.seq = 0x4e69915c;
  expected.flags = tcp_flag::kRst;
  EXPECT_EQ(MustParse(kRst), expected);
  EXPECT_TRUE(TcpHeader(kRst).Options().empty());
}

// ---------------------------------------------------------------------------
// Emit and checksums against real segments.

TEST(TcpTest, LinuxSegmentsRoundTripByteExactly) {
  for (const Capture& c : Captures()) {
    SCOPED_TRACE(c.name);
    const std::vector<uint8_t>& bytes = *c.bytes;
    const TcpRepr r = MustParse(bytes);
    const TcpHeader in(bytes);
    ASSERT_EQ(r.BufferLen(), in.HeaderLen());

    std::vector<uint8_t> out(bytes.size(), 0xee);
    r.Emit(MutableTcpHeader(out));
    EXPECT_EQ(MutableTcpHeader(out).Checksum(), 0);
    std::copy(in.Payload().begin(), in.Payload().end(),
              out.begin() + r.BufferLen());
    MutableTcpHeader(out).FillChecksum(c.pseudo);
    EXPECT_EQ(out, bytes);
  }
}

TEST(TcpTest, LinuxChecksumsAreValid) {
  for (const Capture& c : Captures()) {
    SCOPED_TRACE(c.name);
    const TcpHeader h(*c.bytes);
    EXPECT_TRUE(h.ChecksumValid(c.pseudo));
    EXPECT_EQ(h.ComputeChecksum(c.pseudo), h.Checksum());
  }
}

TEST(TcpTest, CorruptionInvalidatesChecksum) {
  for (const Capture& c : Captures()) {
    SCOPED_TRACE(c.name);
    // Flip one bit in every byte position in turn: header, options and
    // payload are all covered.
    for (size_t i = 0; i < c.bytes->size(); ++i) {
      std::vector<uint8_t> bad = *c.bytes;
      bad[i] ^= 0x04;
      EXPECT_FALSE(TcpHeader(bad).ChecksumValid(c.pseudo)) << "byte " << i;
    }
    // The wrong pseudo-header (other direction's length) fails too.
    const TcpHeader h(*c.bytes);
    EXPECT_FALSE(h.ChecksumValid(static_cast<uint16_t>(c.pseudo + 1)));
  }
}

TEST(TcpTest, ScatteredPayloadChecksumEqualsContiguous) {
  for (const Capture& c : Captures()) {
    SCOPED_TRACE(c.name);
    const TcpHeader whole(*c.bytes);
    const std::span<const uint8_t> payload = whole.Payload();
    // The header alone, as a GSO splitter would build it, checksum zeroed.
    std::vector<uint8_t> header(c.bytes->begin(),
                                c.bytes->begin() + whole.HeaderLen());
    header[TcpHeader::kChecksumOffset] = 0;
    header[TcpHeader::kChecksumOffset + 1] = 0;
    // Every split of the payload into three pieces, including odd ones.
    for (size_t a = 0; a <= payload.size(); ++a) {
      for (size_t b = a; b <= payload.size(); ++b) {
        ChecksumAccumulator acc;
        acc.Add(payload.first(a));
        acc.Add(payload.subspan(a, b - a));
        acc.Add(payload.subspan(b));
        MutableTcpHeader h(header);
        ASSERT_EQ(h.ComputeChecksum(c.pseudo, acc), whole.Checksum())
            << a << "," << b;
        h.FillChecksum(c.pseudo, acc);
        ASSERT_EQ(header, std::vector<uint8_t>(c.bytes->begin(),
                                               c.bytes->begin() +
                                                   whole.HeaderLen()));
        ASSERT_TRUE(TcpHeader(header).ChecksumValid(c.pseudo, acc));
        header[TcpHeader::kChecksumOffset] = 0;
        header[TcpHeader::kChecksumOffset + 1] = 0;
      }
    }
  }
}

TEST(TcpTest, FillChecksumWithPayloadSumIgnoresBytesAfterHeader) {
  // The span may run on past the header (say, into a buffer's tailroom);
  // only the accumulator counts as payload.
  std::vector<uint8_t> buf = kRequest;
  const size_t header_len = TcpHeader(kRequest).HeaderLen();
  ChecksumAccumulator acc;
  acc.Add(TcpHeader(kRequest).Payload());
  std::fill(buf.begin() + header_len, buf.end(), 0x5a);
  MutableTcpHeader(buf).FillChecksum(Pseudo4(true, kRequest.size()), acc);
  EXPECT_EQ(MutableTcpHeader(buf).Checksum(), 0xbbf9);
}

TEST(TcpTest, ChecksumAcceptsEitherZeroEncoding) {
  // Find a header whose checksum computes to 0 by adjusting the urgent
  // pointer (no URG flag, so it is don't-care data), then check that a
  // field of 0xffff, the other ones'-complement zero, also validates.
  TcpRepr r;
  r.src_port = 1;
  r.dst_port = 2;
  r.flags = tcp_flag::kAck;
  std::vector<uint8_t> buf = EmitHeader(r);
  const uint16_t pseudo = Pseudo4(true, buf.size());
  const uint16_t c = MutableTcpHeader(buf).ComputeChecksum(pseudo);
  // Adding the checksum value into a summed word makes the total all ones.
  MutableTcpHeader(buf).SetUrgentPointer(c);
  EXPECT_EQ(MutableTcpHeader(buf).ComputeChecksum(pseudo), 0);
  MutableTcpHeader(buf).FillChecksum(pseudo);
  EXPECT_EQ(MutableTcpHeader(buf).Checksum(), 0);  // TCP keeps a zero
  EXPECT_TRUE(TcpHeader(buf).ChecksumValid(pseudo));
  MutableTcpHeader(buf).SetChecksum(0xffff);
  EXPECT_TRUE(TcpHeader(buf).ChecksumValid(pseudo));
}

// ---------------------------------------------------------------------------
// Hand-built Reprs, one per option combination.

struct OptionCase {
  const char* name;
  void (*set)(TcpRepr&);
  uint8_t data_offset_byte;
  const char* options_hex;
};

constexpr TcpTimestamps kTs{0x01020304, 0xa0b0c0d0};

const OptionCase kOptionCases[] = {
    {"none", [](TcpRepr&) {}, 0x50, ""},
    {"mss", [](TcpRepr& r) { r.mss = 1460; }, 0x60, "02 04 05 b4"},
    {"sack_permitted", [](TcpRepr& r) { r.sack_permitted = true; }, 0x60,
     "01 01 04 02"},
    {"timestamps", [](TcpRepr& r) { r.timestamps = kTs; }, 0x80,
     "01 01 08 0a 01 02 03 04 a0 b0 c0 d0"},
    {"timestamps_sack_permitted",
     [](TcpRepr& r) {
       r.timestamps = kTs;
       r.sack_permitted = true;
     },
     0x80, "04 02 08 0a 01 02 03 04 a0 b0 c0 d0"},
    {"window_scale", [](TcpRepr& r) { r.window_scale = 14; }, 0x60,
     "01 03 03 0e"},
    {"window_scale_out_of_range_kept_raw",
     [](TcpRepr& r) { r.window_scale = 200; }, 0x60, "01 03 03 c8"},
    {"sack_1",
     [](TcpRepr& r) {
       r.sack_count = 1;
       r.sack_blocks[0] = {0x10, 0x20};
     },
     0x80, "01 01 05 0a 00 00 00 10 00 00 00 20"},
    {"sack_4",
     [](TcpRepr& r) {
       r.sack_count = 4;
       r.sack_blocks = {{{1, 2}, {3, 4}, {5, 6}, {7, 8}}};
     },
     0xe0,
     "01 01 05 22 00 00 00 01 00 00 00 02 00 00 00 03 00 00 00 04"
     "00 00 00 05 00 00 00 06 00 00 00 07 00 00 00 08"},
    {"timestamps_sack_3",
     [](TcpRepr& r) {
       r.timestamps = kTs;
       r.sack_count = 3;
       r.sack_blocks[0] = {1, 2};
       r.sack_blocks[1] = {3, 4};
       r.sack_blocks[2] = {5, 6};
     },
     0xf0,
     "01 01 08 0a 01 02 03 04 a0 b0 c0 d0 01 01 05 1a 00 00 00 01"
     "00 00 00 02 00 00 00 03 00 00 00 04 00 00 00 05 00 00 00 06"},
    {"mss_window_scale",
     [](TcpRepr& r) {
       r.mss = 536;
       r.window_scale = 0;
     },
     0x70, "02 04 02 18 01 03 03 00"},
    // Linux's SYN with net.ipv4.tcp_timestamps=0.
    {"syn_without_timestamps",
     [](TcpRepr& r) {
       r.mss = 1460;
       r.sack_permitted = true;
       r.window_scale = 7;
     },
     0x80, "02 04 05 b4 01 01 04 02 01 03 03 07"},
    {"syn_all",
     [](TcpRepr& r) {
       r.mss = 1460;
       r.sack_permitted = true;
       r.timestamps = kTs;
       r.window_scale = 7;
     },
     0xa0, "02 04 05 b4 04 02 08 0a 01 02 03 04 a0 b0 c0 d0 01 03 03 07"},
};

TcpRepr BaseRepr() {
  TcpRepr r;
  r.src_port = 40000;
  r.dst_port = 80;
  r.seq = 0x01020304;
  r.ack = 0x05060708;
  r.flags = tcp_flag::kAck;
  r.window = 0x2000;
  return r;
}

TEST(TcpTest, HandBuiltOptionsEmitExpectedBytesAndParseBack) {
  for (const OptionCase& c : kOptionCases) {
    SCOPED_TRACE(c.name);
    TcpRepr r = BaseRepr();
    c.set(r);
    std::vector<uint8_t> expected =
        Hex("9c 40 00 50 01 02 03 04 05 06 07 08");
    expected.push_back(c.data_offset_byte);
    for (uint8_t b : Hex("10 20 00 00 00 00 00")) expected.push_back(b);
    for (uint8_t b : Hex(c.options_hex)) expected.push_back(b);

    EXPECT_EQ(r.BufferLen(), expected.size());
    EXPECT_EQ(r.BufferLen() % 4, 0u);
    EXPECT_EQ(EmitHeader(r), expected);
    EXPECT_EQ(MustParse(expected), r);
  }
}

TEST(TcpTest, EmitWritesOnlyBufferLen) {
  TcpRepr r = BaseRepr();
  r.mss = 1460;
  std::vector<uint8_t> buf(64, 0xee);
  r.Emit(MutableTcpHeader(buf));
  EXPECT_TRUE(std::all_of(buf.begin() + r.BufferLen(), buf.end(),
                          [](uint8_t b) { return b == 0xee; }));
}

TEST(TcpTest, SackBlocksThatDoNotFitAreDropped) {
  // Timestamps leave room for 3 blocks; the oldest (last) one goes.
  TcpRepr r = BaseRepr();
  r.timestamps = kTs;
  r.sack_count = 4;
  r.sack_blocks = {{{1, 2}, {3, 4}, {5, 6}, {7, 8}}};
  EXPECT_EQ(r.EmittedSackBlocks(), 3u);
  EXPECT_EQ(r.BufferLen(), 60u);
  TcpRepr expected = r;
  expected.sack_count = 3;
  expected.sack_blocks[3] = {};
  EXPECT_EQ(MustParse(EmitHeader(r)), expected);

  // Every option of a SYN (20 bytes) leaves room for 2.
  r.mss = 1460;
  r.window_scale = 7;
  r.sack_permitted = true;
  EXPECT_EQ(r.EmittedSackBlocks(), 2u);
  EXPECT_EQ(r.BufferLen(), 60u);
  expected = r;
  expected.sack_count = 2;
  expected.sack_blocks[2] = {};
  expected.sack_blocks[3] = {};
  EXPECT_EQ(MustParse(EmitHeader(r)), expected);

  // A count above the array size is capped, never read past it.
  TcpRepr many = BaseRepr();
  many.sack_count = 200;
  EXPECT_EQ(many.EmittedSackBlocks(), TcpRepr::kMaxSackBlocks);
  EXPECT_EQ(MustParse(EmitHeader(many)).sack_count, TcpRepr::kMaxSackBlocks);
}

TEST(TcpTest, BufferLenIsMultipleOfFourAndAtMost60ForAllCombinations) {
  for (int bits = 0; bits < 32; ++bits) {
    for (uint8_t sacks = 0; sacks <= 5; ++sacks) {
      TcpRepr r = BaseRepr();
      if (bits & 1) r.mss = 1;
      if (bits & 2) r.sack_permitted = true;
      if (bits & 4) r.timestamps = kTs;
      if (bits & 8) r.window_scale = 1;
      if (bits & 16) r.flags = tcp_flag::kSyn;
      r.sack_count = sacks;
      SCOPED_TRACE(::testing::Message() << bits << " " << int{sacks});
      EXPECT_EQ(r.BufferLen() % 4, 0u);
      EXPECT_LE(r.BufferLen(), TcpHeader::kMaxHeaderLen);
      const std::vector<uint8_t> out = EmitHeader(r);
      const TcpRepr back = MustParse(out);
      EXPECT_EQ(back.mss, r.mss);
      EXPECT_EQ(back.sack_permitted, r.sack_permitted);
      EXPECT_EQ(back.timestamps, r.timestamps);
      EXPECT_EQ(back.window_scale, r.window_scale);
      EXPECT_EQ(back.sack_count, r.EmittedSackBlocks());
    }
  }
}

// ---------------------------------------------------------------------------
// Flags and the fixed header.

TEST(TcpTest, FlagBitsMatchRfc) {
  // RFC 9293 section 3.1 and RFC 3168 section 6.1: CWR is the most
  // significant bit of byte 13, FIN the least.
  const uint8_t in_order[] = {tcp_flag::kFin, tcp_flag::kSyn, tcp_flag::kRst,
                              tcp_flag::kPsh, tcp_flag::kAck, tcp_flag::kUrg,
                              tcp_flag::kEce, tcp_flag::kCwr};
  for (int i = 0; i < 8; ++i) EXPECT_EQ(in_order[i], 1 << i);

  TcpRepr r = BaseRepr();
  r.flags = tcp_flag::kCwr | tcp_flag::kEce | tcp_flag::kUrg |
            tcp_flag::kFin;
  r.urgent_pointer = 0x1234;
  const std::vector<uint8_t> out = EmitHeader(r);
  EXPECT_EQ(out[13], 0xe1);
  EXPECT_EQ(out[18], 0x12);
  EXPECT_EQ(out[19], 0x34);
  EXPECT_EQ(MustParse(out), r);
}

TEST(TcpTest, AeBitRoundTripsAndReservedBitsAreIgnored) {
  std::vector<uint8_t> b = kRst;
  b[12] = 0x51;  // data offset 5, AE
  TcpRepr r = MustParse(b);
  EXPECT_TRUE(r.ae);
  EXPECT_TRUE(TcpHeader(b).Ae());
  EXPECT_EQ(EmitHeader(r)[12], 0x51);

  b[12] = 0x5e;  // the three reserved bits set, AE clear
  r = MustParse(b);
  EXPECT_FALSE(r.ae);
  EXPECT_EQ(r, MustParse(kRst));
  EXPECT_EQ(EmitHeader(r)[12], 0x50);  // sent as zero
}

TEST(TcpTest, SettersWriteTheirFieldsOnly) {
  std::vector<uint8_t> b(24, 0);
  MutableTcpHeader h(b);
  h.SetSrcPort(0x0102);
  h.SetDstPort(0x0304);
  h.SetSeqNumber(0x05060708);
  h.SetAckNumber(0x090a0b0c);
  h.SetAe(true);
  h.SetDataOffset(6);
  h.SetFlags(tcp_flag::kSyn | tcp_flag::kEce);
  h.SetWindow(0x0d0e);
  h.SetChecksum(0x0f10);
  h.SetUrgentPointer(0x1112);
  EXPECT_EQ(b, Hex("01 02 03 04 05 06 07 08 09 0a 0b 0c 61 42 0d 0e"
                   "0f 10 11 12 00 00 00 00"));
  h.SetAe(false);
  EXPECT_EQ(b[12], 0x60);
  h.SetAe(true);
  h.SetDataOffset(5);
  EXPECT_EQ(b[12], 0x51);

  const TcpHeader v(b);
  EXPECT_EQ(v.SrcPort(), 0x0102);
  EXPECT_EQ(v.DstPort(), 0x0304);
  EXPECT_EQ(v.SeqNumber(), 0x05060708u);
  EXPECT_EQ(v.AckNumber(), 0x090a0b0cu);
  EXPECT_EQ(v.Flags(), tcp_flag::kSyn | tcp_flag::kEce);
  EXPECT_TRUE(v.HasFlags(tcp_flag::kSyn));
  EXPECT_FALSE(v.HasFlags(tcp_flag::kSyn | tcp_flag::kAck));
  EXPECT_EQ(v.Window(), 0x0d0e);
  EXPECT_EQ(v.Checksum(), 0x0f10);
  EXPECT_EQ(v.UrgentPointer(), 0x1112);
  EXPECT_EQ(v.Payload().size(), 4u);
}

// ---------------------------------------------------------------------------
// Truncation and malformed headers.

TEST(TcpTest, TruncatedAtEveryLength) {
  for (const Capture& c : Captures()) {
    SCOPED_TRACE(c.name);
    const size_t header_len = TcpHeader(*c.bytes).HeaderLen();
    // Below 20 bytes kTruncated, from 20 up kBadHeaderLength; the specific
    // errors are checked below.
    ExpectEveryTruncationFails(
        std::span<const uint8_t>(*c.bytes).first(header_len), ParseBytes,
        WireError::kOk);
  }
}

TEST(TcpTest, ShortBufferErrors) {
  const std::span<const uint8_t> syn(kSyn);
  ExpectEveryTruncationFails(syn.first(20), ParseBytes, WireError::kTruncated);
  for (size_t len = 20; len < 40; ++len) {
    std::vector<uint8_t> prefix(syn.begin(), syn.begin() + len);
    EXPECT_EQ(ParseBytes(prefix), WireError::kBadHeaderLength) << len;
  }
  // Payload bytes are never required: TCP has no length field.
  EXPECT_EQ(ParseBytes(syn.first(40)), WireError::kOk);
}

// The fixed header of a segment with data offset byte `doff` followed by
// `rest` (options, payload).
std::vector<uint8_t> Segment(uint8_t doff, std::string_view rest) {
  std::vector<uint8_t> b = Hex("9c 40 00 50 00 00 00 01 00 00 00 00");
  b.push_back(doff);
  for (uint8_t x : Hex("02 ff ff 00 00 00 00")) b.push_back(x);
  for (uint8_t x : Hex(rest)) b.push_back(x);
  return b;
}

TEST(TcpTest, BadDataOffset) {
  EXPECT_EQ(ParseBytes(Segment(0x40, "")), WireError::kBadHeaderLength);
  EXPECT_EQ(ParseBytes(Segment(0x00, "00 00 00 00")),
            WireError::kBadHeaderLength);
  // Announces 24 bytes, has 20.
  EXPECT_EQ(ParseBytes(Segment(0x60, "")), WireError::kBadHeaderLength);
  // Announces the maximum, 60 bytes, has 56.
  std::string nops;
  for (int i = 0; i < 36; ++i) nops += "01 ";
  std::vector<uint8_t> b = Segment(0xf0, nops);
  EXPECT_EQ(ParseBytes(b), WireError::kBadHeaderLength);
  b.push_back(0x01);
  b.push_back(0x01);
  b.push_back(0x01);
  b.push_back(0x01);
  EXPECT_EQ(ParseBytes(b), WireError::kOk);
  EXPECT_EQ(TcpHeader(b).Options().size(), 40u);
}

struct MalformedCase {
  const char* name;
  uint8_t doff;
  const char* options;
  WireError expected;
};

const MalformedCase kMalformed[] = {
    // Length byte below 2: the walk could not advance.
    {"length_0", 0x60, "fe 00 01 01", WireError::kBadOptionLength},
    {"length_1", 0x60, "fe 01 01 01", WireError::kBadOptionLength},
    {"known_length_0", 0x60, "08 00 01 01", WireError::kBadOptionLength},
    // An option running past the header.
    {"runs_past_header", 0x60, "01 01 fe 05", WireError::kOptionOverflow},
    {"timestamps_cut_short", 0x70, "02 04 05 b4 08 0a 00 00",
     WireError::kOptionOverflow},
    {"length_255", 0x60, "1e ff 00 00", WireError::kOptionOverflow},
    // The kind is the last byte: no room for its length.
    {"missing_length_byte", 0x60, "01 01 01 02",
     WireError::kOptionOverflow},
    {"missing_length_byte_unknown", 0x60, "01 01 01 fe",
     WireError::kOptionOverflow},
    // Known kinds with the wrong length.
    {"mss_length_3", 0x60, "02 03 05 01", WireError::kBadOptionLength},
    {"mss_length_5", 0x70, "02 05 05 b4 00 01 01 01",
     WireError::kBadOptionLength},
    {"window_scale_length_2", 0x60, "03 02 01 01",
     WireError::kBadOptionLength},
    {"window_scale_length_4", 0x60, "03 04 07 00",
     WireError::kBadOptionLength},
    {"sack_permitted_length_3", 0x60, "04 03 00 01",
     WireError::kBadOptionLength},
    {"timestamps_length_8", 0x70, "08 08 00 00 00 01 00 00",
     WireError::kBadOptionLength},
    {"sack_length_2", 0x60, "05 02 01 01", WireError::kBadOptionLength},
    {"sack_length_3", 0x60, "05 03 00 01", WireError::kBadOptionLength},
    {"sack_length_11", 0x80, "05 0b 00 00 00 01 00 00 00 02 00 01",
     WireError::kBadOptionLength},
    // Five blocks (42 bytes) cannot fit a 40-byte option area.
    {"sack_5_blocks", 0xf0,
     "05 2a 00 00 00 01 00 00 00 02 00 00 00 03 00 00 00 04 00 00"
     "00 05 00 00 00 06 00 00 00 07 00 00 00 08 00 00 00 09 00 00",
     WireError::kOptionOverflow},
    // The error is found after a valid option too.
    {"bad_after_valid", 0x70, "02 04 05 b4 03 02 01 01",
     WireError::kBadOptionLength},
};

TEST(TcpTest, MalformedOptions) {
  for (const MalformedCase& c : kMalformed) {
    SCOPED_TRACE(c.name);
    const std::vector<uint8_t> b = Segment(c.doff, c.options);
    ASSERT_EQ(TcpHeader(b).HeaderLen(), b.size());
    EXPECT_EQ(TcpHeader(b).Check(), c.expected);
    TcpRepr r;
    r.mss = 1;  // untouched on failure
    EXPECT_EQ(TcpRepr::Parse(TcpHeader(b), r), c.expected);
    EXPECT_EQ(r.mss, 1);
  }
}

TEST(TcpTest, UnknownOptionsAreSkippedAndCounted) {
  // Kind 30 (MPTCP) length 4, then MSS, then kind 254 (experimental,
  // RFC 6994) length 2, then NOP NOP.
  const std::vector<uint8_t> b =
      Segment(0x80, "1e 04 ab cd 02 04 05 b4 fe 02 01 01");
  TcpRepr r = MustParse(b);
  EXPECT_EQ(r.unknown_options, 2);
  EXPECT_EQ(r.mss, 1460);
  // Not re-emitted: only the MSS comes back.
  r.unknown_options = 0;
  EXPECT_EQ(EmitHeader(r), Segment(0x60, "02 04 05 b4"));
}

TEST(TcpTest, EndOfListStopsParsing) {
  // After EOL the rest is padding: even bytes that would be a malformed
  // option are not examined.
  TcpRepr r = MustParse(Segment(0x70, "01 00 02 03 ff ff ff ff"));
  EXPECT_FALSE(r.mss.has_value());
  EXPECT_EQ(r.unknown_options, 0);
  r = MustParse(Segment(0x70, "02 04 05 b4 00 02 04 05"));
  EXPECT_EQ(r.mss, 1460);
  EXPECT_EQ(r, MustParse(Segment(0x70, "02 04 05 b4 00 00 00 00")));
}

TEST(TcpTest, NopsOnlyAndDuplicateOptions) {
  EXPECT_EQ(MustParse(Segment(0x70, "01 01 01 01 01 01 01 01")),
            MustParse(Segment(0x50, "")));
  // The last occurrence wins.
  const TcpRepr r = MustParse(Segment(0x80, "02 04 05 b4 02 04 02 18"
                                            "01 03 03 09"));
  EXPECT_EQ(r.mss, 536);
  EXPECT_EQ(r.window_scale, 9);
}

// Random segments, mostly built from valid option pieces so that many
// parse, some from garbage. Each is copied into an exactly-sized buffer so
// ASan sees any over-read. Whatever parses must re-emit to something that
// parses back to the canonical form of the same Repr.
TEST(TcpTest, RandomSegmentsParseTotallyAndReEmitCanonically) {
  std::mt19937 rng(20240601);
  auto byte = [&rng] { return static_cast<uint8_t>(rng()); };
  const std::vector<std::vector<uint8_t>> pieces = {
      Hex("00"),
      Hex("01"),
      Hex("02 04 05 b4"),
      Hex("03 03 07"),
      Hex("04 02"),
      Hex("08 0a 01 02 03 04 05 06 07 08"),
      Hex("05 0a 00 00 00 01 00 00 00 02"),
      Hex("05 12 00 00 00 01 00 00 00 02 00 00 00 03 00 00 00 04"),
      Hex("fe 04 00 00"),
      Hex("1e 02"),
  };
  int parsed = 0;
  for (int iter = 0; iter < 20000; ++iter) {
    std::vector<uint8_t> b(20);
    for (uint8_t& x : b) x = byte();
    const uint8_t doff = static_cast<uint8_t>(rng() % 16);
    b[12] = static_cast<uint8_t>((doff << 4) | (b[12] & 0x0f));
    const size_t area = doff > 5 ? (doff - 5) * 4u : 0;
    while (b.size() < 20 + area) {
      if (rng() % 8 == 0) {
        b.push_back(byte());
      } else {
        const auto& p = pieces[rng() % pieces.size()];
        b.insert(b.end(), p.begin(), p.end());
      }
    }
    b.resize(20 + area);
    if (rng() % 4 == 0) b.resize(rng() % (b.size() + 1));  // truncate
    if (rng() % 4 == 0) b.resize(b.size() + rng() % 8, 0x77);  // payload
    b.shrink_to_fit();

    TcpRepr r;
    if (TcpRepr::Parse(TcpHeader(b), r) != WireError::kOk) continue;
    ++parsed;
    const TcpHeader h(b);
    ASSERT_LE(h.HeaderLen(), b.size());
    ASSERT_EQ(h.Options().size() + 20, h.HeaderLen());

    TcpRepr canonical = r;
    canonical.unknown_options = 0;
    canonical.sack_count = static_cast<uint8_t>(r.EmittedSackBlocks());
    for (size_t i = canonical.sack_count; i < TcpRepr::kMaxSackBlocks; ++i) {
      canonical.sack_blocks[i] = {};
    }
    std::vector<uint8_t> out(r.BufferLen());
    r.Emit(MutableTcpHeader(out));
    ASSERT_EQ(MustParse(out), canonical);
  }
  // The generator must actually exercise the success path.
  EXPECT_GT(parsed, 2000);
}

}  // namespace
}  // namespace netstack::wire
