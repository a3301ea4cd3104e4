// Address handles (include/uroce/verbs.h): the headers of one destination,
// built and resolved once (ibv_create_ah), copied into each UD WR that names
// it.
#include <algorithm>
#include <array>
#include <atomic>
#include <mutex>
#include <vector>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <type_traits>
#include <string>

#include "verbs/local.h"

namespace uroce {

using internal::impl_of;

namespace {

// The live address handles of the process, by handle: AddressHandle::of()
// trusts an ibv_ah* only if its handle's slot holds that very pointer, so a
// stale or foreign one is refused without reading past it. Written on the
// control path (create/destroy, under the mutex), read lock-free at post.
constexpr std::uint32_t kMaxAh = 1u << 15;  // ibv_query_device's max_ah
std::array<std::atomic<const ibv_ah*>, kMaxAh> g_live{};
std::mutex g_mutex;
std::vector<std::uint32_t> g_free;
std::uint32_t g_next = 1;  // 0 is never a handle

std::uint32_t take_handle() {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (!g_free.empty()) {
    const std::uint32_t h = g_free.back();
    g_free.pop_back();
    return h;
  }
  return g_next < kMaxAh ? g_next++ : 0;
}

void give_handle(std::uint32_t h) {
  g_live[h].store(nullptr, std::memory_order_release);
  std::lock_guard<std::mutex> lock(g_mutex);
  g_free.push_back(h);
}

}  // namespace

namespace internal {

std::uint32_t take_ah_handle() { return take_handle(); }

std::unique_ptr<AddressHandle> Access::make_ah(std::unique_ptr<AhImpl> impl) {
  return std::unique_ptr<AddressHandle>(new AddressHandle(std::move(impl)));
}

}  // namespace internal

AddressHandle::AddressHandle(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {
  impl_->self = this;
  g_live[impl_->ah.handle].store(&impl_->ah, std::memory_order_release);
}
AddressHandle::~AddressHandle() { give_handle(impl_->ah.handle); }

ibv_ah* AddressHandle::ibv() { return &impl_->ah; }
const ibv_ah_attr& AddressHandle::attr() const { return impl_->attr; }
ProtectionDomain* AddressHandle::pd() const { return impl_->pd; }

AddressHandle* AddressHandle::of(const ibv_ah* ah) {
  static_assert(std::is_standard_layout_v<Impl> && offsetof(Impl, ah) == 0,
                "the Impl starts at its ibv_ah's address");
  if (ah == nullptr || ah->handle == 0 || ah->handle >= kMaxAh) return nullptr;
  if (g_live[ah->handle].load(std::memory_order_acquire) != ah) return nullptr;
  return reinterpret_cast<const Impl*>(ah)->self;
}

AddressHandle* ProtectionDomain::create_ah(const ibv_ah_attr& attr) {
  return impl_of(*ctx_).backend->create_ah(this, attr);
}

int ProtectionDomain::destroy_ah(AddressHandle* ah) { return impl_of(*ctx_).backend->destroy_ah(ah); }

// The in-process bodies.

AddressHandle* internal::LocalBackend::create_ah(ProtectionDomain* pd, const ibv_ah_attr& attr) {
  ContextImpl& c = c_;
  if (!attr.is_global) {
    c.fail(EINVAL, "ibv_create_ah: is_global must be 1: RoCEv2 addresses the peer by its GID (grh.dgid)");
    return nullptr;
  }
  if (attr.port_num != 1) {
    c.fail(EINVAL, "ibv_create_ah: port_num must be 1");
    return nullptr;
  }
  ibv_gid local{};
  if (query_gid(attr.grh.sgid_index, local) != 0) return nullptr;
  if (is_ipv4_gid(local) != is_ipv4_gid(attr.grh.dgid)) {
    c.fail(EINVAL, std::string("ibv_create_ah: GID index ") + std::to_string(attr.grh.sgid_index) +
                       " is not of the destination's family; use 1 for an IPv4 peer, 0 for an IPv6 one");
    return nullptr;
  }
  // Resolved before the control call, the engines running meanwhile; the
  // call only builds the handle.
  std::uint8_t peer_mac[6] = {};
  if (wait_resolved(attr.grh.dgid, peer_mac, "ibv_create_ah") != 0) return nullptr;
  return control([&]() -> AddressHandle* {
    const std::uint32_t handle = take_handle();
    if (handle == 0) {
      c.fail(ENOMEM, "ibv_create_ah: every one of the 32767 address handles is in use; destroy some");
      return nullptr;
    }
    auto impl = std::make_unique<internal::AhImpl>();
    impl->ah.handle = handle;
    impl->pd = pd;
    impl->attr = attr;
    // As sent: a PFC priority fills in DSCP 0 (verbs/traffic_class.h);
    // impl->attr keeps the one asked. A UD QP on any engine may use it, so
    // engine 0 counts it.
    ibv_ah_attr sent = attr;
    sent.grh.traffic_class = sent_traffic_class(attr, 0, "address handle " + std::to_string(handle));
    impl->path = transport::data_path(transport::av_frame_spec(sent, peer_mac, c.port.mac, local, impl->ah.handle),
                                      c.port.dcqcn);
    c.ahs.push_back(internal::Access::make_ah(std::move(impl)));
    return c.ahs.back().get();
  });
}

int internal::LocalBackend::destroy_ah(AddressHandle* ah) {
  return control([&] {
    return erase_owned(c_.ahs, ah) ? 0 : c_.fail(EINVAL, "not an address handle of this context");
  });
}

}  // namespace uroce
