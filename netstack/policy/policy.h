// Egress policy (issue #33): which destinations a guest may reach, by DNS
// name or address, decided in the backend for every new flow (a TCP SYN,
// a UDP flow, an ICMP echo) and for every DNS query and answer.
//
// Rules (RULE is `[tcp:|udp:|icmp:]TARGET[:PORT[-PORT]]`):
//   example.com           exactly that name
//   *.example.com         any name below it, at any depth; not the apex
//   192.0.2.0/24, 192.0.2.7
//   [2001:db8::/32]:443   IPv6 in brackets when a port follows (brackets
//                         are also accepted without one)
//   tcp:example.com:443, udp:192.0.2.0/24:5000-5999, icmp:192.0.2.1
// A rule without a protocol covers TCP, UDP and ICMP echo, or TCP and UDP
// when it has a port; an icmp: rule takes no port. A CIDR with host bits
// set is refused (192.0.2.7/24: the writer meant one of two things). A
// CIDR written in an IPv4-embedding IPv6 form (below), /96 or longer, is
// stored as the IPv4 CIDR it means. Names are compared without regard to
// ASCII case and without a trailing dot; a name is 1..253 bytes of labels
// 1..63 bytes of letters, digits, '-' and '_'.
//
// Modes:
//   - open: no allow rule. Everything is allowed but what a deny rule
//     names, and the cloud metadata addresses (below). Today's behaviour
//     plus the metadata block.
//   - allowlist: any allow rule. Only what an allow rule admits; a deny
//     rule beats an allow rule.
//   - none (`--egress=none`): no outbound flow at all, DNS included.
//     Port forwards into the guest are not egress and still work.
//
// Addresses denied by default:
//   - in allowlist mode, unless a CIDR (or address) allow rule covers them
//     explicitly: loopback, RFC 1918, 100.64/10, fc00::/7, link-local
//     (169.254/16, fe80::/10), multicast, broadcast (255.255.255.255 and
//     0.0.0.0/8), the unspecified addresses; and an IPv6 address that
//     embeds an IPv4 one (::ffff:0:0/96 mapped, ::/96 compatible,
//     64:ff9b::/96 NAT64) is judged as that IPv4 address. A name rule
//     never admits any of these (DNS rebinding).
//   - in every mode, open included: 169.254.169.254 and fd00:ec2::254,
//     the cloud metadata services, unless an allow rule names the address
//     (or a CIDR containing it) explicitly.
//   The host's loopback through the gateway address stays under
//   --host-loopback (BackendPolicy), not here: the backend maps the
//   gateway to 127.0.0.1 before it asks.
//
// Name rules admit addresses only through pins: an address is admitted
// for a name rule after the backend's DNS forwarder has answered this
// guest with it for a name the rule allows (dns_policy.h), for the
// answer's TTL plus kPinGrace. PinTable holds them, bounded.
//
// Thread-compatible; a Policy is immutable once made, so a new one
// replaces it whole (SIGHUP, the forward API) and the backend then
// re-checks its open flows.
#ifndef NETSTACK_POLICY_POLICY_H_
#define NETSTACK_POLICY_POLICY_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/btree_map.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "netstack/base/time.h"
#include "netstack/transport/address.h"

namespace netstack::policy {

// Bits of Rule::protocols and the protocol a flow asks for.
enum Protocol : uint8_t {
  kTcp = 1,
  kUdp = 2,
  kIcmp = 4,
  kAnyProtocol = kTcp | kUdp | kIcmp,
};

struct Target {
  enum class Kind : uint8_t { kName, kWildcard, kCidr };
  Kind kind = Kind::kName;
  // kName: the name; kWildcard: the suffix after "*." ("example.com").
  // Lower case, no trailing dot.
  std::string name;
  // kCidr: the network (host bits zero) and its length (32 or 128 for
  // one address).
  transport::IpAddress address;
  uint8_t prefix_len = 0;
};

struct Rule {
  bool allow = true;
  uint8_t protocols = kAnyProtocol;
  Target target;
  uint16_t port_lo = 0;  // 0..65535 (0 and 65535: every port)
  uint16_t port_hi = 65535;
  std::string text;  // as written ("allow tcp:example.com:443")
};

// One rule, "RULE" as above; `allow` says which list it is for.
// InvalidArgument says what is wrong, without repeating the text.
absl::StatusOr<Rule> ParseRule(std::string_view text, bool allow);

struct PolicyConfig {
  std::vector<Rule> rules;  // in order; the index is the rule's number
  bool egress_none = false;
};

// A policy file: one rule per line, "allow RULE" or "deny RULE", or
// "egress none"; '#' starts a comment; blank lines are skipped.
// Errors name the line ("line 3: ...").
absl::StatusOr<PolicyConfig> ParsePolicyFile(std::string_view contents);

// Why a verdict is what it is: the flow log's "reason" and a counter each.
#define NETSTACK_POLICY_REASONS(X)                        \
  X(kOpen, "open", true)                                  \
  X(kAllowRule, "allow_rule", true)                       \
  X(kPinnedName, "pinned_name", true)                     \
  X(kDenyRule, "deny_rule", false)                        \
  X(kNotAllowed, "not_allowed", false)                    \
  X(kEgressNone, "egress_none", false)                    \
  X(kSpecialAddress, "special_address", false)            \
  X(kMetadata, "metadata", false)                         \
  /* Not the policy's: the backend's new-flow rate dropped an allowed */ \
  /* flow (backend/rate_limit.h); Decide never says it. */              \
  X(kRateLimited, "rate_limited", false)

enum class Reason : uint8_t {
#define NETSTACK_POLICY_ENUM(e, name, allow) e,
  NETSTACK_POLICY_REASONS(NETSTACK_POLICY_ENUM)
#undef NETSTACK_POLICY_ENUM
};
inline constexpr size_t kReasonCount = 9;
std::string_view ReasonName(Reason r);

struct Verdict {
  bool allow = true;
  Reason reason = Reason::kOpen;
  int rule = -1;     // the deciding rule's index, -1 if none
  std::string name;  // the pinned name that admitted it, if any
};

// Addresses the DNS forwarder has answered this guest with, for names
// an allow rule admits. Bounded: at most `max_entries` addresses (past
// it the entry that expires first is dropped, counted); each keeps the
// name it was pinned for (the latest) and its expiry.
class PinTable {
 public:
  static constexpr absl::Duration kPinGrace = absl::Seconds(60);
  explicit PinTable(size_t max_entries = 16384);

  // `address` answered for `name` with `ttl`: pinned until now + ttl +
  // kPinGrace (a later pin of the same address extends it).
  void Pin(const transport::IpAddress& address, std::string_view name,
           absl::Duration ttl, Instant now);
  // The name `address` is pinned for, if its pin has not expired.
  std::optional<std::string_view> Find(const transport::IpAddress& address,
                                       Instant now) const;
  // Drops expired pins (the backend calls it from a timer).
  void Expire(Instant now);
  void Clear();
  size_t size() const;
  uint64_t evicted() const { return evicted_; }

 private:
  struct Pin_ {
    std::string name;
    Instant expiry;
    uint64_t seq;  // ties expiry_order_'s keys
  };
  using ExpiryKey = std::pair<Instant, uint64_t>;
  void Erase(const transport::IpAddress& address);
  size_t max_entries_;
  absl::flat_hash_map<transport::IpAddress, Pin_> pins_;
  // The same entries by expiry: eviction and Expire take the first.
  absl::btree_map<ExpiryKey, transport::IpAddress> expiry_order_;
  uint64_t next_seq_ = 0;
  uint64_t evicted_ = 0;
};

class Policy {
 public:
  // Checks the rules (nothing that cannot match; at most kMaxRules).
  static constexpr size_t kMaxRules = 100000;
  static absl::StatusOr<std::shared_ptr<const Policy>> Create(
      PolicyConfig config);
  // The open policy with no rule: today's behaviour plus the metadata
  // block.
  static std::shared_ptr<const Policy> Open();

  bool allowlist() const { return allowlist_; }
  bool egress_none() const { return config_.egress_none; }
  const std::vector<Rule>& rules() const { return config_.rules; }

  // A new flow to `dst`:`port` (port 0 for ICMP). `pins` may be null (no
  // name rule can then admit).
  Verdict Decide(Protocol protocol, const transport::IpAddress& dst,
                 uint16_t port, const PinTable* pins, Instant now) const;

  // A DNS query for `name` (any type): kDeny means answer it NXDOMAIN
  // without asking upstream; kAllow means a name rule admits it (its
  // answers are pinned); kUnlisted means no name rule mentions it (open
  // mode: forward, pin nothing; allowlist mode: deny).
  enum class NameVerdict : uint8_t { kAllow, kDeny, kUnlisted };
  NameVerdict DecideName(std::string_view name, int* rule = nullptr) const;

  // Whether `address` is one of the addresses denied by default in
  // allowlist mode (above), and whether an explicit CIDR allow rule
  // admits it: the DNS answer filter strips such an answer for an allowed
  // name (rebinding) unless this says it is explicitly allowed.
  static bool IsSpecial(const transport::IpAddress& address);
  bool ExplicitlyAllowed(const transport::IpAddress& address,
                         Protocol protocol) const;

  // The lines a start line or the forward API's "policy get" shows.
  std::string Describe() const;

  ~Policy();

 private:
  // The rules of one verdict (allow or deny), indexed so that Decide
  // costs a few hash lookups however many rules there are (policy.cc).
  struct Index;
  explicit Policy(PolicyConfig config);
  PolicyConfig config_;
  bool allowlist_ = false;
  std::unique_ptr<const Index> allow_;
  std::unique_ptr<const Index> deny_;
};

}  // namespace netstack::policy

#endif  // NETSTACK_POLICY_POLICY_H_
