// The iperf3 control and data protocol (TCP tests only), as spoken by
// iperf3 3.x (checked against 3.12):
//
//   client                                   server
//   ------ control connection (to port 5201) ------
//   cookie (37 bytes: 36 chars + NUL)  ->
//                                      <-   state PARAM_EXCHANGE (9)
//   u32 big-endian length + JSON params ->
//                                      <-   state CREATE_STREAMS (10)
//   ------ one new connection per stream, to the same port ------
//   cookie (37 bytes)                  ->   (wrong cookie: ACCESS_DENIED, close)
//   ------ control ------
//                                      <-   TEST_START (1), TEST_RUNNING (2)
//   ... data: the client sends (with "reverse": the server sends) ...
//   TEST_END (4) (the client's clock)   ->
//                                      <-   EXCHANGE_RESULTS (13)
//   length + JSON results (client's)   ->
//                                      <-   length + JSON results (server's)
//                                      <-   DISPLAY_RESULTS (14)
//   IPERF_DONE (16)                    ->
//
// A state is one signed byte. SERVER_ERROR (-2) is followed by two
// big-endian int32s, iperf3's i_errno and the errno. A busy server answers
// a second client's control connection with ACCESS_DENIED (-1).
//
// This file holds the wire-level pieces: constants, the cookie, the
// parameters and results documents, and FrameReader, which cuts the
// control byte stream into those messages.
#ifndef TOOLS_TCP_BENCHMARK_IPERF3_PROTOCOL_H_
#define TOOLS_TCP_BENCHMARK_IPERF3_PROTOCOL_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "tools/tcp_benchmark/json.h"

namespace netstack::tools::bench::iperf3 {

// Control states (iperf_api.h).
enum State : int8_t {
  kTestStart = 1,
  kTestRunning = 2,
  kTestEnd = 4,
  kParamExchange = 9,
  kCreateStreams = 10,
  kServerTerminate = 11,
  kClientTerminate = 12,
  kExchangeResults = 13,
  kDisplayResults = 14,
  kIperfStart = 15,
  kIperfDone = 16,
  kAccessDenied = -1,
  kServerError = -2,
};
// "TEST_START", or "unknown state 77".
std::string StateName(int8_t state);

// iperf3's i_errno values we send or explain.
inline constexpr int32_t kErrRecvParams = 114;   // IERECVPARAMS
inline constexpr int32_t kErrMessage = 110;      // IEMESSAGE
inline constexpr int32_t kErrRecvResults = 117;  // IERECVRESULTS
inline constexpr int32_t kErrProtocol = 131;     // IEPROTOCOL
inline constexpr int32_t kErrStreamId = 208;     // IESTREAMID

inline constexpr uint16_t kDefaultPort = 5201;
inline constexpr size_t kCookieSize = 37;  // 36 characters and a NUL
inline constexpr size_t kDefaultBlockSize = 128 * 1024;  // iperf3's TCP len
// Largest JSON message we accept. iperf3's own are a few KB (with
// get_server_output, the server's text output); anything near this is an
// attack or garbage.
inline constexpr uint32_t kMaxJsonMessage = 8 * 1024 * 1024;
inline constexpr char kClientVersion[] = "3.12";

// A fresh cookie: 36 characters from iperf3's alphabet and a NUL.
std::string MakeCookie(std::mt19937_64& rng);
// True when `cookie` is kCookieSize bytes, printable, NUL-terminated.
bool IsWellFormedCookie(std::string_view cookie);

// The stream ids iperf3 gives its streams: 1 for the first, then 3, 4, ...
// (iperf_add_stream counts from 2 and pre-increments). Results are
// matched by id, so both sides must number alike.
int StreamId(int index);

// The client's test parameters (the JSON after PARAM_EXCHANGE).
struct TestParams {
  bool tcp = true;
  bool udp = false;
  bool sctp = false;
  bool reverse = false;
  bool bidirectional = false;
  double duration = 10;  // "time", seconds; 0 with bytes/blocks limits
  int64_t bytes = 0;     // "num"
  int64_t blocks = 0;    // "blockcount"
  int omit = 0;
  int parallel = 1;
  int64_t len = kDefaultBlockSize;
  int64_t window = 0;
  bool no_delay = false;
  std::string congestion;
  std::string client_version;
};
std::string EncodeParams(const TestParams& params);
// Unknown keys are ignored; wrong types and values out of range are
// errors (parallel must be 1..128, len 1..1 GiB, time 0..86400).
absl::StatusOr<TestParams> DecodeParams(const JsonValue& json);

// One side's results (the JSON after EXCHANGE_RESULTS).
struct StreamResult {
  int id = 0;
  uint64_t bytes = 0;
  uint64_t retransmits = 0;  // the sender's; 0 from a receiver
  double start_time = 0;
  double end_time = 0;
};
struct TestResults {
  double cpu_util_total = 0;  // percent of one CPU over the test
  double cpu_util_user = 0;
  double cpu_util_system = 0;
  // 1 when this side sent and counted retransmits, 0 when it sent
  // without, -1 when it received.
  int sender_has_retransmits = -1;
  std::string congestion_used;
  std::vector<StreamResult> streams;
};
std::string EncodeResults(const TestResults& results);
absl::StatusOr<TestResults> DecodeResults(const JsonValue& json);

// Framing of the outgoing control messages.
std::string EncodeState(int8_t state);
std::string EncodeJsonMessage(const std::string& json);
// SERVER_ERROR with its two int32s.
std::string EncodeServerError(int32_t iperf_errno, int32_t sys_errno);

// Cuts the control byte stream into messages. Append() what the socket
// gave; each Take*() returns nullopt until a whole message is buffered,
// then consumes it. Errors (a length over kMaxJsonMessage, JSON that does
// not parse) are final for the connection.
class FrameReader {
 public:
  void Append(std::string_view bytes) { buffer_.append(bytes); }
  size_t buffered() const { return buffer_.size() - pos_; }

  std::optional<std::string> TakeBytes(size_t n);
  std::optional<int8_t> TakeState();
  std::optional<int32_t> TakeInt32();
  absl::StatusOr<std::optional<JsonValue>> TakeJson();

 private:
  void Compact();

  std::string buffer_;
  size_t pos_ = 0;
};

}  // namespace netstack::tools::bench::iperf3

#endif  // TOOLS_TCP_BENCHMARK_IPERF3_PROTOCOL_H_
