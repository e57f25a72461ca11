#include "netstack/stack/counters.h"

#include "absl/strings/str_cat.h"

namespace netstack::stack {

std::string_view DropReasonName(DropReason r) {
  switch (r) {
#define NETSTACK_CASE(e, name) \
  case DropReason::e:          \
    return name;
    NETSTACK_DROP_REASONS(NETSTACK_CASE)
#undef NETSTACK_CASE
    case DropReason::kCount:
      break;
  }
  return "unknown";
}

uint64_t StackCounters::TotalDrops() const {
  uint64_t total = 0;
  for (uint64_t d : drops) total += d;
  return total;
}

uint64_t StackCounters::RxDrops() const {
  uint64_t total = 0;
  for (size_t i = 0; i < kFirstTxDropReason; ++i) total += drops[i];
  return total;
}

std::string StackCounters::Format() const {
  std::string out;
#define NETSTACK_LINE(f, name) \
  if (f != 0) absl::StrAppend(&out, name, " ", f, "\n");
  NETSTACK_EVENT_COUNTERS(NETSTACK_LINE)
#undef NETSTACK_LINE
  for (size_t i = 0; i < kDropReasonCount; ++i) {
    if (drops[i] != 0) {
      absl::StrAppend(&out, "drop.",
                      std::string(DropReasonName(static_cast<DropReason>(i))),
                      " ", drops[i], "\n");
    }
  }
  return out;
}

}  // namespace netstack::stack
