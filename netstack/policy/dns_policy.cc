#include "netstack/policy/dns_policy.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <optional>

#include "absl/time/time.h"
#include "netstack/transport/address.h"
#include "netstack/wire/address.h"
#include "netstack/wire/bytes.h"

namespace netstack::policy {
namespace {

// The header (RFC 1035 4.1.1):
//                                 1  1  1  1  1  1
//   0  1  2  3  4  5  6  7  8  9  0  1  2  3  4  5
// +--+--+--+--+--+--+--+--+--+--+--+--+--+--+--+--+
// |                      ID                       |
// |QR|   Opcode  |AA|TC|RD|RA|   Z    |   RCODE   |
// |                    QDCOUNT                    |
// |                    ANCOUNT                    |
// |                    NSCOUNT                    |
// |                    ARCOUNT                    |
constexpr size_t kHeaderLen = 12;
constexpr size_t kFlagsOffset = 2;
constexpr size_t kRcodeOffset = 3;
constexpr size_t kQdcountOffset = 4;
constexpr size_t kAncountOffset = 6;   // then NSCOUNT, ARCOUNT
constexpr uint8_t kQrBit = 0x80;       // byte 2
constexpr uint8_t kOpcodeMask = 0x78;  // byte 2
constexpr uint8_t kTcBit = 0x02;       // byte 2
constexpr uint8_t kRdBit = 0x01;       // byte 2
constexpr uint8_t kRaBit = 0x80;       // byte 3
constexpr uint8_t kRcodeNxdomain = 3;

// A resource record after its owner name (4.1.3): TYPE, CLASS, TTL,
// RDLENGTH, then RDATA.
constexpr size_t kRrFixedLen = 10;
constexpr uint16_t kTypeA = 1;
constexpr uint16_t kTypeCname = 5;
constexpr uint16_t kTypeAaaa = 28;
constexpr uint16_t kClassIn = 1;

// Names: at most 255 octets on the wire, labels at most 63 (2.3.4). A
// pointer is two octets whose top bits are 11 (4.1.4); 01 and 10 were
// extended label types (RFC 6891 5), which nobody sends: malformed.
constexpr size_t kMaxName = 255;
constexpr uint8_t kMaxLabel = 63;
constexpr uint8_t kPointerBits = 0xc0;
// Pointer hops within one name: every hop of a sane encoder brings at
// least one label, so a name (at most 127 labels) needs fewer. Bounds the
// work per name whatever the message (a chain of pointers to pointers).
constexpr int kMaxHops = 128;
constexpr size_t kNoPointer = SIZE_MAX;

// The CNAME chain followed from the question (names, not hops): long
// enough for any CDN's, and bounds the passes over the answer section.
constexpr size_t kMaxChain = 16;
// Pins last the record's TTL (plus the grace), at most a day: an
// upstream's TTL of years does not pin for years.
constexpr uint32_t kMaxPinTtl = 86400;
// Removed runs of records a message may have (adjacent records merge
// into one run); an answer that needs more becomes SERVFAIL.
constexpr size_t kMaxRemovedRuns = 64;

uint8_t AsciiLower(uint8_t c) {
  return c >= 'A' && c <= 'Z' ? static_cast<uint8_t>(c + ('a' - 'A')) : c;
}

// A name decoded (pointers followed) into canonical form: uncompressed
// wire format, ASCII lower case, the root label included.
struct Name {
  size_t len = 0;
  std::array<uint8_t, kMaxName> bytes;
  bool operator==(const Name& o) const {
    return len == o.len && std::memcmp(bytes.data(), o.bytes.data(), len) == 0;
  }
};

// Where names and their suffixes begin (a label's length octet or a
// pointer, in place): the only places a pointer may lead (RFC 1035
// 4.1.4, "a prior occurrence of the same name"). A pointer into other
// bytes (a record's fixed part, the opaque RDATA of a type that carries
// no names) is malformed: what it reads would not move with the records
// when some are removed, so it could change meaning.
class NameStarts {
 public:
  void Mark(size_t at) {
    if (at < kMaxTarget) bits_[at / 64] |= uint64_t{1} << (at % 64);
  }
  bool Has(size_t at) const {
    return at < kMaxTarget && (bits_[at / 64] >> (at % 64)) & 1;
  }

 private:
  static constexpr size_t kMaxTarget = 0x4000;  // 14-bit pointers
  std::array<uint64_t, kMaxTarget / 64> bits_{};
};

// The name at m[at]. Returns where it ends in place (after its root label
// or its first pointer), or 0 if it is malformed: past the message, a
// label type other than 0 and 11, longer than 255 octets, or a pointer
// that does not go strictly back (before the part of the name that leads
// to it; so it cannot loop) or lands in the header, or (with `starts`)
// anywhere but where a name begins; the name's own labels are marked
// there. `pointer`, if set, gets the offset of the pointer that ends the
// name in place, or kNoPointer. `out`, if set, gets the decoded name.
size_t ReadName(std::span<const uint8_t> m, size_t at, Name* out,
                size_t* pointer, NameStarts* starts = nullptr) {
  size_t end = 0;
  size_t limit = at;  // a pointer must go before this
  size_t pos = at;
  size_t n = 0;
  int hops = 0;
  if (pointer != nullptr) *pointer = kNoPointer;
  for (;;) {
    if (pos >= m.size()) return 0;
    const uint8_t b = m[pos];
    if (end == 0 && starts != nullptr) starts->Mark(pos);
    if ((b & kPointerBits) == kPointerBits) {
      if (m.size() - pos < 2) return 0;
      const size_t target =
          static_cast<size_t>(b & ~kPointerBits) << 8 | m[pos + 1];
      if (end == 0) {
        end = pos + 2;
        if (pointer != nullptr) *pointer = pos;
      }
      if (target >= limit || target < kHeaderLen || ++hops > kMaxHops ||
          (starts != nullptr && !starts->Has(target))) {
        return 0;
      }
      limit = pos = target;
      continue;
    }
    if (b > kMaxLabel) return 0;
    if (n + 1 + b > kMaxName) return 0;
    if (b == 0) {
      if (out != nullptr) {
        out->bytes[n] = 0;
        out->len = n + 1;
      }
      return end != 0 ? end : pos + 1;
    }
    if (m.size() - pos - 1 < b) return 0;
    if (out != nullptr) {
      out->bytes[n] = b;
      for (size_t i = 1; i <= b; ++i) {
        out->bytes[n + i] = AsciiLower(m[pos + i]);
      }
    }
    n += 1 + b;
    pos += 1 + b;
  }
}

// Where the name at m[at] ends in place, and its ending pointer; no
// pointer followed. For messages ReadName has already accepted (while
// compaction overwrites what pointers lead to).
size_t SkipName(std::span<const uint8_t> m, size_t at, size_t* pointer) {
  *pointer = kNoPointer;
  for (;;) {
    const uint8_t b = m[at];
    if ((b & kPointerBits) == kPointerBits) {
      *pointer = at;
      return at + 2;
    }
    if (b == 0) return at + 1;
    at += 1 + b;
  }
}

// The RDATA of the types whose names may be compressed (RFC 1035 3.3 and
// RFC 3597 4, which also has receivers decompress RP, AFSDB, RT, SIG,
// PX, NXT, NAPTR and SRV): `prefix` octets, then `strings`
// <character-string>s, then `names` names, then exactly `tail` octets
// (-1: any number). Other types carry no pointer (RFC 3597 4): their
// RDATA is opaque here.
struct RdataLayout {
  uint8_t prefix = 0;
  uint8_t strings = 0;
  uint8_t names = 0;
  int8_t tail = 0;
};

std::optional<RdataLayout> LayoutOf(uint16_t type) {
  switch (type) {
    case 2:   // NS
    case 3:   // MD
    case 4:   // MF
    case 5:   // CNAME
    case 7:   // MB
    case 8:   // MG
    case 9:   // MR
    case 12:  // PTR
      return RdataLayout{.names = 1};
    case 6:  // SOA: MNAME, RNAME, five 32-bit fields
      return RdataLayout{.names = 2, .tail = 20};
    case 14:  // MINFO
    case 17:  // RP
      return RdataLayout{.names = 2};
    case 15:  // MX
    case 18:  // AFSDB
    case 21:  // RT
    case 36:  // KX
      return RdataLayout{.prefix = 2, .names = 1};
    case 26:  // PX
      return RdataLayout{.prefix = 2, .names = 2};
    case 33:  // SRV: priority, weight, port, target
      return RdataLayout{.prefix = 6, .names = 1};
    case 35:  // NAPTR: order, preference, flags, services, regexp, replacement
      return RdataLayout{.prefix = 4, .strings = 3, .names = 1};
    case 24:  // SIG: 18 octets, the signer's name, the signature
      return RdataLayout{.prefix = 18, .names = 1, .tail = -1};
    case 30:  // NXT: the next name, a type bitmap
      return RdataLayout{.names = 1, .tail = -1};
    default:
      return std::nullopt;
  }
}

// One resource record, as found in the message.
struct Record {
  size_t start = 0;  // its owner name
  uint16_t type = 0;
  uint16_t klass = 0;
  uint32_t ttl = 0;
  size_t rdata = 0;
  size_t rdlength = 0;
  size_t end = 0;
  bool address() const {
    return klass == kClassIn && (type == kTypeA || type == kTypeAaaa);
  }
};

// Walks the names in r's RDATA (if its type may compress them): each
// must lie inside the RDATA, and the layout must fill it exactly. Calls
// `name(offset)` for each name's start. With `follow`, names are read
// with ReadName (checked to the end, against and into `starts`);
// without, only skipped in place.
template <typename F>
bool WalkRdataNames(std::span<const uint8_t> m, const Record& r, bool follow,
                    F&& name, NameStarts* starts = nullptr) {
  const std::optional<RdataLayout> layout = LayoutOf(r.type);
  if (!layout) return true;
  const size_t end = r.rdata + r.rdlength;
  const std::span<const uint8_t> upto = m.first(end);
  size_t at = r.rdata + layout->prefix;
  if (at > end) return false;
  for (int i = 0; i < layout->strings; ++i) {
    if (at >= end || end - at - 1 < upto[at]) return false;
    at += 1 + upto[at];
  }
  for (int i = 0; i < layout->names; ++i) {
    size_t pointer;
    // Reading within `upto` keeps the name's own octets inside the RDATA;
    // a pointer may still lead anywhere before it.
    const size_t next = follow ? ReadName(upto, at, nullptr, &pointer, starts)
                               : SkipName(m, at, &pointer);
    if (next == 0) return false;
    name(at);
    at = next;
  }
  if (at > end) return false;
  return layout->tail < 0 || end - at == static_cast<size_t>(layout->tail);
}

// The record at m[at], checked: its owner name, its fixed part and its
// RDATA inside the message; an IN A of 4 octets and an IN AAAA of 16;
// the names in its RDATA well formed. `owner`, if set, gets the owner.
// `starts`: as ReadName's.
bool ReadRecord(std::span<const uint8_t> m, size_t at, Record* r, Name* owner,
                NameStarts* starts = nullptr) {
  r->start = at;
  const size_t fixed = ReadName(m, at, owner, nullptr, starts);
  if (fixed == 0 || m.size() - fixed < kRrFixedLen) return false;
  const uint8_t* p = m.data() + fixed;
  r->type = wire::LoadBe16(p);
  r->klass = wire::LoadBe16(p + 2);
  r->ttl = wire::LoadBe32(p + 4);
  r->rdlength = wire::LoadBe16(p + 8);
  r->rdata = fixed + kRrFixedLen;
  if (m.size() - r->rdata < r->rdlength) return false;
  r->end = r->rdata + r->rdlength;
  if (r->klass == kClassIn) {
    if (r->type == kTypeA && r->rdlength != 4) return false;
    if (r->type == kTypeAaaa && r->rdlength != 16) return false;
  }
  return WalkRdataNames(
      m, *r, /*follow=*/true, [](size_t) {}, starts);
}

transport::IpAddress AddressOf(std::span<const uint8_t> m, const Record& r) {
  if (r.type == kTypeA) {
    return transport::IpAddress(wire::Ipv4Address::FromBytes(&m[r.rdata]));
  }
  return transport::IpAddress(wire::Ipv6Address::FromBytes(&m[r.rdata]));
}

struct Counts {
  // Question, answer, authority, additional.
  std::array<uint16_t, 4> n{};
  size_t records() const { return size_t{n[1]} + n[2] + n[3]; }
  // The section (1..3) of record i (0-based, after the question).
  int section(size_t i) const {
    if (i < n[1]) return 1;
    return i < size_t{n[1]} + n[2] ? 2 : 3;
  }
};

Counts ReadCounts(std::span<const uint8_t> m) {
  Counts c;
  for (size_t s = 0; s < 4; ++s) {
    c.n[s] = wire::LoadBe16(&m[kQdcountOffset + 2 * s]);
  }
  return c;
}

// Reads the whole message: the header, one question (its name in
// `question`), every record. Returns where the records end (trailing
// octets are left alone), or 0 if any of it is malformed.
size_t CheckMessage(std::span<const uint8_t> m, Name* question) {
  if (m.size() < kHeaderLen || !(m[kFlagsOffset] & kQrBit)) return 0;
  const Counts c = ReadCounts(m);
  if (c.n[0] != 1) return 0;
  NameStarts starts;
  size_t at = ReadName(m, kHeaderLen, question, nullptr, &starts);
  if (at == 0 || m.size() - at < 4) return 0;
  at += 4;
  for (size_t i = 0; i < c.records(); ++i) {
    Record r;
    if (!ReadRecord(m, at, &r, nullptr, &starts)) return 0;
    at = r.end;
  }
  return at;
}

// Where the question ends (the header and question are never changed).
size_t QuestionEnd(std::span<const uint8_t> m) {
  size_t pointer;
  return SkipName(m, kHeaderLen, &pointer) + 4;
}

// Whether `text` (as given to FilterAnswer) names `name`: the same text
// without regard to ASCII case, with or without one trailing dot.
bool SameName(std::string_view text, const Name& name) {
  std::array<char, kNameTextMax> buf;
  const std::string_view have = QuestionNameText(
      std::span<const uint8_t>(name.bytes.data(), name.len), buf);
  if (text.size() > 1 && text.back() == '.') text.remove_suffix(1);
  if (have.empty() || have.size() != text.size()) return false;
  for (size_t i = 0; i < have.size(); ++i) {
    if (static_cast<uint8_t>(have[i]) !=
        AsciiLower(static_cast<uint8_t>(text[i]))) {
      return false;
    }
  }
  return true;
}

// Runs of removed octets [begin, end) in the original message, in order;
// and where an original offset lands once they are gone.
class Removed {
 public:
  bool empty() const { return count_ == 0; }
  // false: too many runs.
  bool Add(size_t begin, size_t end) {
    if (count_ > 0 && runs_[count_ - 1].end == begin) {
      runs_[count_ - 1].end = end;
      return true;
    }
    if (count_ == runs_.size()) return false;
    runs_[count_++] = {begin, end};
    return true;
  }
  // The new offset of original offset `at`; nullopt if it was removed.
  std::optional<size_t> Translate(size_t at) const {
    size_t shift = 0;
    for (size_t i = 0; i < count_; ++i) {
      if (at < runs_[i].begin) break;
      if (at < runs_[i].end) return std::nullopt;
      shift += runs_[i].end - runs_[i].begin;
    }
    return at - shift;
  }

 private:
  struct Run {
    size_t begin;
    size_t end;
  };
  std::array<Run, kMaxRemovedRuns> runs_{};
  size_t count_ = 0;
};

// Rewrites the pointer at m[at] (in the moved copy) for the removals;
// false if it leads into a removed record.
bool FixPointer(std::span<uint8_t> m, size_t at, const Removed& removed) {
  const size_t target =
      static_cast<size_t>(m[at] & ~kPointerBits) << 8 | m[at + 1];
  const std::optional<size_t> moved = removed.Translate(target);
  if (!moved) return false;
  wire::StoreBe16(&m[at], static_cast<uint16_t>(0xc000 | *moved));
  return true;
}

enum class StripResult : uint8_t { kOk, kCannot };

// Removes, from every section, the IN A and AAAA records whose address
// the policy denies by default and no CIDR rule allows, moving what
// follows down and its pointers with it. `m` has been checked
// (CheckMessage); `records_end` is where its records end. `*len` is
// updated; `*stripped` counts the records removed.
StripResult Strip(const Policy& policy, std::span<uint8_t> m,
                  size_t records_end, size_t* len, uint64_t* stripped) {
  const Counts counts = ReadCounts(m);
  Counts kept = counts;
  Removed removed;
  size_t read = QuestionEnd(m);
  size_t write = read;
  for (size_t i = 0; i < counts.records(); ++i) {
    // In place only: what pointers lead to may already be overwritten.
    Record r;
    size_t owner_pointer;
    const size_t fixed = SkipName(m, read, &owner_pointer);
    r.start = read;
    r.type = wire::LoadBe16(&m[fixed]);
    r.klass = wire::LoadBe16(&m[fixed + 2]);
    r.rdlength = wire::LoadBe16(&m[fixed + 8]);
    r.rdata = fixed + kRrFixedLen;
    r.end = r.rdata + r.rdlength;
    read = r.end;
    if (r.address()) {
      const transport::IpAddress a = AddressOf(m, r);
      if (Policy::IsSpecial(a) && !policy.ExplicitlyAllowed(a, kTcp) &&
          !policy.ExplicitlyAllowed(a, kUdp) &&
          !policy.ExplicitlyAllowed(a, kIcmp)) {
        if (!removed.Add(r.start, r.end)) return StripResult::kCannot;
        --kept.n[counts.section(i)];
        ++*stripped;
        continue;
      }
    }
    if (removed.empty()) {
      write = r.end;
      continue;  // nothing before it moved: nothing to fix
    }
    // Where its pointers are, found before the move overwrites them.
    std::array<size_t, 3> pointers;
    size_t n = 0;
    if (owner_pointer != kNoPointer) pointers[n++] = owner_pointer;
    (void)WalkRdataNames(m, r, /*follow=*/false, [&](size_t name) {
      size_t p;
      (void)SkipName(m, name, &p);
      if (p != kNoPointer && n < pointers.size()) pointers[n++] = p;
    });
    std::memmove(&m[write], &m[r.start], r.end - r.start);
    for (size_t k = 0; k < n; ++k) {
      if (!FixPointer(m, write + (pointers[k] - r.start), removed)) {
        return StripResult::kCannot;
      }
    }
    write += r.end - r.start;
  }
  if (removed.empty()) return StripResult::kOk;
  // Octets after the records (none from a sane server) move too.
  std::memmove(&m[write], &m[records_end], *len - records_end);
  *len = write + (*len - records_end);
  for (size_t s = 1; s < 4; ++s) {
    wire::StoreBe16(&m[kQdcountOffset + 2 * s], kept.n[s]);
  }
  return StripResult::kOk;
}

// Pins the IN A and AAAA records of the answer section whose owner is in
// the CNAME chain from the question; returns how many.
uint64_t PinChain(std::span<const uint8_t> m, const Name& question,
                  std::string_view qname, PinTable& pins, Instant now) {
  const Counts counts = ReadCounts(m);
  const size_t answers_at = QuestionEnd(m);
  std::array<Name, kMaxChain> chain;
  chain[0] = question;
  size_t chain_len = 1;
  const auto in_chain = [&](const Name& n) {
    return std::find(chain.begin(), chain.begin() + chain_len, n) !=
           chain.begin() + chain_len;
  };
  // Records may come in any order: pass again while the chain grows.
  for (bool grew = true; grew && chain_len < kMaxChain;) {
    grew = false;
    size_t at = answers_at;
    for (size_t i = 0; i < counts.n[1]; ++i) {
      Record r;
      Name owner;
      if (!ReadRecord(m, at, &r, &owner)) return 0;  // checked before
      at = r.end;
      if (r.type != kTypeCname || r.klass != kClassIn || !in_chain(owner)) {
        continue;
      }
      Name target;
      if (ReadName(m.first(r.end), r.rdata, &target, nullptr) == 0) return 0;
      if (in_chain(target) || chain_len == kMaxChain) continue;
      chain[chain_len++] = target;
      grew = true;
    }
  }
  uint64_t pinned = 0;
  size_t at = answers_at;
  for (size_t i = 0; i < counts.n[1]; ++i) {
    Record r;
    Name owner;
    if (!ReadRecord(m, at, &r, &owner)) return pinned;
    at = r.end;
    if (!r.address() || !in_chain(owner)) continue;
    // RFC 2181 8: a TTL with its top bit set is read as zero.
    const uint32_t ttl = r.ttl > 0x7fffffffu ? 0 : std::min(r.ttl, kMaxPinTtl);
    pins.Pin(AddressOf(m, r), qname, absl::Seconds(ttl), now);
    ++pinned;
  }
  return pinned;
}

// A truncated (TC=1) answer that does not parse: its header and question
// only, still TC, so the guest asks again over TCP. 0 if even the
// question does not parse.
size_t EmptyTruncated(std::span<uint8_t> m) {
  if (m.size() < kHeaderLen || wire::LoadBe16(&m[kQdcountOffset]) != 1) {
    return 0;
  }
  const size_t end = ReadName(m, kHeaderLen, nullptr, nullptr);
  if (end == 0 || m.size() - end < 4) return 0;
  for (size_t s = 1; s < 4; ++s) wire::StoreBe16(&m[kQdcountOffset + 2 * s], 0);
  return end + 4;
}

}  // namespace

std::string_view QuestionNameText(std::span<const uint8_t> question,
                                  std::span<char, kNameTextMax> out) {
  size_t at = 0;
  size_t n = 0;
  for (;;) {
    if (at >= question.size() || at >= kMaxName) return {};
    const uint8_t label = question[at];
    if (label > kMaxLabel) return {};
    if (label == 0) break;
    if (question.size() - at - 1 < label || at + 1 + label >= kMaxName) {
      return {};
    }
    if (n != 0) out[n++] = '.';
    for (size_t i = 1; i <= label; ++i) {
      const uint8_t c = AsciiLower(question[at + i]);
      if (c > ' ' && c < 0x7f && c != '.' && c != '\\') {
        out[n++] = static_cast<char>(c);
      } else {
        out[n++] = '\\';
        out[n++] = static_cast<char>('0' + c / 100);
        out[n++] = static_cast<char>('0' + c / 10 % 10);
        out[n++] = static_cast<char>('0' + c % 10);
      }
    }
    at += 1 + label;
  }
  // At most 253 label octets, each at most 4 characters, plus the dots:
  // always inside kNameTextMax.
  if (n == 0) out[n++] = '.';
  return std::string_view(out.data(), n);
}

QueryAction DecideQuery(const Policy& policy, std::string_view qname,
                        DnsPolicyCounters& counters, Verdict* verdict) {
  bool allow = true;
  Reason reason = policy.allowlist() ? Reason::kAllowRule : Reason::kOpen;
  int rule = -1;
  if (policy.egress_none()) {
    allow = false;
    reason = Reason::kEgressNone;
  } else {
    switch (policy.DecideName(qname, &rule)) {
      case Policy::NameVerdict::kAllow:
        reason = Reason::kAllowRule;
        break;
      case Policy::NameVerdict::kDeny:
        allow = false;
        reason = Reason::kDenyRule;
        break;
      case Policy::NameVerdict::kUnlisted:
        rule = -1;
        if (policy.allowlist()) {
          allow = false;
          reason = Reason::kNotAllowed;
        }
        break;
    }
  }
  if (verdict != nullptr) {
    verdict->allow = allow;
    verdict->reason = reason;
    verdict->rule = rule;
    verdict->name.clear();
  }
  if (allow) return QueryAction::kForward;
  ++counters.queries_denied;
  return QueryAction::kNxdomain;
}

size_t WriteNxdomain(std::span<const uint8_t> query, std::span<uint8_t> out) {
  if (query.size() < kHeaderLen ||
      wire::LoadBe16(&query[kQdcountOffset]) != 1) {
    return 0;
  }
  // The question is the first name: nothing precedes it that a pointer
  // could name, so ReadName refuses one.
  const size_t name_end = ReadName(query, kHeaderLen, nullptr, nullptr);
  if (name_end == 0 || query.size() - name_end < 4) return 0;
  const size_t len = name_end + 4;
  if (out.size() < len) return 0;
  std::memmove(out.data(), query.data(), len);  // the id and the question
  out[kFlagsOffset] = kQrBit | (query[kFlagsOffset] & (kOpcodeMask | kRdBit));
  out[kRcodeOffset] = kRaBit | kRcodeNxdomain;
  wire::StoreBe16(&out[kQdcountOffset], 1);
  std::fill_n(&out[kAncountOffset], 6, 0);  // no records
  return len;
}

size_t FilterAnswer(const Policy& policy, PinTable* pins, Instant now,
                    std::string_view qname, std::span<uint8_t> msg, size_t len,
                    DnsPolicyCounters& counters) {
  len = std::min(len, msg.size());
  const bool pin = pins != nullptr && !policy.egress_none() &&
                   policy.DecideName(qname) == Policy::NameVerdict::kAllow;
  // Open mode strips nothing, and (with no allow rule) pins nothing.
  if (!pin && !policy.allowlist()) return len;
  const std::span<uint8_t> m = msg.first(len);
  Name question;
  const size_t records_end = CheckMessage(m, &question);
  if (records_end == 0 || !SameName(qname, question)) {
    if (!pin) return len;
    if (len >= kHeaderLen && (m[kFlagsOffset] & kTcBit)) {
      if (const size_t n = EmptyTruncated(m); n != 0) return n;
    }
    ++counters.answers_malformed;
    return 0;
  }
  size_t out_len = len;
  if (policy.allowlist()) {
    uint64_t stripped = 0;
    if (Strip(policy, m, records_end, &out_len, &stripped) !=
        StripResult::kOk) {
      ++counters.answers_malformed;
      return 0;
    }
    counters.records_stripped += stripped;
  }
  if (pin) {
    std::array<char, kNameTextMax> name;
    const std::string_view pinned_name = QuestionNameText(
        std::span<const uint8_t>(question.bytes.data(), question.len), name);
    const uint64_t n =
        PinChain(m.first(out_len), question, pinned_name, *pins, now);
    if (n != 0) {
      ++counters.answers_pinned;
      counters.addresses_pinned += n;
    }
  }
  return out_len;
}

}  // namespace netstack::policy
