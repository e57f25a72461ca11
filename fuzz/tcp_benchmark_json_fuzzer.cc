// tcp_benchmark's iperf3 control parsing (tools/tcp_benchmark/json.h,
// iperf3_protocol.h): what a hostile peer's control connection reaches.
// The first input byte picks the mode; the rest is the peer's bytes.
//
// JSON document (even first byte): ParseJson(x). When it parses:
//   - its nesting is within kJsonMaxDepth;
//   - written back with JsonWriter it parses again to the same value
//     (parse(write(parse(x))) == parse(x)), but for numbers past the
//     double range: strtod reads them as infinities, which JSON cannot
//     say, and JsonWriter::Double writes null as documented;
//   - DecodeParams and DecodeResults either refuse it or give a struct
//     that EncodeParams / EncodeResults turn back into a document that
//     decodes to the same struct (for params: the fields our client's
//     EncodeParams carries; it always says tcp and its own version).
// Control stream (odd first byte): the bytes are cut into chunks the
// input chooses and Append()ed to a FrameReader, and each chunk is
// followed by a Take of the kind the next input byte names (state,
// int32, cookie bytes, JSON message), as the protocol's states would.
// Checked against the same bytes read directly: buffered() is always what
// was appended minus what was taken; a Take returns nothing only when its
// message is not all there, and otherwise consumes exactly that message
// and returns its value (a JSON message: the document its length prefix
// frames, up to a NUL, parsed); a JSON message error is final (the reader
// is not used again, as the header says).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz/fuzz_check.h"
#include "netstack/wire/bytes.h"
#include "tools/tcp_benchmark/iperf3_protocol.h"
#include "tools/tcp_benchmark/json.h"

namespace netstack::tools::bench {
namespace {

void Write(const JsonValue& v, JsonWriter& w) {
  switch (v.type()) {
    case JsonValue::Type::kNull:
      w.Null();
      break;
    case JsonValue::Type::kBool:
      w.Bool(v.bool_value());
      break;
    case JsonValue::Type::kNumber:
      w.Double(v.number());
      break;
    case JsonValue::Type::kString:
      w.String(v.string());
      break;
    case JsonValue::Type::kArray:
      w.BeginArray();
      for (const JsonValue& item : v.items()) Write(item, w);
      w.EndArray();
      break;
    case JsonValue::Type::kObject:
      w.BeginObject();
      for (const auto& [key, value] : v.members()) {
        w.Key(key);
        Write(value, w);
      }
      w.EndObject();
      break;
  }
}

std::string Text(const JsonValue& v) {
  JsonWriter w;
  Write(v, w);
  return w.text();
}

int Depth(const JsonValue& v) {
  int d = 0;
  for (const JsonValue& item : v.items()) d = std::max(d, Depth(item));
  for (const auto& m : v.members()) d = std::max(d, Depth(m.second));
  return d + 1;
}

// `b` is `a` written and read back (see the file comment for numbers).
bool SameAfterRoundTrip(const JsonValue& a, const JsonValue& b) {
  if (a.is_number() && !std::isfinite(a.number())) return b.is_null();
  if (a.type() != b.type()) return false;
  switch (a.type()) {
    case JsonValue::Type::kNull:
      return true;
    case JsonValue::Type::kBool:
      return a.bool_value() == b.bool_value();
    case JsonValue::Type::kNumber:
      return a.number() == b.number();
    case JsonValue::Type::kString:
      return a.string() == b.string();
    case JsonValue::Type::kArray:
      if (a.items().size() != b.items().size()) return false;
      for (size_t i = 0; i < a.items().size(); ++i) {
        if (!SameAfterRoundTrip(a.items()[i], b.items()[i])) return false;
      }
      return true;
    case JsonValue::Type::kObject:
      if (a.members().size() != b.members().size()) return false;
      for (size_t i = 0; i < a.members().size(); ++i) {
        if (a.members()[i].first != b.members()[i].first ||
            !SameAfterRoundTrip(a.members()[i].second, b.members()[i].second)) {
          return false;
        }
      }
      return true;
  }
  return false;
}

// The fields EncodeParams carries. It is our client's encoder: it always
// says tcp (the only test it runs) and its own client_version, and never
// udp, sctp or bidirectional.
bool SameParams(const iperf3::TestParams& a, const iperf3::TestParams& b) {
  return a.reverse == b.reverse && a.duration == b.duration &&
         a.bytes == b.bytes && a.blocks == b.blocks && a.omit == b.omit &&
         a.parallel == b.parallel && a.len == b.len && a.window == b.window &&
         a.no_delay == b.no_delay && a.congestion == b.congestion &&
         b.tcp && !b.udp && !b.sctp && !b.bidirectional &&
         b.client_version == iperf3::kClientVersion;
}

bool SameResults(const iperf3::TestResults& a, const iperf3::TestResults& b) {
  if (a.cpu_util_total != b.cpu_util_total ||
      a.cpu_util_user != b.cpu_util_user ||
      a.cpu_util_system != b.cpu_util_system ||
      a.sender_has_retransmits != b.sender_has_retransmits ||
      a.congestion_used != b.congestion_used ||
      a.streams.size() != b.streams.size()) {
    return false;
  }
  for (size_t i = 0; i < a.streams.size(); ++i) {
    const iperf3::StreamResult& x = a.streams[i];
    const iperf3::StreamResult& y = b.streams[i];
    if (x.id != y.id || x.bytes != y.bytes || x.retransmits != y.retransmits ||
        x.start_time != y.start_time || x.end_time != y.end_time) {
      return false;
    }
  }
  return true;
}

void FuzzDocument(std::string_view text) {
  absl::StatusOr<JsonValue> v = ParseJson(text);
  if (!v.ok()) return;
  FUZZ_CHECK(Depth(*v) <= kJsonMaxDepth);
  absl::StatusOr<JsonValue> again = ParseJson(Text(*v));
  FUZZ_CHECK(again.ok());
  FUZZ_CHECK(SameAfterRoundTrip(*v, *again));

  if (absl::StatusOr<iperf3::TestParams> p = iperf3::DecodeParams(*v); p.ok()) {
    absl::StatusOr<JsonValue> doc = ParseJson(iperf3::EncodeParams(*p));
    FUZZ_CHECK(doc.ok());
    absl::StatusOr<iperf3::TestParams> p2 = iperf3::DecodeParams(*doc);
    FUZZ_CHECK(p2.ok());
    FUZZ_CHECK(SameParams(*p, *p2));
  }
  if (absl::StatusOr<iperf3::TestResults> r = iperf3::DecodeResults(*v);
      r.ok()) {
    absl::StatusOr<JsonValue> doc = ParseJson(iperf3::EncodeResults(*r));
    FUZZ_CHECK(doc.ok());
    absl::StatusOr<iperf3::TestResults> r2 = iperf3::DecodeResults(*doc);
    FUZZ_CHECK(r2.ok());
    FUZZ_CHECK(SameResults(*r, *r2));
  }
}

uint32_t Be32(std::string_view s, size_t at) {
  return wire::LoadBe32(reinterpret_cast<const uint8_t*>(s.data() + at));
}

void FuzzStream(fuzz::FuzzInput& in) {
  iperf3::FrameReader reader;
  std::string all;   // every byte appended
  size_t taken = 0;  // of which the reader consumed these
  while (!in.done()) {
    const uint8_t op = in.U8();
    const auto chunk = in.Bytes(op >> 2);
    all.append(reinterpret_cast<const char*>(chunk.data()), chunk.size());
    reader.Append(std::string_view(reinterpret_cast<const char*>(chunk.data()),
                                   chunk.size()));
    const size_t have = all.size() - taken;
    FUZZ_CHECK(reader.buffered() == have);
    switch (op & 3) {
      case 0:
        if (auto st = reader.TakeState()) {
          FUZZ_CHECK(*st == static_cast<int8_t>(all[taken]));
          taken += 1;
        } else {
          FUZZ_CHECK(have < 1);
        }
        break;
      case 1:
        if (auto v = reader.TakeInt32()) {
          FUZZ_CHECK(static_cast<uint32_t>(*v) == Be32(all, taken));
          taken += 4;
        } else {
          FUZZ_CHECK(have < 4);
        }
        break;
      case 2:
        if (auto b = reader.TakeBytes(iperf3::kCookieSize)) {
          FUZZ_CHECK(*b == all.substr(taken, iperf3::kCookieSize));
          taken += iperf3::kCookieSize;
        } else {
          FUZZ_CHECK(have < iperf3::kCookieSize);
        }
        break;
      default: {
        auto json = reader.TakeJson();
        if (!json.ok()) return;  // final for the connection
        if (!json->has_value()) {
          FUZZ_CHECK(have < 4 || have < 4 + size_t{Be32(all, taken)});
          break;
        }
        const uint32_t length = Be32(all, taken);
        FUZZ_CHECK(length >= 1 && length <= iperf3::kMaxJsonMessage);
        std::string_view text = std::string_view(all).substr(taken + 4, length);
        text = text.substr(0, text.find('\0'));  // as cJSON reads it
        absl::StatusOr<JsonValue> direct = ParseJson(text);
        FUZZ_CHECK(direct.ok());
        FUZZ_CHECK(Text(**json) == Text(*direct));
        taken += 4 + size_t{length};
        break;
      }
    }
    FUZZ_CHECK(reader.buffered() == all.size() - taken);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::FuzzInput in(data, size);
  if (size == 0) return 0;
  if ((in.U8() & 1) == 0) {
    const auto rest = in.Rest();
    FuzzDocument(
        std::string_view(reinterpret_cast<const char*>(rest.data()), rest.size()));
  } else {
    FuzzStream(in);
  }
  return 0;
}

}  // namespace netstack::tools::bench
