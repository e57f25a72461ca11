#include "link/vhost_user_memory.h"

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace netstack::link::vhost_user {
namespace {

// a + b without wrapping, or false.
bool AddNoWrap(uint64_t a, uint64_t b, uint64_t* out) {
  return !__builtin_add_overflow(a, b, out);
}

}  // namespace

absl::Status GuestMemory::CheckRegion(const MemoryRegion& r) {
  uint64_t end;
  if (r.size == 0) return absl::InvalidArgumentError("region of size 0");
  if (!AddNoWrap(r.guest_addr, r.size, &end) ||
      !AddNoWrap(r.user_addr, r.size, &end) ||
      !AddNoWrap(r.mmap_offset, r.size, &end) ||
      end > static_cast<uint64_t>(SIZE_MAX)) {
    return absl::InvalidArgumentError("region addresses wrap around");
  }
  return absl::OkStatus();
}

absl::Status GuestMemory::Set(std::span<const MemoryRegion> regions,
                              std::span<const int> fds) {
  Clear();
  if (regions.size() > kMaxRegions || regions.size() != fds.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(regions.size(), " regions with ", fds.size(), " fds"));
  }
  for (size_t i = 0; i < regions.size(); ++i) {
    const MemoryRegion& r = regions[i];
    if (absl::Status s = CheckRegion(r); !s.ok()) {
      Clear();
      return s;
    }
    // The mapping must not reach past the file: a read there is SIGBUS.
    struct stat st;
    if (::fstat(fds[i], &st) != 0 ||
        static_cast<uint64_t>(st.st_size) < r.mmap_offset + r.size) {
      Clear();
      return absl::InvalidArgumentError(
          absl::StrCat("region ", i, " reaches past the end of its fd"));
    }
    // mmap wants a page-aligned file offset: map from the page that holds
    // mmap_offset.
    const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
    const uint64_t map_off = r.mmap_offset & ~(page - 1);
    const size_t map_len = static_cast<size_t>(r.mmap_offset - map_off + r.size);
    void* base = ::mmap(nullptr, map_len, PROT_READ | PROT_WRITE, MAP_SHARED,
                        fds[i], static_cast<off_t>(map_off));
    if (base == MAP_FAILED) {
      const int err = errno;
      Clear();
      return absl::InvalidArgumentError(
          absl::StrCat("mmap of region ", i, ": ", std::strerror(err)));
    }
    Region& out = regions_[count_++];
    out.gpa = r.guest_addr;
    out.uva = r.user_addr;
    out.size = r.size;
    out.host = static_cast<uint8_t*>(base) + (r.mmap_offset - map_off);
    out.map_base = base;
    out.map_len = map_len;
  }
  return absl::OkStatus();
}

absl::Status GuestMemory::AddUnowned(const MemoryRegion& region,
                                     uint8_t* host) {
  if (count_ == kMaxRegions) return absl::ResourceExhaustedError("8 regions");
  if (absl::Status s = CheckRegion(region); !s.ok()) return s;
  Region& out = regions_[count_++];
  out = Region{};
  out.gpa = region.guest_addr;
  out.uva = region.user_addr;
  out.size = region.size;
  out.host = host;
  return absl::OkStatus();
}

void GuestMemory::Clear() {
  for (size_t i = 0; i < count_; ++i) {
    if (regions_[i].map_base != nullptr) {
      ::munmap(regions_[i].map_base, regions_[i].map_len);
    }
    regions_[i] = Region{};
  }
  count_ = 0;
}

uint64_t GuestMemory::mapped_bytes() const {
  uint64_t n = 0;
  for (size_t i = 0; i < count_; ++i) n += regions_[i].map_len;
  return n;
}

uint8_t* GuestMemory::Gpa(uint64_t gpa, uint64_t len) const {
  if (len == 0) return nullptr;
  for (size_t i = 0; i < count_; ++i) {
    const Region& r = regions_[i];
    // gpa - r.gpa only when gpa >= r.gpa; then the rest must hold len.
    if (gpa >= r.gpa && gpa - r.gpa < r.size && len <= r.size - (gpa - r.gpa)) {
      return r.host + (gpa - r.gpa);
    }
  }
  return nullptr;
}

uint8_t* GuestMemory::Uva(uint64_t uva, uint64_t len) const {
  if (len == 0) return nullptr;
  for (size_t i = 0; i < count_; ++i) {
    const Region& r = regions_[i];
    if (uva >= r.uva && uva - r.uva < r.size && len <= r.size - (uva - r.uva)) {
      return r.host + (uva - r.uva);
    }
  }
  return nullptr;
}

}  // namespace netstack::link::vhost_user
