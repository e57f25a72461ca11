// The one JSON object a tcp_benchmark client role prints on stdout at the
// end of a test (main.cc's contract with the driver):
//   {"role":"client","stack":"netstack","reverse":false,"bytes":N,
//    "seconds":S,"gbps":G,"retransmits":R,"sender_cpu_util":pct,
//    "receiver_cpu_util":pct}
// The parser reads a flat object (string, number, true/false/null values;
// no nesting) and is strict about the keys the driver needs.
#ifndef TOOLS_TCP_BENCHMARK_CLIENT_RESULT_H_
#define TOOLS_TCP_BENCHMARK_CLIENT_RESULT_H_

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace netstack::tools::bench {

struct ClientResult {
  std::string stack;
  bool reverse = false;
  uint64_t bytes = 0;
  double seconds = 0;
  double gbps = 0;
  int64_t retransmits = 0;  // -1: the sender could not tell
  double sender_cpu_util = 0;
  double receiver_cpu_util = 0;
};

// A flat JSON object: each value kept as its JSON text, strings unquoted
// (escapes resolved for \" \\ \/ \n \t only; others kept verbatim).
using FlatJson = std::map<std::string, std::string, std::less<>>;
absl::StatusOr<FlatJson> ParseFlatJsonObject(std::string_view text);

// Takes the object that starts the last line beginning with '{'. Errors name
// the missing or malformed key.
absl::StatusOr<ClientResult> ParseClientResult(std::string_view stdout_text);

}  // namespace netstack::tools::bench

#endif  // TOOLS_TCP_BENCHMARK_CLIENT_RESULT_H_
