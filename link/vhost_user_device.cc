#include "link/vhost_user_device.h"

#include <cstring>

namespace netstack::link::vhost_user {
namespace {

uint32_t LoadU32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
uint64_t LoadU64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// vhost-user.rst "vring state description" / "vring address description".
constexpr size_t kU64Size = 8;
constexpr size_t kStateSize = 8;
constexpr size_t kAddrSize = 40;
constexpr size_t kRegionSize = 32;
constexpr uint32_t kVringFlagLog = 1;         // VHOST_VRING_F_LOG
constexpr uint64_t kVringIndexMask = 0xff;    // SET_VRING_KICK/CALL/ERR
constexpr uint64_t kVringNoFd = 0x100;

}  // namespace

const char* RefusalName(Refusal r) {
  switch (r) {
    case Refusal::kBadSize: return "bad_size";
    case Refusal::kBadFds: return "bad_fds";
    case Refusal::kBadIndex: return "bad_index";
    case Refusal::kBadFeatures: return "bad_features";
    case Refusal::kBadMemTable: return "bad_mem_table";
    case Refusal::kBadRing: return "bad_ring";
    case Refusal::kUnsupported: return "unsupported";
    case Refusal::kBadVersion: return "bad_version";
    case Refusal::kNoPolling: return "no_polling";
  }
  return "unknown";
}

size_t Device::vnet_hdr_len() const {
  return Has(feature::kVersion1) || Has(feature::kMrgRxbuf) ? 12 : 10;
}

bool Device::Refuse(Refusal r) {
  ++stats_.refused[static_cast<size_t>(r)];
  return false;
}

void Device::Handle(uint32_t request, uint32_t flags,
                    std::span<const uint8_t> payload, std::span<UniqueFd> fds,
                    Reply* reply) {
  ++stats_.messages;
  *reply = Reply{};
  const bool ok = (flags & 3u) == kVersion
                      ? Dispatch(request, payload, fds, reply)
                      : Refuse(Refusal::kBadVersion);
  for (UniqueFd& fd : fds) fd.reset();  // whatever was not kept
  // REPLY_ACK (vhost-user.rst): a request that has no reply of its own
  // and asked for one gets a u64, 0 for success.
  if (!reply->send && (flags & kFlagNeedReply) != 0 &&
      (protocol_features_ & Bit(protocol_feature::kReplyAck)) != 0) {
    reply->send = true;
    reply->request = request;
    reply->size = kU64Size;
    const uint64_t status = ok ? 0 : 1;
    std::memcpy(reply->payload, &status, sizeof(status));
  }
}

bool Device::Dispatch(uint32_t request, std::span<const uint8_t> p,
                      std::span<UniqueFd> fds, Reply* reply) {
  // Requests that answer: the reply goes out even when the request is
  // refused (zeros), so that a front-end waiting for it is not stuck.
  auto answer_u64 = [&](uint64_t v) {
    reply->send = true;
    reply->request = request;
    reply->size = kU64Size;
    std::memcpy(reply->payload, &v, sizeof(v));
  };
  const bool takes_fds = request == kSetMemTable || request == kSetVringKick ||
                         request == kSetVringCall || request == kSetVringErr;
  if (!takes_fds && !fds.empty()) {
    if (request == kGetFeatures || request == kGetProtocolFeatures ||
        request == kGetQueueNum) {
      answer_u64(0);
    }
    return Refuse(Refusal::kBadFds);
  }
  auto index_ok = [&](uint64_t index) { return index < kQueues; };
  switch (request) {
    case kGetFeatures:
    case kGetProtocolFeatures:
    case kGetQueueNum: {
      if (!p.empty()) {
        answer_u64(0);
        return Refuse(Refusal::kBadSize);
      }
      if (request == kGetFeatures) answer_u64(kOfferedFeatures);
      if (request == kGetProtocolFeatures) answer_u64(kOfferedProtocolFeatures);
      if (request == kGetQueueNum) answer_u64(1);  // queue pairs
      return true;
    }
    case kSetFeatures:
    case kSetProtocolFeatures: {
      if (p.size() != kU64Size) return Refuse(Refusal::kBadSize);
      const uint64_t v = LoadU64(p.data());
      if (request == kSetFeatures) {
        if ((v & ~kOfferedFeatures) != 0) return Refuse(Refusal::kBadFeatures);
        features_ = v;
        // EVENT_IDX and INDIRECT_DESC are read when the rings are set up.
        for (int q = 0; q < kQueues; ++q) {
          Queue& queue = queues_[q];
          if (queue.vq.ready()) queue.base = queue.vq.last_avail();
          queue.vq.Reset();
          (void)SetupRing(q);
        }
      } else {
        if ((v & ~kOfferedProtocolFeatures) != 0) {
          return Refuse(Refusal::kBadFeatures);
        }
        protocol_features_ = v;
      }
      return true;
    }
    case kSetOwner:
      if (!p.empty()) return Refuse(Refusal::kBadSize);
      return true;
    case kResetOwner:
      // Deprecated; vhost-user.rst recommends disabling the rings.
      if (!p.empty()) return Refuse(Refusal::kBadSize);
      for (int q = 0; q < kQueues; ++q) StopRing(q);
      return true;
    case kSetMemTable:
      return SetMemTable(p, fds);
    case kSetVringNum:
    case kSetVringBase:
    case kSetVringEnable: {
      if (p.size() != kStateSize) return Refuse(Refusal::kBadSize);
      const uint32_t index = LoadU32(p.data());
      const uint32_t num = LoadU32(p.data() + 4);
      if (!index_ok(index)) return Refuse(Refusal::kBadIndex);
      Queue& q = queues_[index];
      if (request == kSetVringNum) {
        if (num == 0 || num > kMaxQueueSize || (num & (num - 1)) != 0) {
          return Refuse(Refusal::kBadRing);
        }
        q.addr.size = num;
      } else if (request == kSetVringBase) {
        if (num > 0xffff) return Refuse(Refusal::kBadRing);
        q.base = static_cast<uint16_t>(num);
        q.vq.Reset();  // the next setup starts from the new base
      } else {
        if (num > 1) return Refuse(Refusal::kBadRing);
        q.enabled = num == 1;
        return true;
      }
      return SetupRing(static_cast<int>(index));
    }
    case kSetVringAddr: {
      if (p.size() != kAddrSize) return Refuse(Refusal::kBadSize);
      const uint32_t index = LoadU32(p.data());
      if (!index_ok(index)) return Refuse(Refusal::kBadIndex);
      if ((LoadU32(p.data() + 4) & kVringFlagLog) != 0) {
        return Refuse(Refusal::kUnsupported);  // dirty logging: no LOG_ALL
      }
      Queue& q = queues_[index];
      q.addr.desc_uva = LoadU64(p.data() + 8);
      q.addr.used_uva = LoadU64(p.data() + 16);
      q.addr.avail_uva = LoadU64(p.data() + 24);
      q.have_addr = true;
      if (q.vq.ready()) q.base = q.vq.last_avail();
      q.vq.Reset();
      return SetupRing(static_cast<int>(index));
    }
    case kGetVringBase: {
      reply->send = true;
      reply->request = request;
      reply->size = kStateSize;
      if (p.size() != kStateSize) return Refuse(Refusal::kBadSize);
      const uint32_t index = LoadU32(p.data());
      if (!index_ok(index)) return Refuse(Refusal::kBadIndex);
      Queue& q = queues_[index];
      const uint32_t base = q.vq.ready() ? q.vq.last_avail() : q.base;
      std::memcpy(reply->payload, &index, 4);
      std::memcpy(reply->payload + 4, &base, 4);
      StopRing(static_cast<int>(index));
      return true;
    }
    case kSetVringKick:
    case kSetVringCall:
    case kSetVringErr:
      return SetVringFd(request, p, fds);
    default:
      // SET_LOG_BASE / SET_LOG_FD (no LOG_ALL, no LOG_SHMFD offered) and
      // everything gated on a protocol feature we do not offer.
      return Refuse(Refusal::kUnsupported);
  }
}

bool Device::SetMemTable(std::span<const uint8_t> p, std::span<UniqueFd> fds) {
  if (p.size() < 8) return Refuse(Refusal::kBadSize);
  const uint32_t n = LoadU32(p.data());
  if (n == 0 || n > GuestMemory::kMaxRegions || p.size() != 8 + n * kRegionSize) {
    return Refuse(Refusal::kBadSize);
  }
  if (fds.size() != n) return Refuse(Refusal::kBadFds);
  MemoryRegion regions[GuestMemory::kMaxRegions];
  int raw[GuestMemory::kMaxRegions];
  for (uint32_t i = 0; i < n; ++i) {
    const uint8_t* r = p.data() + 8 + i * kRegionSize;
    regions[i] = MemoryRegion{LoadU64(r), LoadU64(r + 8), LoadU64(r + 16),
                              LoadU64(r + 24)};
    raw[i] = fds[i].get();
  }
  // The rings point into the old mapping: forget them before it goes.
  for (int q = 0; q < kQueues; ++q) {
    if (queues_[q].vq.ready()) queues_[q].base = queues_[q].vq.last_avail();
    queues_[q].vq.Reset();
  }
  const absl::Status s = memory_.Set(std::span(regions, n), std::span(raw, n));
  if (!s.ok()) return Refuse(Refusal::kBadMemTable);
  ++stats_.mem_tables;
  bool ok = true;
  for (int q = 0; q < kQueues; ++q) ok = SetupRing(q) && ok;
  return ok;
}

bool Device::SetVringFd(uint32_t request, std::span<const uint8_t> p,
                        std::span<UniqueFd> fds) {
  if (p.size() != kU64Size) return Refuse(Refusal::kBadSize);
  const uint64_t v = LoadU64(p.data());
  const uint64_t index = v & kVringIndexMask;
  const bool no_fd = (v & kVringNoFd) != 0;
  if ((v & ~(kVringIndexMask | kVringNoFd)) != 0 || index >= kQueues) {
    return Refuse(Refusal::kBadIndex);
  }
  if (fds.size() != (no_fd ? 0u : 1u)) return Refuse(Refusal::kBadFds);
  Queue& q = queues_[index];
  UniqueFd fd = no_fd ? UniqueFd() : std::move(fds[0]);
  if (request == kSetVringKick) {
    if (no_fd) return Refuse(Refusal::kNoPolling);
    q.kick = std::move(fd);
    ++q.kick_gen;
    q.started = true;
    ++stats_.ring_starts;
    // vhost-user.rst: without PROTOCOL_FEATURES a ring starts enabled.
    if (!Has(feature::kProtocolFeatures)) q.enabled = true;
    return SetupRing(static_cast<int>(index));
  }
  if (request == kSetVringCall) {
    q.call = std::move(fd);
  } else {
    q.err = std::move(fd);
  }
  return true;
}

bool Device::SetupRing(int q) {
  Queue& queue = queues_[q];
  if (queue.vq.ready()) return true;
  if (!queue.have_addr || queue.addr.size == 0 ||
      memory_.region_count() == 0) {
    return true;  // not yet: the rest of the set-up is still coming
  }
  const RingSetupError e =
      queue.vq.Setup(memory_, queue.addr, queue.base,
                     Has(feature::kEventIdx), Has(feature::kIndirectDesc));
  if (e != RingSetupError::kOk) return Refuse(Refusal::kBadRing);
  return true;
}

void Device::StopRing(int q) {
  Queue& queue = queues_[q];
  if (queue.vq.ready()) queue.base = queue.vq.last_avail();
  queue.vq.Reset();
  if (queue.started) ++stats_.ring_stops;
  queue.started = false;
  if (queue.kick.valid()) {
    queue.kick.reset();
    ++queue.kick_gen;
  }
}

void Device::Reset() {
  for (int q = 0; q < kQueues; ++q) {
    StopRing(q);
    Queue& queue = queues_[q];
    queue.call.reset();
    queue.err.reset();
    queue.addr = RingAddresses{};
    queue.have_addr = false;
    queue.base = 0;
    queue.enabled = false;
  }
  memory_.Clear();
  features_ = 0;
  protocol_features_ = 0;
}

}  // namespace netstack::link::vhost_user
