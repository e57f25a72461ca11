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
// SERVFAIL if it is (nothing in it can be pinned or checked).
#ifndef NETSTACK_POLICY_DNS_POLICY_H_
#define NETSTACK_POLICY_DNS_POLICY_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

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

// What to do with a query whose question is `qname` (the forwarder has
// parsed it: one question, opcode QUERY).
enum class QueryAction : uint8_t { kForward, kNxdomain };
QueryAction DecideQuery(const Policy& policy, std::string_view qname,
                        DnsPolicyCounters& counters);

// Writes the NXDOMAIN answer to `query` (its header and question, with
// QR, RA and RCODE 3 set, no records) into `out`; returns its length, or
// 0 if `out` is too small or the query has no readable question.
size_t WriteNxdomain(std::span<const uint8_t> query, std::span<uint8_t> out);

// Filters the upstream answer `msg` (its first `len` bytes) for question
// `qname` in place: pins the A and AAAA records of the names in the
// CNAME chain from `qname` when the policy allows `qname` by name, and
// removes A/AAAA records whose address is special and not explicitly
// allowed (the answer's counts and length are updated). Returns the new
// length (<= len); 0 means: answer SERVFAIL instead.
size_t FilterAnswer(const Policy& policy, PinTable& pins, Instant now,
                    std::string_view qname, std::span<uint8_t> msg,
                    size_t len, DnsPolicyCounters& counters);

}  // namespace netstack::policy

#endif  // NETSTACK_POLICY_DNS_POLICY_H_
