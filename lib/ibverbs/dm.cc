// Device memory (ibv_alloc_dm, ibv_free_dm, ibv_memcpy_to_dm and _from_dm,
// ibv_reg_dm_mr): the verbs_context ops on uroce's DeviceMemory, which is
// memory the engines reach on their own (a buffer of the device in
// process, a memory file of uroced's through the service). Verbs' rules:
// regions on it are zero-based and must say IBV_ACCESS_ZERO_BASED
// (rdma-core's ibv_cmd_reg_dm_mr refuses them otherwise, EINVAL), and their
// ibv_mr.addr is NULL.
#include <cerrno>
#include <cstdint>

#include "ibverbs/internal.h"

namespace uroce::ibverbs {
namespace {

struct Dm {
  ibv_dm ibv;
  uroce::DeviceMemory* dm = nullptr;
  Born born;
};

// The largest alignment asked of its start (log2): device memory begins on
// a page.
constexpr std::uint32_t kMaxLogAlign = 12;
// What a region of device memory may allow: no memory-window binding, no
// on-demand paging (it is never paged), no hints of the program's pages.
constexpr unsigned kDmAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                               IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_ZERO_BASED;

int memcpy_to_dm(ibv_dm* ibv_dm, std::uint64_t offset, const void* host, std::size_t length) {
  return reinterpret_cast<Dm*>(ibv_dm)->dm->copy_to(offset, host, length);
}

int memcpy_from_dm(void* host, ibv_dm* ibv_dm, std::uint64_t offset, std::size_t length) {
  return reinterpret_cast<Dm*>(ibv_dm)->dm->copy_from(host, offset, length);
}

}  // namespace

ibv_dm* alloc_dm_op(ibv_context* context, ibv_alloc_dm_attr* attr) {
  Ctx* x = ctx_of(context);
  if (x == nullptr) return nullptr;
  if (attr == nullptr || attr->comp_mask != 0 || attr->log_align_req > kMaxLogAlign) {
    errno = EINVAL;
    return nullptr;
  }
  auto* d = allocate<Dm>();
  if (d == nullptr) return nullptr;
  d->dm = x->ctx->alloc_dm(attr->length);
  if (d->dm == nullptr) {
    // zero length (EINVAL); past max_dm_size, or no memory (ENOMEM)
    errno = attr->length == 0 ? EINVAL : ENOMEM;
    delete d;
    return nullptr;
  }
  d->ibv.context = context;
  d->ibv.memcpy_to_dm = memcpy_to_dm;
  d->ibv.memcpy_from_dm = memcpy_from_dm;
  return &d->ibv;
}

int free_dm_op(ibv_dm* ibv_dm) {
  if (ibv_dm == nullptr || ctx_of(ibv_dm->context, reinterpret_cast<Dm*>(ibv_dm)->born) == nullptr) return EINVAL;
  auto* d = reinterpret_cast<Dm*>(ibv_dm);
  // EBUSY while regions are registered on it.
  if (const int rc = ctx_of(ibv_dm->context)->ctx->free_dm(d->dm); rc != 0) return rc;
  delete d;
  return 0;
}

ibv_mr* reg_dm_mr_op(ibv_pd* ibv_pd, ibv_dm* ibv_dm, std::uint64_t offset, std::size_t length, unsigned access) {
  if (ibv_pd == nullptr || ibv_dm == nullptr || ctx_of(ibv_pd->context, reinterpret_cast<Pd*>(ibv_pd)->born) == nullptr ||
      ibv_dm->context != ibv_pd->context || ctx_of(ibv_dm->context, reinterpret_cast<Dm*>(ibv_dm)->born) == nullptr) {
    errno = EINVAL;
    return nullptr;
  }
  access &= ~static_cast<unsigned>(IBV_ACCESS_OPTIONAL_RANGE);
  if ((access & IBV_ACCESS_ZERO_BASED) == 0 || (access & ~kDmAccess) != 0) {
    errno = EINVAL;
    return nullptr;
  }
  auto* m = allocate<Mr>();
  if (m == nullptr) return nullptr;
  auto* pd = reinterpret_cast<Pd*>(ibv_pd);
  m->mr = pd->pd->reg_dm_mr(reinterpret_cast<Dm*>(ibv_dm)->dm, offset, length,
                            static_cast<int>(access & ~IBV_ACCESS_ZERO_BASED));
  return finish_mr(m, ibv_pd, nullptr, length);  // zero-based: no address of the program's
}

}  // namespace uroce::ibverbs
