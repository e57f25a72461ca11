// The egress policy's DNS part (netstack/policy/dns_policy.h): the
// fuzzer's bytes as an upstream's answer to FilterAnswer, and as a
// guest's query to WriteNxdomain and QuestionNameText, under a small
// fixed policy. The first byte chooses:
//   bit 0  the allowlist below (else the open policy);
//   bit 1  the question's own name as qname (else www.allowed.test, an
//          allowed name that is rarely the question's);
//   bit 2  no pin table.
// The rest is the message, in a buffer of exactly its size (ASan sees a
// read past it).
//
// Checked:
//   - FilterAnswer returns at most the length it was given; in open mode
//     it changes nothing;
//   - what it returns is a fixed point: filtered again, the same length
//     and bytes, nothing more stripped (so no special address is left and
//     the compacted message reads as well formed);
//   - records it strips are gone from the counts, one for one;
//   - WriteNxdomain's answer is the query's id and question with QR, RA
//     and NXDOMAIN, and no record.
#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "absl/time/time.h"
#include "fuzz/fuzz_check.h"
#include "netstack/base/time.h"
#include "netstack/policy/dns_policy.h"
#include "netstack/policy/policy.h"
#include "netstack/wire/bytes.h"

namespace netstack::policy {
namespace {

std::shared_ptr<const Policy> MakeAllowlist() {
  absl::StatusOr<PolicyConfig> c = ParsePolicyFile(
      "allow *.allowed.test\n"
      "allow example.com\n"
      "deny blocked.allowed.test\n"
      "allow 10.9.0.0/16\n"
      "allow [fd00:9::/32]\n");
  FUZZ_CHECK(c.ok());
  absl::StatusOr<std::shared_ptr<const Policy>> p =
      Policy::Create(*std::move(c));
  FUZZ_CHECK(p.ok());
  return *p;
}

uint32_t RecordCount(std::span<const uint8_t> m) {
  return uint32_t{wire::LoadBe16(&m[6])} + wire::LoadBe16(&m[8]) +
         wire::LoadBe16(&m[10]);
}

void CheckNxdomain(std::span<const uint8_t> query) {
  std::vector<uint8_t> out(query.size() + 8, 0xee);
  const size_t n = WriteNxdomain(query, out);
  if (n == 0) return;
  FUZZ_CHECK(n >= 12 + 5 && n <= query.size());
  FUZZ_CHECK(out[0] == query[0] && out[1] == query[1]);
  FUZZ_CHECK((out[2] & 0x80) && (out[2] & 0x78) == (query[2] & 0x78));
  FUZZ_CHECK(out[3] == 0x83);
  FUZZ_CHECK(wire::LoadBe16(&out[4]) == 1 && RecordCount(out) == 0);
  FUZZ_CHECK(std::equal(out.begin() + 12, out.begin() + n, query.begin() + 12));
  FUZZ_CHECK(std::all_of(out.begin() + n, out.end(),
                         [](uint8_t c) { return c == 0xee; }));
  // The answer's question reads as the query's did.
  std::array<char, kNameTextMax> a, b;
  FUZZ_CHECK(QuestionNameText(std::span(out).subspan(12, n - 12), a) ==
             QuestionNameText(query.subspan(12), b));
}

}  // namespace
}  // namespace netstack::policy

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace netstack::policy;
  static const std::shared_ptr<const Policy> allowlist = MakeAllowlist();
  static const std::shared_ptr<const Policy> open = Policy::Open();
  static PinTable pins(64);
  if (size < 1) return 0;
  const uint8_t choice = data[0];
  const Policy& policy = (choice & 1) ? *allowlist : *open;
  PinTable* pin_table = (choice & 4) ? nullptr : &pins;
  pins.Clear();
  const netstack::Instant now = absl::FromUnixSeconds(1'000'000);

  const size_t len = size - 1;
  std::vector<uint8_t> msg(data + 1, data + size);

  std::array<char, kNameTextMax> text;
  std::string_view qname = "www.allowed.test";
  if ((choice & 2) && len > 12) {
    qname = QuestionNameText(std::span(msg).subspan(12), text);
  }
  if (len >= 12) CheckNxdomain(msg);

  DnsPolicyCounters counters;
  (void)DecideQuery(policy, qname, counters);
  const size_t n =
      FilterAnswer(policy, pin_table, now, qname, msg, len, counters);
  FUZZ_CHECK(n <= len);
  if (!policy.allowlist()) {
    FUZZ_CHECK(n == len);
    FUZZ_CHECK(std::equal(msg.begin(), msg.end(), data + 1));
  }
  if (n == 0) return 0;
  if (counters.records_stripped != 0) {
    FUZZ_CHECK(n < len);
    FUZZ_CHECK(RecordCount(std::span(data + 1, len)) -
                   RecordCount(std::span(msg).first(n)) ==
               counters.records_stripped);
  }
  // A fixed point: in a buffer of exactly its size.
  std::vector<uint8_t> again(msg.begin(), msg.begin() + n);
  const uint64_t stripped = counters.records_stripped;
  const size_t n2 =
      FilterAnswer(policy, pin_table, now, qname, again, n, counters);
  FUZZ_CHECK(n2 == n);
  FUZZ_CHECK(std::equal(again.begin(), again.end(), msg.begin()));
  FUZZ_CHECK(counters.records_stripped == stripped);
  return 0;
}
