#include "netstack/sandbox/rtnl.h"

#include <arpa/inet.h>
#include <libmnl/libmnl.h>
#include <linux/if_addr.h>
#include <linux/rtnetlink.h>
#include <net/if.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <string>

#include "absl/strings/str_cat.h"
#include "link/fd_util.h"

namespace netstack::sandbox {
namespace {

// Large enough for every request here and for any error reply (which
// quotes the request).
constexpr size_t kBufSize = 8192;

}  // namespace

absl::StatusOr<std::unique_ptr<Rtnl>> Rtnl::Open() {
  mnl_socket* s = mnl_socket_open2(NETLINK_ROUTE, SOCK_CLOEXEC);
  if (s == nullptr) return link::ErrnoStatus(errno, "rtnetlink socket");
  if (mnl_socket_bind(s, 0, MNL_SOCKET_AUTOPID) < 0) {
    const int err = errno;
    mnl_socket_close(s);
    return link::ErrnoStatus(err, "bind rtnetlink socket");
  }
  return std::unique_ptr<Rtnl>(new Rtnl(s, mnl_socket_get_portid(s)));
}

Rtnl::Rtnl(mnl_socket* socket, uint32_t port)
    : socket_(socket),
      port_(port),
      seq_(static_cast<uint32_t>(time(nullptr))),
      buf_(new char[kBufSize]) {}

Rtnl::~Rtnl() { mnl_socket_close(socket_); }

absl::Status Rtnl::Transact(const std::string& what) {
  auto* nlh = reinterpret_cast<nlmsghdr*>(buf_.get());
  const uint32_t seq = nlh->nlmsg_seq;
  if (mnl_socket_sendto(socket_, nlh, nlh->nlmsg_len) < 0) {
    return link::ErrnoStatus(errno, what);
  }
  for (;;) {
    const ssize_t n = mnl_socket_recvfrom(socket_, buf_.get(), kBufSize);
    if (n < 0) return link::ErrnoStatus(errno, what);
    // mnl_cb_run turns an NLMSG_ERROR with a non-zero code into -1/errno
    // and an acknowledgement (code 0) into MNL_CB_STOP.
    const int r = mnl_cb_run(buf_.get(), static_cast<size_t>(n), seq, port_,
                             nullptr, nullptr);
    if (r == MNL_CB_ERROR) return link::ErrnoStatus(errno, what);
    if (r == MNL_CB_STOP) return absl::OkStatus();
  }
}

absl::StatusOr<int> Rtnl::IfIndex(const std::string& name) {
  const unsigned index = if_nametoindex(name.c_str());
  if (index == 0) {
    return absl::NotFoundError(
        absl::StrCat("interface ", name, ": ", std::strerror(errno)));
  }
  return static_cast<int>(index);
}

absl::Status Rtnl::SetUp(int ifindex, const std::string& name, uint32_t mtu,
                         uint32_t tx_queue_len) {
  nlmsghdr* nlh = mnl_nlmsg_put_header(buf_.get());
  nlh->nlmsg_type = RTM_NEWLINK;
  nlh->nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK;
  nlh->nlmsg_seq = ++seq_;
  auto* ifm = static_cast<ifinfomsg*>(
      mnl_nlmsg_put_extra_header(nlh, sizeof(ifinfomsg)));
  ifm->ifi_family = AF_UNSPEC;
  ifm->ifi_index = ifindex;
  ifm->ifi_flags = IFF_UP;
  ifm->ifi_change = IFF_UP;
  if (mtu != 0) mnl_attr_put_u32(nlh, IFLA_MTU, mtu);
  if (tx_queue_len != 0) mnl_attr_put_u32(nlh, IFLA_TXQLEN, tx_queue_len);
  return Transact(absl::StrCat("set ", name, " up",
                               mtu != 0 ? absl::StrCat(" with MTU ", mtu) : "",
                               tx_queue_len != 0
                                   ? absl::StrCat(" and txqueuelen ",
                                                  tx_queue_len)
                                   : ""));
}

absl::Status Rtnl::SetMac(int ifindex, const std::string& name,
                          const wire::MacAddress& mac) {
  nlmsghdr* nlh = mnl_nlmsg_put_header(buf_.get());
  nlh->nlmsg_type = RTM_NEWLINK;
  nlh->nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK;
  nlh->nlmsg_seq = ++seq_;
  auto* ifm = static_cast<ifinfomsg*>(
      mnl_nlmsg_put_extra_header(nlh, sizeof(ifinfomsg)));
  ifm->ifi_family = AF_UNSPEC;
  ifm->ifi_index = ifindex;
  mnl_attr_put(nlh, IFLA_ADDRESS, mac.bytes.size(), mac.bytes.data());
  return Transact(absl::StrCat("set ", name, "'s MAC to ", mac.ToString()));
}

namespace {

nlmsghdr* AddressHeader(char* buf, uint32_t seq, int family, uint8_t prefix,
                        int ifindex, uint32_t flags) {
  nlmsghdr* nlh = mnl_nlmsg_put_header(buf);
  nlh->nlmsg_type = RTM_NEWADDR;
  nlh->nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL;
  nlh->nlmsg_seq = seq;
  auto* ifa = static_cast<ifaddrmsg*>(
      mnl_nlmsg_put_extra_header(nlh, sizeof(ifaddrmsg)));
  ifa->ifa_family = static_cast<uint8_t>(family);
  ifa->ifa_prefixlen = prefix;
  ifa->ifa_flags = static_cast<uint8_t>(flags & 0xff);
  ifa->ifa_scope = RT_SCOPE_UNIVERSE;
  ifa->ifa_index = static_cast<uint32_t>(ifindex);
  if (flags > 0xff) mnl_attr_put_u32(nlh, IFA_FLAGS, flags);
  return nlh;
}

nlmsghdr* RouteHeader(char* buf, uint32_t seq, int family) {
  nlmsghdr* nlh = mnl_nlmsg_put_header(buf);
  nlh->nlmsg_type = RTM_NEWROUTE;
  nlh->nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL;
  nlh->nlmsg_seq = seq;
  auto* rtm =
      static_cast<rtmsg*>(mnl_nlmsg_put_extra_header(nlh, sizeof(rtmsg)));
  rtm->rtm_family = static_cast<uint8_t>(family);
  rtm->rtm_dst_len = 0;  // default
  rtm->rtm_table = RT_TABLE_MAIN;
  rtm->rtm_protocol = RTPROT_STATIC;
  rtm->rtm_scope = RT_SCOPE_UNIVERSE;
  rtm->rtm_type = RTN_UNICAST;
  return nlh;
}

}  // namespace

absl::Status Rtnl::AddAddress(int ifindex, const std::string& name,
                              const stack::Ipv4Cidr& cidr) {
  nlmsghdr* nlh = AddressHeader(buf_.get(), ++seq_, AF_INET, cidr.prefix_len,
                                ifindex, 0);
  mnl_attr_put(nlh, IFA_LOCAL, 4, cidr.address.bytes.data());
  mnl_attr_put(nlh, IFA_ADDRESS, 4, cidr.address.bytes.data());
  return Transact(
      absl::StrCat("add address ", stack::ToString(cidr), " to ", name));
}

absl::Status Rtnl::AddAddress(int ifindex, const std::string& name,
                              const stack::Ipv6Cidr& cidr, bool nodad) {
  nlmsghdr* nlh = AddressHeader(buf_.get(), ++seq_, AF_INET6, cidr.prefix_len,
                                ifindex, nodad ? IFA_F_NODAD : 0);
  mnl_attr_put(nlh, IFA_LOCAL, 16, cidr.address.bytes.data());
  mnl_attr_put(nlh, IFA_ADDRESS, 16, cidr.address.bytes.data());
  return Transact(
      absl::StrCat("add address ", stack::ToString(cidr), " to ", name));
}

absl::Status Rtnl::AddDefaultRoute(int ifindex, const std::string& name,
                                   const wire::Ipv4Address& gateway) {
  nlmsghdr* nlh = RouteHeader(buf_.get(), ++seq_, AF_INET);
  mnl_attr_put(nlh, RTA_GATEWAY, 4, gateway.bytes.data());
  mnl_attr_put_u32(nlh, RTA_OIF, static_cast<uint32_t>(ifindex));
  return Transact(absl::StrCat("add default route via ", gateway.ToString(),
                               " dev ", name));
}

absl::Status Rtnl::AddDefaultRoute(int ifindex, const std::string& name,
                                   const wire::Ipv6Address& gateway) {
  nlmsghdr* nlh = RouteHeader(buf_.get(), ++seq_, AF_INET6);
  mnl_attr_put(nlh, RTA_GATEWAY, 16, gateway.bytes.data());
  mnl_attr_put_u32(nlh, RTA_OIF, static_cast<uint32_t>(ifindex));
  return Transact(absl::StrCat("add default route via ", gateway.ToString(),
                               " dev ", name));
}

absl::Status ConfigureGuestInterface(const GuestInterface& guest) {
  absl::StatusOr<std::unique_ptr<Rtnl>> rtnl = Rtnl::Open();
  if (!rtnl.ok()) return rtnl.status();
  Rtnl& r = **rtnl;
  absl::StatusOr<int> lo = r.IfIndex("lo");
  if (!lo.ok()) return lo.status();
  if (absl::Status s = r.SetUp(*lo, "lo", 0); !s.ok()) return s;
  absl::StatusOr<int> tap = r.IfIndex(guest.name);
  if (!tap.ok()) return tap.status();
  if (guest.mac) {
    if (absl::Status s = r.SetMac(*tap, guest.name, *guest.mac); !s.ok()) {
      return s;
    }
  }
  // The address before the link is up, so that the kernel's first frames
  // (router solicitation, the IPv6 multicast joins) already have it.
  if (absl::Status s = r.AddAddress(*tap, guest.name, guest.addr4); !s.ok()) {
    return s;
  }
  if (guest.ipv6) {
    if (absl::Status s = r.AddAddress(*tap, guest.name, guest.addr6,
                                      /*nodad=*/true);
        !s.ok()) {
      return s;
    }
  }
  if (absl::Status s = r.SetUp(*tap, guest.name, guest.mtu, guest.tx_queue_len);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = r.AddDefaultRoute(*tap, guest.name, guest.gateway4);
      !s.ok()) {
    return s;
  }
  if (!guest.ipv6) return absl::OkStatus();
  return r.AddDefaultRoute(*tap, guest.name, guest.gateway6);
}

}  // namespace netstack::sandbox
