#include "tools/pcap_inspect/format.h"

#include <variant>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "tools/pcap_inspect/json.h"

namespace netstack::tools {
namespace {

template <class... Ts>
struct Overloaded : Ts... {
  using Ts::operator()...;
};
template <class... Ts>
Overloaded(Ts...) -> Overloaded<Ts...>;

std::string TcpOptionsText(const wire::TcpRepr& t) {
  std::vector<std::string> parts;
  if (t.mss) parts.push_back(absl::StrCat("mss ", *t.mss));
  if (t.sack_permitted) parts.push_back("sackOK");
  if (t.timestamps) {
    parts.push_back(
        absl::StrCat("TS ", t.timestamps->tsval, " ", t.timestamps->tsecr));
  }
  if (t.window_scale) parts.push_back(absl::StrCat("wscale ", *t.window_scale));
  for (size_t i = 0; i < t.sack_count; ++i) {
    parts.push_back(absl::StrCat("sack ", t.sack_blocks[i].left, ":",
                                 t.sack_blocks[i].right));
  }
  if (t.unknown_options) {
    parts.push_back(absl::StrCat("unknown x", t.unknown_options));
  }
  return absl::StrJoin(parts, ",");
}

JsonObject TcpOptionsJson(const wire::TcpRepr& t) {
  JsonObject o;
  if (t.mss) o.Add("mss", uint32_t{*t.mss});
  if (t.window_scale) o.Add("wscale", uint32_t{*t.window_scale});
  if (t.sack_permitted) o.Add("sack_permitted", true);
  if (t.timestamps) {
    o.AddRaw("ts", absl::StrCat("[", t.timestamps->tsval, ",",
                                t.timestamps->tsecr, "]"));
  }
  if (t.sack_count > 0) {
    std::vector<std::string> blocks;
    for (size_t i = 0; i < t.sack_count; ++i) {
      blocks.push_back(absl::StrCat("[", t.sack_blocks[i].left, ",",
                                    t.sack_blocks[i].right, "]"));
    }
    o.AddRaw("sack", absl::StrCat("[", absl::StrJoin(blocks, ","), "]"));
  }
  if (t.unknown_options) o.Add("unknown", uint32_t{t.unknown_options});
  return o;
}

// ICMP type/code and a few type-specific fields.
struct IcmpSummary {
  uint32_t type = 0;
  uint32_t code = 0;
  std::string text;
  JsonObject json;
};

IcmpSummary SummarizeIcmpv4(const wire::Icmpv4Repr& r) {
  IcmpSummary s;
  s.type = r.Type();
  s.code = r.Code();
  std::visit(
      Overloaded{
          [&](const wire::Icmpv4Repr::EchoRequest& e) {
            s.text = absl::StrFormat("echo request id=%u seq=%u", e.ident,
                                     e.seq_no);
            s.json.Add("id", uint32_t{e.ident}).Add("seq", uint32_t{e.seq_no});
          },
          [&](const wire::Icmpv4Repr::EchoReply& e) {
            s.text = absl::StrFormat("echo reply id=%u seq=%u", e.ident,
                                     e.seq_no);
            s.json.Add("id", uint32_t{e.ident}).Add("seq", uint32_t{e.seq_no});
          },
          [&](const wire::Icmpv4Repr::DestUnreachable& d) {
            s.text = absl::StrFormat("unreachable code=%u mtu=%u", s.code,
                                     d.next_hop_mtu);
            s.json.Add("mtu", uint32_t{d.next_hop_mtu});
          },
          [&](const wire::Icmpv4Repr::TimeExceeded&) {
            s.text = absl::StrFormat("time exceeded code=%u", s.code);
          },
          [&](const wire::Icmpv4Repr::Other&) {
            s.text = absl::StrFormat("type=%u code=%u", s.type, s.code);
          },
      },
      r.message);
  return s;
}

IcmpSummary SummarizeIcmpv6(const wire::Icmpv6Repr& r) {
  IcmpSummary s;
  s.type = r.type();
  std::visit(
      Overloaded{
          [&](const wire::Icmpv6EchoRequest& e) {
            s.text = absl::StrFormat("echo request id=%u seq=%u",
                                     e.identifier, e.sequence);
            s.json.Add("id", uint32_t{e.identifier})
                .Add("seq", uint32_t{e.sequence});
          },
          [&](const wire::Icmpv6EchoReply& e) {
            s.text = absl::StrFormat("echo reply id=%u seq=%u", e.identifier,
                                     e.sequence);
            s.json.Add("id", uint32_t{e.identifier})
                .Add("seq", uint32_t{e.sequence});
          },
          [&](const wire::Icmpv6PacketTooBig& p) {
            s.text = absl::StrFormat("packet too big mtu=%u", p.mtu);
            s.json.Add("mtu", uint32_t{p.mtu});
          },
          [&](const wire::Icmpv6DestinationUnreachable& d) {
            s.code = d.code;
            s.text = absl::StrFormat("unreachable code=%u", d.code);
          },
          [&](const wire::Icmpv6TimeExceeded& t) {
            s.code = t.code;
            s.text = absl::StrFormat("time exceeded code=%u", t.code);
          },
          [&](const wire::Icmpv6ParameterProblem& p) {
            s.code = p.code;
            s.text = absl::StrFormat("parameter problem code=%u pointer=%u",
                                     p.code, p.pointer);
          },
          [&](const wire::NdpRouterSolicitation&) {
            s.text = "router solicitation";
          },
          [&](const wire::NdpRouterAdvertisement& a) {
            s.text = absl::StrFormat("router advertisement lifetime=%u",
                                     a.router_lifetime);
            s.json.Add("router_lifetime", uint32_t{a.router_lifetime});
          },
          [&](const wire::NdpNeighborSolicitation& n) {
            s.text = absl::StrCat("neighbor solicitation who-has ",
                                  n.target.ToString());
            s.json.Add("target", n.target.ToString());
          },
          [&](const wire::NdpNeighborAdvertisement& n) {
            s.text = absl::StrCat("neighbor advertisement ",
                                  n.target.ToString(),
                                  n.solicited ? " solicited" : "");
            s.json.Add("target", n.target.ToString())
                .Add("solicited", n.solicited);
          },
          [&](const wire::Icmpv6Other& o) {
            s.code = o.code;
            s.text = absl::StrFormat("type=%u code=%u", o.type, o.code);
          },
      },
      r.message);
  if (s.code != 0) s.json.Add("code", s.code);
  return s;
}

std::string ChecksumText(const std::optional<bool>& valid) {
  if (!valid) return "";
  return *valid ? " csum ok" : " csum BAD";
}

}  // namespace

std::string FormatLine(const FrameMeta& meta, const DecodedFrame& f) {
  std::string line = absl::StrFormat("%u %.6f", meta.number, meta.timestamp);
  if (!f.eth) {
    absl::StrAppend(&line, " len=", meta.wire_len);
  } else if (f.arp) {
    const auto& a = *f.arp;
    absl::StrAppend(
        &line, " ARP ",
        a.operation == wire::ArpOperation::kRequest
            ? absl::StrCat("who-has ", a.target_ip.ToString(), " tell ",
                           a.sender_ip.ToString())
            : absl::StrCat(a.sender_ip.ToString(), " is-at ",
                           a.sender_mac.ToString()));
  } else {
    std::string src, dst, family;
    if (f.ipv4) {
      family = "IPv4";
      src = f.ipv4->src.ToString();
      dst = f.ipv4->dst.ToString();
    } else if (f.ipv6) {
      family = "IPv6";
      src = f.ipv6->src.ToString();
      dst = f.ipv6->dst.ToString();
    }
    if (family.empty()) {
      absl::StrAppendFormat(&line, " %s > %s ethertype 0x%04x",
                            f.eth->src.ToString(), f.eth->dst.ToString(),
                            f.eth->ethertype);
    } else if (f.tcp) {
      const auto& t = *f.tcp;
      absl::StrAppendFormat(
          &line, " %s %s.%u > %s.%u TCP [%s] seq=%u ack=%u win=%u len=%u",
          family, src, t.src_port, dst, t.dst_port, TcpFlagString(t.flags),
          t.seq, t.ack, t.window, f.l4_payload_len);
      const std::string opts = TcpOptionsText(t);
      if (!opts.empty()) absl::StrAppend(&line, " [", opts, "]");
    } else if (f.udp) {
      absl::StrAppendFormat(&line, " %s %s.%u > %s.%u UDP len=%u", family,
                            src, f.udp->src_port, dst, f.udp->dst_port,
                            f.l4_payload_len);
    } else if (f.icmpv4) {
      absl::StrAppend(&line, " ", family, " ", src, " > ", dst, " ICMP ",
                      SummarizeIcmpv4(*f.icmpv4).text);
    } else if (f.icmpv6) {
      absl::StrAppend(&line, " ", family, " ", src, " > ", dst, " ICMPv6 ",
                      SummarizeIcmpv6(*f.icmpv6).text);
    } else {
      absl::StrAppend(&line, " ", family, " ", src, " > ", dst);
      if (f.l4_protocol) absl::StrAppend(&line, " proto ", *f.l4_protocol);
      if (f.non_first_fragment) absl::StrAppend(&line, " (fragment)");
    }
    if (f.ipv4 && !f.ipv4_checksum_valid) absl::StrAppend(&line, " ip-csum BAD");
    absl::StrAppend(&line, ChecksumText(f.l4_checksum_valid));
  }
  if (meta.caplen < meta.wire_len) {
    absl::StrAppend(&line, " (captured ", meta.caplen, " of ", meta.wire_len,
                    ")");
  }
  if (f.error != wire::WireError::kOk) {
    // Debian's Abseil has its own string_view type: convert explicitly.
    absl::StrAppend(&line, " ERROR ", std::string(f.error_layer), ": ",
                    std::string(wire::WireErrorName(f.error)));
  }
  return line;
}

std::string FormatJson(const FrameMeta& meta, const DecodedFrame& f) {
  JsonObject o;
  o.Add("frame", meta.number);
  o.AddRaw("time", absl::StrFormat("%.6f", meta.timestamp));
  o.Add("len", meta.wire_len);
  o.Add("caplen", meta.caplen);
  if (f.eth) {
    JsonObject e;
    e.Add("src", f.eth->src.ToString())
        .Add("dst", f.eth->dst.ToString())
        .Add("type", uint32_t{f.eth->ethertype});
    if (f.eth->vlan) {
      e.Add("vlan", uint32_t{f.eth->vlan->tci & 0x0fffu})
          .Add("pcp", static_cast<uint32_t>(f.eth->vlan->tci >> 13));
    }
    o.Add("eth", e);
  }
  if (f.arp) {
    JsonObject a;
    a.Add("op", uint32_t{static_cast<uint16_t>(f.arp->operation)})
        .Add("sender_mac", f.arp->sender_mac.ToString())
        .Add("sender_ip", f.arp->sender_ip.ToString())
        .Add("target_mac", f.arp->target_mac.ToString())
        .Add("target_ip", f.arp->target_ip.ToString());
    o.Add("arp", a);
  }
  if (f.ipv4) {
    const auto& r = *f.ipv4;
    JsonObject ip;
    ip.Add("version", 4)
        .Add("src", r.src.ToString())
        .Add("dst", r.dst.ToString())
        .Add("proto", uint32_t{r.protocol})
        .Add("ttl", uint32_t{r.ttl})
        .Add("id", uint32_t{r.ident})
        .Add("df", r.dont_fragment)
        .Add("mf", r.more_fragments)
        .Add("frag_offset", uint32_t{r.fragment_offset})
        .Add("options_len", static_cast<uint64_t>(r.options.size()))
        .Add("checksum_valid", f.ipv4_checksum_valid);
    o.Add("ip", ip);
  }
  if (f.ipv6) {
    const auto& r = *f.ipv6;
    JsonObject ip;
    ip.Add("version", 6)
        .Add("src", r.src.ToString())
        .Add("dst", r.dst.ToString())
        .Add("next_header", uint32_t{r.next_header})
        .Add("hop_limit", uint32_t{r.hop_limit})
        .Add("flow_label", uint32_t{r.flow_label});
    if (f.ipv6_ext) {
      ip.Add("proto", uint32_t{f.ipv6_ext->upper_protocol})
          .Add("ext_headers", static_cast<uint64_t>(f.ipv6_ext->header_count));
      if (f.ipv6_ext->fragment) {
        ip.Add("frag_offset", uint32_t{f.ipv6_ext->fragment->header.offset})
            .Add("mf", f.ipv6_ext->fragment->header.more_fragments);
      }
    }
    o.Add("ip", ip);
  }
  if (f.non_first_fragment) o.Add("fragment", true);
  if (f.tcp) {
    const auto& t = *f.tcp;
    JsonObject tcp;
    tcp.Add("src_port", uint32_t{t.src_port})
        .Add("dst_port", uint32_t{t.dst_port})
        .Add("seq", t.seq)
        .Add("ack", t.ack)
        .Add("flags", TcpFlagString(t.flags))
        .Add("flags_raw", uint32_t{t.flags} | (t.ae ? 0x100u : 0u))
        .Add("window", uint32_t{t.window})
        .Add("options", TcpOptionsJson(t))
        .Add("payload_len", static_cast<uint64_t>(f.l4_payload_len));
    if (f.l4_checksum_valid) tcp.Add("checksum_valid", *f.l4_checksum_valid);
    o.Add("tcp", tcp);
  }
  if (f.udp) {
    JsonObject udp;
    udp.Add("src_port", uint32_t{f.udp->src_port})
        .Add("dst_port", uint32_t{f.udp->dst_port})
        .Add("payload_len", static_cast<uint64_t>(f.l4_payload_len));
    if (f.l4_checksum_valid) udp.Add("checksum_valid", *f.l4_checksum_valid);
    o.Add("udp", udp);
  }
  if (f.icmpv4 || f.icmpv6) {
    IcmpSummary s =
        f.icmpv4 ? SummarizeIcmpv4(*f.icmpv4) : SummarizeIcmpv6(*f.icmpv6);
    JsonObject icmp;
    icmp.Add("type", s.type).Add("code", s.code);
    if (!s.json.empty()) icmp.Add("detail", s.json);
    if (f.l4_checksum_valid) icmp.Add("checksum_valid", *f.l4_checksum_valid);
    o.Add(f.icmpv4 ? "icmp" : "icmpv6", icmp);
  }
  if (f.error != wire::WireError::kOk) {
    JsonObject err;
    err.Add("layer", f.error_layer).Add("reason", wire::WireErrorName(f.error));
    o.Add("error", err);
  }
  return o.ToString();
}

}  // namespace netstack::tools
