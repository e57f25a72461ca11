// Configuring a guest's interface over rtnetlink (libmnl), from C++: the
// sandbox runner brings up `lo` and the TAP, gives the TAP the address plan
// and adds the default routes, without shelling out to `ip`.
//
// A NETLINK_ROUTE socket acts on the network namespace it was created in,
// so Rtnl::Open runs where the interface lives (inside
// link::RunInNetnsFd); the calls after it may run on any thread.
//
// Every request asks for an acknowledgement, and an error names what was
// asked: InvalidArgument/AlreadyExists/... from the kernel's errno, e.g.
// "add address 10.0.2.100/24 to tap0: File exists".
#ifndef NETSTACK_NETSTACK_SANDBOX_RTNL_H_
#define NETSTACK_NETSTACK_SANDBOX_RTNL_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "netstack/stack/route_table.h"
#include "netstack/wire/address.h"

struct mnl_socket;

namespace netstack::sandbox {

class Rtnl {
 public:
  // A socket in the calling thread's network namespace.
  static absl::StatusOr<std::unique_ptr<Rtnl>> Open();
  ~Rtnl();
  Rtnl(const Rtnl&) = delete;
  Rtnl& operator=(const Rtnl&) = delete;

  // NotFound when there is no such interface.
  absl::StatusOr<int> IfIndex(const std::string& name);
  // Sets the MTU and the transmit queue length (0: leaves each) and
  // brings the link up. (Netlink, not SIOCSIFTXQLEN: that ioctl wants
  // CAP_NET_ADMIN in the initial user namespace on this kernel.)
  absl::Status SetUp(int ifindex, const std::string& name, uint32_t mtu,
                     uint32_t tx_queue_len = 0);
  absl::Status SetMac(int ifindex, const std::string& name,
                      const wire::MacAddress& mac);
  // `nodad`: usable at once (IFA_F_NODAD), with no duplicate address
  // detection delay; the guest's link has nobody else on it.
  absl::Status AddAddress(int ifindex, const std::string& name,
                          const stack::Ipv4Cidr& cidr);
  absl::Status AddAddress(int ifindex, const std::string& name,
                          const stack::Ipv6Cidr& cidr, bool nodad);
  absl::Status AddDefaultRoute(int ifindex, const std::string& name,
                               const wire::Ipv4Address& gateway);
  absl::Status AddDefaultRoute(int ifindex, const std::string& name,
                               const wire::Ipv6Address& gateway);

 private:
  explicit Rtnl(mnl_socket* socket, uint32_t port);
  // Sends the message in buf_ and waits for its acknowledgement.
  absl::Status Transact(const std::string& what);

  mnl_socket* socket_;
  uint32_t port_;
  uint32_t seq_ = 1;
  std::unique_ptr<char[]> buf_;
};

// What the sandbox gives the guest's interface.
struct GuestInterface {
  std::string name = "tap0";
  uint32_t mtu = 65520;
  uint32_t tx_queue_len = 0;  // 0: the kernel's default (1000)
  stack::Ipv4Cidr addr4;
  wire::Ipv4Address gateway4;
  // Off: no IPv6 address or route here; the guest takes them by SLAAC
  // from the backend's RAs, as slirp4netns's -c leaves it.
  bool ipv6 = true;
  stack::Ipv6Cidr addr6;
  wire::Ipv6Address gateway6;
  // The interface's MAC (slirp4netns's --macaddress); none: the kernel's.
  std::optional<wire::MacAddress> mac;
};

// In the calling thread's namespace: `lo` up, then `guest.name` up with
// its MTU, addresses and default routes. Errors name the step.
absl::Status ConfigureGuestInterface(const GuestInterface& guest);

}  // namespace netstack::sandbox

#endif  // NETSTACK_NETSTACK_SANDBOX_RTNL_H_
