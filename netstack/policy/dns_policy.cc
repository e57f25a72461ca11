#include "netstack/policy/dns_policy.h"

// Implemented by the issue #33 work in progress.
