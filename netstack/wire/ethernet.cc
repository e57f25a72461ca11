#include "netstack/wire/ethernet.h"

namespace netstack::wire {

WireError EthernetRepr::Parse(const EthernetFrame& frame, EthernetRepr& out) {
  if (WireError e = frame.Check(); e != WireError::kOk) return e;
  out.dst = frame.Destination();
  out.src = frame.Source();
  out.ethertype = frame.Type();
  out.vlan.reset();
  if (frame.HasVlanTag()) {
    out.vlan = VlanTag{frame.OuterType(), frame.VlanTci()};
  }
  return WireError::kOk;
}

void EthernetRepr::Emit(MutableEthernetFrame frame) const {
  frame.SetDestination(dst);
  frame.SetSource(src);
  uint8_t* type = &frame.bytes()[EthernetFrame::kTypeOffset];
  if (vlan) {
    StoreBe16(type, vlan->tpid);
    StoreBe16(type + 2, vlan->tci);
    type += EthernetFrame::kVlanTagLen;
  }
  StoreBe16(type, ethertype);
}

}  // namespace netstack::wire
