// Test helpers for wire formats (testonly).
#ifndef NETSTACK_WIRE_TESTING_H_
#define NETSTACK_WIRE_TESTING_H_

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "gtest/gtest.h"
#include "netstack/wire/error.h"

namespace netstack::wire::testing {

// "45 00 00 3c ..." (whitespace ignored) -> bytes. Aborts the test binary on
// a malformed literal, which is a bug in the test itself.
std::vector<uint8_t> Hex(std::string_view hex);

// Calls `parse(prefix)` for every strict prefix of `bytes` (lengths 0 to
// size-1) and expects a non-kOk result each time; when `expected` is not
// kOk, that exact error is required. Proves the parser is total on
// truncations and never reads past a short buffer (ASan checks the latter:
// each prefix is copied into its own exactly-sized heap allocation).
template <typename ParseFn>
void ExpectEveryTruncationFails(std::span<const uint8_t> bytes,
                                ParseFn parse,
                                WireError expected = WireError::kTruncated) {
  for (size_t len = 0; len < bytes.size(); ++len) {
    std::vector<uint8_t> prefix(bytes.begin(), bytes.begin() + len);
    prefix.shrink_to_fit();
    const WireError got = parse(std::span<const uint8_t>(prefix));
    EXPECT_NE(got, WireError::kOk) << "prefix length " << len;
    if (expected != WireError::kOk) {
      EXPECT_EQ(got, expected)
          << "prefix length " << len << ": got " << WireErrorName(got);
    }
  }
}

}  // namespace netstack::wire::testing

#endif  // NETSTACK_WIRE_TESTING_H_
