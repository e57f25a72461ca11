// The guest's memory as a vhost-user back-end sees it: the regions of
// VHOST_USER_SET_MEM_TABLE (docs/interop/vhost-user.rst, "Memory regions
// description"), each an fd that QEMU passes with SCM_RIGHTS (a memfd or
// a hugetlbfs file), mapped MAP_SHARED here.
//
// A region is known by three addresses: the guest-physical address that
// descriptors carry, the QEMU user (virtual) address that
// VHOST_USER_SET_VRING_ADDR carries, and the offset of its first byte in
// the fd (mmap_offset). Gpa() and Uva() turn a range [addr, addr + len)
// into a pointer into our mapping, or null when the range does not lie
// wholly inside one region: a range that crosses a region's end is
// refused, even when the next region continues it, so every pointer
// returned is valid for len bytes. Nothing here trusts a region's fields:
// sums that overflow, an offset past the file's end and zero sizes are
// refused when the table is set.
//
// The guest writes this memory concurrently. A caller that validates
// something it read here must validate its own copy.
#ifndef NETSTACK_LINK_VHOST_USER_MEMORY_H_
#define NETSTACK_LINK_VHOST_USER_MEMORY_H_

#include <cstddef>
#include <cstdint>
#include <span>

#include "absl/status/status.h"

namespace netstack::link::vhost_user {

// One entry of VHOST_USER_SET_MEM_TABLE, as QEMU sends it.
struct MemoryRegion {
  uint64_t guest_addr = 0;
  uint64_t size = 0;
  uint64_t user_addr = 0;
  uint64_t mmap_offset = 0;
};

class GuestMemory {
 public:
  // VHOST_USER_MEMORY_MAX_NREGIONS.
  static constexpr size_t kMaxRegions = 8;

  GuestMemory() = default;
  GuestMemory(const GuestMemory&) = delete;
  GuestMemory& operator=(const GuestMemory&) = delete;
  ~GuestMemory() { Clear(); }

  // Replaces the table: maps regions[i] from fds[i] (the fds are not
  // kept; the caller closes them). On error the old table is gone too and
  // nothing is mapped: a front-end that sent a bad table gets no memory.
  absl::Status Set(std::span<const MemoryRegion> regions,
                   std::span<const int> fds);
  // A region backed by memory the caller owns and keeps alive (tests,
  // the fuzzer). Not unmapped by Clear().
  absl::Status AddUnowned(const MemoryRegion& region, uint8_t* host);
  // Unmaps everything.
  void Clear();

  // [gpa, gpa + len) inside one region, or null. len 0 is refused.
  uint8_t* Gpa(uint64_t gpa, uint64_t len) const;
  // The same for a QEMU user address.
  uint8_t* Uva(uint64_t uva, uint64_t len) const;

  size_t region_count() const { return count_; }
  // Bytes mapped by Set() (what a reconnect must give back).
  uint64_t mapped_bytes() const;

 private:
  struct Region {
    uint64_t gpa = 0;
    uint64_t uva = 0;
    uint64_t size = 0;
    uint8_t* host = nullptr;      // first byte of the region
    void* map_base = nullptr;     // what mmap returned; null if unowned
    size_t map_len = 0;
  };
  static absl::Status CheckRegion(const MemoryRegion& r);

  Region regions_[kMaxRegions];
  size_t count_ = 0;
};

}  // namespace netstack::link::vhost_user

#endif  // NETSTACK_LINK_VHOST_USER_MEMORY_H_
