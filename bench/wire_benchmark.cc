// Wire-format micro-benchmarks: the checksum inner loop against memcpy of
// the same size in the same run (the goal: checksum >= 0.35x of
// memcpy's bytes per second at 64 KiB), and parsing/emitting a TCP/IPv4
// header pair.
#include <cstring>
#include <vector>

#include "benchmark/benchmark.h"
#include "netstack/wire/checksum.h"
#include "netstack/wire/ipv4.h"
#include "netstack/wire/tcp.h"

namespace netstack::wire {
namespace {

std::vector<uint8_t> Pattern(size_t n) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 131 + 7);
  return v;
}

void BM_Checksum(benchmark::State& state) {
  const auto buf = Pattern(static_cast<size_t>(state.range(0)));
  for (auto _ : state) {
    uint16_t c = InternetChecksum(buf);
    benchmark::DoNotOptimize(c);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) *
                          state.range(0));
}
BENCHMARK(BM_Checksum)->Arg(64)->Arg(1500)->Arg(65536);

void BM_Memcpy(benchmark::State& state) {
  const auto src = Pattern(static_cast<size_t>(state.range(0)));
  std::vector<uint8_t> dst(src.size());
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), src.size());
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) *
                          state.range(0));
}
BENCHMARK(BM_Memcpy)->Arg(65536);

// A Linux data segment's IPv4 + TCP headers (NOP NOP TS) followed by 1448
// bytes of payload, as the receive path sees it after Ethernet.
std::vector<uint8_t> TcpIpv4Segment() {
  Ipv4Repr ip;
  ip.src = Ipv4Address::FromU32(0x0a090001);
  ip.dst = Ipv4Address::FromU32(0x0a090002);
  ip.protocol = 6;
  ip.ttl = 64;
  ip.dont_fragment = true;
  ip.ident = 0x1234;
  TcpRepr tcp;
  tcp.src_port = 40000;
  tcp.dst_port = 80;
  tcp.seq = 0x94dcdc5a;
  tcp.ack = 0x12345678;
  tcp.flags = tcp_flag::kAck | tcp_flag::kPsh;
  tcp.window = 502;
  tcp.timestamps = TcpTimestamps{70089419, 3432324760u};
  constexpr size_t kPayload = 1448;
  ip.payload_len = static_cast<uint16_t>(tcp.BufferLen() + kPayload);
  std::vector<uint8_t> buf(ip.BufferLen() + ip.payload_len);
  ip.Emit(MutableIpv4Packet(buf));
  auto seg = std::span<uint8_t>(buf).subspan(ip.BufferLen());
  tcp.Emit(MutableTcpHeader(seg));
  for (size_t i = tcp.BufferLen(); i < seg.size(); ++i) seg[i] = i & 0xff;
  MutableTcpHeader(seg).FillChecksum(Ipv4PseudoHeaderSum(
      ip.src, ip.dst, 6, static_cast<uint32_t>(seg.size())));
  return buf;
}

// The receive path's per-segment parse: both views checked, both Reprs
// filled. Checksum verification is measured separately (BM_Checksum).
void BM_ParseTcpIpv4(benchmark::State& state) {
  const auto buf = TcpIpv4Segment();
  for (auto _ : state) {
    Ipv4Packet ip_view(buf);
    Ipv4Repr ip;
    TcpRepr tcp;
    if (Ipv4Repr::Parse(ip_view, ip) != WireError::kOk ||
        TcpRepr::Parse(TcpHeader(ip_view.Payload()), tcp) != WireError::kOk) {
      state.SkipWithError("parse failed");
      break;
    }
    benchmark::DoNotOptimize(ip);
    benchmark::DoNotOptimize(tcp);
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
}
BENCHMARK(BM_ParseTcpIpv4);

// The send path's per-segment header work: emit TCP and IPv4 headers
// (options, lengths, IPv4 checksum) and fill the TCP checksum from the
// payload's precomputed sum, as the GSO splitter will.
void BM_EmitTcpIpv4(benchmark::State& state) {
  const auto ref = TcpIpv4Segment();
  Ipv4Repr ip;
  TcpRepr tcp;
  Ipv4Packet ref_view(ref);
  if (Ipv4Repr::Parse(ref_view, ip) != WireError::kOk ||
      TcpRepr::Parse(TcpHeader(ref_view.Payload()), tcp) != WireError::kOk) {
    state.SkipWithError("parse failed");
    return;
  }
  ChecksumAccumulator payload;
  payload.Add(TcpHeader(ref_view.Payload()).Payload());
  const uint32_t tcp_len = static_cast<uint32_t>(ref_view.Payload().size());
  std::vector<uint8_t> out(ip.BufferLen() + tcp.BufferLen());
  for (auto _ : state) {
    auto seg = std::span<uint8_t>(out).subspan(ip.BufferLen());
    tcp.seq += 1448;
    tcp.Emit(MutableTcpHeader(seg));
    ip.Emit(MutableIpv4Packet(out));
    MutableTcpHeader(seg).FillChecksum(
        Ipv4PseudoHeaderSum(ip.src, ip.dst, 6, tcp_len), payload);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
}
BENCHMARK(BM_EmitTcpIpv4);

}  // namespace
}  // namespace netstack::wire
