#include "netstack/policy/policy.h"

// Implemented by the issue #33 work in progress.
