// Address handles (include/uroce/verbs.h): the headers of one destination,
// built and resolved once (ibv_create_ah), copied into each UD WR that names
// it.
#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <type_traits>
#include <string>

#include "verbs/verbs_impl.h"

namespace uroce {

using internal::impl_of;

namespace internal {

std::unique_ptr<AddressHandle> Access::make_ah(std::unique_ptr<AhImpl> impl) {
  return std::unique_ptr<AddressHandle>(new AddressHandle(std::move(impl)));
}

}  // namespace internal

AddressHandle::AddressHandle(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) { impl_->self = this; }
AddressHandle::~AddressHandle() { impl_->magic = 0; }

ibv_ah* AddressHandle::ibv() { return &impl_->ah; }
const ibv_ah_attr& AddressHandle::attr() const { return impl_->attr; }
ProtectionDomain* AddressHandle::pd() const { return impl_->pd; }

AddressHandle* AddressHandle::of(const ibv_ah* ah) {
  static_assert(std::is_standard_layout_v<Impl> && offsetof(Impl, ah) == 0,
                "the Impl starts at its ibv_ah's address");
  if (ah == nullptr) return nullptr;
  const auto* impl = reinterpret_cast<const Impl*>(ah);
  return impl->magic == Impl::kMagic ? impl->self : nullptr;
}

AddressHandle* ProtectionDomain::create_ah(const ibv_ah_attr& attr) {
  internal::ContextImpl& c = impl_of(*ctx_);
  if (c.remote) {
    c.fail(EOPNOTSUPP, "address handles (UD) through uroced are not supported yet: run the program in-process");
    return nullptr;
  }
  if (!attr.is_global) {
    c.fail(EINVAL, "ibv_create_ah: is_global must be 1: RoCEv2 addresses the peer by its GID (grh.dgid)");
    return nullptr;
  }
  if (attr.port_num != 1) {
    c.fail(EINVAL, "ibv_create_ah: port_num must be 1");
    return nullptr;
  }
  ibv_gid local{};
  if (c.query_gid(attr.grh.sgid_index, local) != 0) return nullptr;
  if (is_ipv4_gid(local) != is_ipv4_gid(attr.grh.dgid)) {
    c.fail(EINVAL, std::string("ibv_create_ah: GID index ") + std::to_string(attr.grh.sgid_index) +
                       " is not of the destination's family; use 1 for an IPv4 peer, 0 for an IPv6 one");
    return nullptr;
  }
  return c.control([&]() -> AddressHandle* {
    std::uint8_t peer_mac[6] = {};
    if (!c.port.io->resolve(attr.grh.dgid, peer_mac)) {
      c.fail(EHOSTUNREACH, "ibv_create_ah: cannot resolve the peer's GID to an Ethernet address (is it on the link?)");
      return nullptr;
    }
    auto impl = std::make_unique<internal::AhImpl>();
    impl->ah.handle = c.next_ah++;
    impl->pd = this;
    impl->attr = attr;
    impl->path = transport::data_path(transport::av_frame_spec(attr, peer_mac, c.port.mac, local, impl->ah.handle),
                                      c.port.dcqcn);
    c.ahs.push_back(internal::Access::make_ah(std::move(impl)));
    return c.ahs.back().get();
  });
}

int ProtectionDomain::destroy_ah(AddressHandle* ah) {
  internal::ContextImpl& c = impl_of(*ctx_);
  return c.control([&] {
    auto it = std::find_if(c.ahs.begin(), c.ahs.end(), [ah](const auto& a) { return a.get() == ah; });
    if (it == c.ahs.end()) return c.fail(EINVAL, "not an address handle of this context");
    c.ahs.erase(it);
    return 0;
  });
}

}  // namespace uroce
