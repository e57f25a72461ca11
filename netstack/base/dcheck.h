// DCHECK for internal invariants only: never for anything a peer controls
// (a malformed packet is a drop reason, not an assertion). Compiled out
// when NDEBUG is defined.
#ifndef NETSTACK_BASE_DCHECK_H_
#define NETSTACK_BASE_DCHECK_H_

#include <cstdio>
#include <cstdlib>

#ifdef NDEBUG
#define NETSTACK_DCHECK(cond) \
  do {                        \
    if (false && (cond)) {    \
    }                         \
  } while (0)
#else
#define NETSTACK_DCHECK(cond)                                          \
  do {                                                                 \
    if (!(cond)) {                                                     \
      std::fprintf(stderr, "%s:%d: DCHECK failed: %s\n", __FILE__,     \
                   __LINE__, #cond);                                   \
      std::abort();                                                    \
    }                                                                  \
  } while (0)
#endif

#endif  // NETSTACK_BASE_DCHECK_H_
