#include "netstack/policy/flow_log.h"

// Implemented by the issue #33 work in progress.
