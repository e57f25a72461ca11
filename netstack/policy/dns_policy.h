// The egress policy at the DNS forwarder (issue #33): a query for a name
// the policy denies is answered NXDOMAIN here and never goes upstream;
// an answer for an allowed name pins its addresses (policy.h, PinTable),
// following CNAME chains from the question's name; an answer record that
// points at an address denied by default (loopback, private, link-local,
// ..., Policy::IsSpecial) is taken out of the answer unless a CIDR rule
// allows that address explicitly (DNS rebinding).
//
// Why NXDOMAIN and not REFUSED: a stub resolver given REFUSED tries the
// next nameserver and then reports a server failure, which applications
// retry; NXDOMAIN is final, cached by the negative TTL we give (the SOA
// is not ours to invent, so none: resolvers then cache it briefly), and
// every resolver library reports it at once as "no such name", which is
// the truth from the guest's point of view.
//
// Everything here reads only inside the message it is given and never
// trusts a length, count, pointer or offset in it: a malformed answer is
// passed through unpinned if the name is not allowed, and replaced by
// SERVFAIL if it is (nothing in it can be pinned or checked). A
// truncated answer (TC=1) that does not parse loses its records instead,
// so the guest's resolver retries over TCP.
//
// Stripping applies in allowlist mode only: in open mode the special
// addresses are not denied (policy.h), and the answer passes untouched.
// A record is removed with its bytes; compression pointers after it are
// moved to match. A pointer into a removed record's name cannot be kept,
// so such an answer (no known server writes one) becomes SERVFAIL rather
// than carry the address. Removing records breaks a DNSSEC signature over
// them: a validating guest sees the answer as bogus, which is also a
// refusal.
#ifndef NETSTACK_POLICY_DNS_POLICY_H_
#define NETSTACK_POLICY_DNS_POLICY_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "netstack/base/time.h"
#include "netstack/policy/policy.h"

namespace netstack::policy {

struct DnsPolicyCounters {
  uint64_t queries_denied = 0;      // answered NXDOMAIN here
  uint64_t answers_pinned = 0;      // answers that pinned >= 1 address
  uint64_t addresses_pinned = 0;
  uint64_t records_stripped = 0;    // rebinding: special addresses taken out
  uint64_t answers_malformed = 0;   // an allowed name's answer we could not read
};

// A question's name as text, for DecideQuery and FilterAnswer: labels
// joined by '.', ASCII lower case, no trailing dot ("." for the root). A
// byte that is not printable ASCII, and a '.' or '\' inside a label, is
// written \DDD (RFC 1035 5.1), so that no label can pose as two and
// match a rule it is not under. `question` starts with an uncompressed
// name (a query's question). Returns a view into `out`, empty if the
// name does not parse.
inline constexpr size_t kNameTextMax = 1024;
std::string_view QuestionNameText(std::span<const uint8_t> question,
                                  std::span<char, kNameTextMax> out);

// What to do with a query whose question is `qname` (the forwarder has
// parsed it: one question, opcode QUERY). `verdict`, if set, says why
// (the flow log's verdict for a denied query).
enum class QueryAction : uint8_t { kForward, kNxdomain };
QueryAction DecideQuery(const Policy& policy, std::string_view qname,
                        DnsPolicyCounters& counters,
                        Verdict* verdict = nullptr);

// Writes the NXDOMAIN answer to `query` (its header and question, with
// QR, RA and RCODE 3 set, no records) into `out`; returns its length, or
// 0 if `out` is too small or the query has no readable question.
size_t WriteNxdomain(std::span<const uint8_t> query, std::span<uint8_t> out);

// Filters the upstream answer `msg` (its first `len` bytes) for question
// `qname` in place: pins the A and AAAA records of the names in the
// CNAME chain from `qname` when the policy allows `qname` by name, and
// removes A/AAAA records whose address is special and not explicitly
// allowed (the answer's counts and length are updated). `qname` must be
// the answer's question (QuestionNameText of it); the CNAME chain starts
// there. `pins` may be null: nothing is pinned. Returns the new length
// (<= len); 0 means: answer SERVFAIL instead.
size_t FilterAnswer(const Policy& policy, PinTable* pins, Instant now,
                    std::string_view qname, std::span<uint8_t> msg,
                    size_t len, DnsPolicyCounters& counters);

}  // namespace netstack::policy

#endif  // NETSTACK_POLICY_DNS_POLICY_H_
