// Completion queues and channels: ibv_create_cq(_ex), ibv_req_notify_cq,
// ibv_get_cq_event / ibv_ack_cq_events through a pollable fd, ibv_poll_cq
// and the ibv_start_poll family, on uroce's CompletionQueue.
//
// A channel is a pipe. When an armed CQ gets its completion, the engine's
// thread writes the CQ's id into the pipe (CompletionQueue's event
// callback); ibv_get_cq_event reads one id per event. The fd is readable
// exactly when an event waits, can be made O_NONBLOCK (EAGAIN) and put in
// epoll, as the kernel's channel. Ids, not pointers: an event still in the
// pipe when its CQ is destroyed is skipped, as the kernel drops it.
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <new>

#include "ibverbs/internal.h"

namespace uroce::ibverbs {
namespace {

std::atomic<std::uint64_t> next_cq_id{1};

Channel* channel_of(ibv_comp_channel* c) { return reinterpret_cast<Channel*>(c); }

// CompletionQueue's event callback, on the engine's thread: one record.
void fire(void* arg) {
  const Cq* cq = static_cast<const Cq*>(arg);
  const std::uint64_t id = cq->id;
  // Non-blocking: a pipe full of unread events (64 KiB of them) loses this
  // one rather than stall the engine; the waiter has plenty to read. Under
  // caller progress this runs on an application's thread, inside
  // Context::progress(): a cancellation here would leave the engines held
  // for good, so it waits until the write is done.
  int cancel_state = 0;
  pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cancel_state);
  [[maybe_unused]] const ssize_t n = write(cq->channel->write_fd, &id, sizeof id);
  pthread_setcancelstate(cancel_state, nullptr);
}

// The wc_flags of ibv_create_cq_ex that ibv_wc carries, and the timestamps
// the engine stamps completions with.
constexpr std::uint64_t kStampFlags =
    IBV_WC_EX_WITH_COMPLETION_TIMESTAMP | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK;
constexpr std::uint64_t kSupportedWcFlags = IBV_WC_STANDARD_FLAGS | kStampFlags;

ibv_cq_ex* create(ibv_context* context, const ibv_cq_init_attr_ex& attr) {
  Ctx* x = ctx_of(context);
  if (x == nullptr) return nullptr;
  if (attr.cqe < 1 || attr.cqe > x->ctx->limits().max_cqe) {
    errno = EINVAL;
    return nullptr;
  }
  // As rdma-core's kernel: a vector the context does not have is refused.
  if (attr.comp_vector >= static_cast<std::uint32_t>(context->num_comp_vectors)) {
    errno = EINVAL;
    return nullptr;
  }
  auto* cq = allocate<Cq>();
  if (cq == nullptr) return nullptr;
  cq->ctx = x;
  cq->id = next_cq_id.fetch_add(1);
  cq->channel = channel_of(attr.channel);
  // comp_vector picks no thread: every CQ's events come from its engine's.
  cq->stamped = (attr.wc_flags & kStampFlags) != 0;
  if (cq->stamped) {
    // The wall clock of a stamp: the device's clock (ns) moved by the
    // difference of the two clocks read together now.
    uroce::ClockValues v;
    if (const int e = x->ctx->query_clock(v); e != 0) {
      delete cq;
      errno = e;
      return nullptr;
    }
    cq->wallclock_offset = static_cast<std::int64_t>(v.realtime_ns - v.raw_ns);
  }
  cq->cq = x->ctx->create_cq(uroce::CqAttr{static_cast<int>(attr.cqe), attr.channel != nullptr ? fire : nullptr, cq,
                                           cq->stamped});
  if (cq->cq == nullptr) {
    delete cq;
    errno = EINVAL;
    return nullptr;
  }
  ibv_cq_ex& e = cq->ex;
  e.context = context;
  e.channel = attr.channel;
  e.cq_context = attr.cq_context;
  e.handle = static_cast<std::uint32_t>(cq->id);
  e.cqe = static_cast<int>(attr.cqe);
  pthread_mutex_init(&e.mutex, nullptr);
  pthread_cond_init(&e.cond, nullptr);
  fill_poll_ops(e);
  if (Channel* ch = cq->channel) {
    std::lock_guard<std::mutex> lock(ch->mutex);
    ch->live.emplace_back(cq->id, cq);
    ++ch->ibv.refcnt;
  }
  std::lock_guard<std::mutex> lock(x->mutex);
  x->cqs.push_back(cq);
  return &cq->ex;
}

// Caller progress: before ibv_get_cq_event sleeps, its context's engines
// run here for up to kBusyPoll, until an event waits (they make it): a
// round trip's answer comes sooner than the helper thread would run them.
// The program then sleeps in read(2), and the helper, told so, takes over.
}  // namespace

void busy_poll_events(Channel* ch) {
  constexpr std::uint64_t kBusyPoll = 20'000;  // ns
  if (ch->ibv.context == nullptr) return;
  Ctx* x = ctx_of(ch->ibv.context);
  if (x == nullptr || !caller_progress(x)) return;
  pollfd p{ch->ibv.fd, POLLIN, 0};
  if (poll(&p, 1, 0) > 0) return;  // one waits already
  const std::uint64_t start = monotonic_ns();
  for (std::uint32_t i = 1;; ++i) {
    if (x->ctx->progress() != 0 && poll(&p, 1, 0) > 0) return;
    if (i % 16 == 0 && monotonic_ns() - start > kBusyPoll) {
      x->ctx->hand_to_helper();  // the helper takes over while read(2) sleeps
      return;
    }
  }
}

namespace {

// --- ibv_start_poll and friends: one completion at a time into current ----

int take(ibv_cq_ex* ex) {
  Cq* cq = reinterpret_cast<Cq*>(ex);
  const int n = cq->stamped ? cq->cq->poll(1, &cq->current, &cq->current_ts) : cq->cq->poll(1, &cq->current);
  if (n < 0) return EINVAL;  // overflowed: the CQ is in error
  if (n == 0) return ENOENT;
  ex->status = cq->current.status;
  ex->wr_id = cq->current.wr_id;
  return 0;
}
// The CQ's lock is held from a successful ibv_start_poll to ibv_end_poll,
// as providers do (ibv_poll_cq on the same CQ waits meanwhile); a failed
// start releases it (man ibv_create_cq_ex: no end_poll after a failure).
int start_poll(ibv_cq_ex* ex, ibv_poll_cq_attr* attr) {
  if (attr != nullptr && attr->comp_mask != 0) return EINVAL;
  Cq* cq = reinterpret_cast<Cq*>(ex);
  cq->poll_lock.lock();
  int rc = take(ex);
  // Caller progress (ops.cc's poll_cq): the engines run when nothing waits,
  // their ACKs held for the next poll.
  if (rc == ENOENT && caller_progress(cq->ctx) &&
      cq->ctx->ctx->progress(uroce::Context::ProgressFor::kPolling) != 0) {
    rc = take(ex);
  }
  if (rc != 0) cq->poll_lock.unlock();
  return rc;
}
int next_poll(ibv_cq_ex* ex) { return take(ex); }
void end_poll(ibv_cq_ex* ex) { reinterpret_cast<Cq*>(ex)->poll_lock.unlock(); }
const ibv_wc& cur(ibv_cq_ex* ex) { return reinterpret_cast<Cq*>(ex)->current; }
ibv_wc_opcode read_opcode(ibv_cq_ex* ex) { return cur(ex).opcode; }
std::uint32_t read_vendor_err(ibv_cq_ex* ex) { return cur(ex).vendor_err; }
std::uint32_t read_byte_len(ibv_cq_ex* ex) { return cur(ex).byte_len; }
__be32 read_imm_data(ibv_cq_ex* ex) { return cur(ex).imm_data; }  // also the invalidated rkey
std::uint32_t read_qp_num(ibv_cq_ex* ex) { return cur(ex).qp_num; }
std::uint32_t read_src_qp(ibv_cq_ex* ex) { return cur(ex).src_qp; }
unsigned int read_wc_flags(ibv_cq_ex* ex) { return cur(ex).wc_flags; }
std::uint32_t read_slid(ibv_cq_ex* ex) { return cur(ex).slid; }
std::uint8_t read_sl(ibv_cq_ex* ex) { return cur(ex).sl; }
std::uint8_t read_dlid_path_bits(ibv_cq_ex* ex) { return cur(ex).dlid_path_bits; }
// The device's clock counts ns (hca_core_clock 1 GHz), taken where the
// engine completed the work (through uroced: the daemon's engine).
std::uint64_t read_completion_ts(ibv_cq_ex* ex) { return reinterpret_cast<Cq*>(ex)->current_ts; }
std::uint64_t read_completion_wallclock_ns(ibv_cq_ex* ex) {
  const Cq* cq = reinterpret_cast<Cq*>(ex);
  return cq->current_ts + static_cast<std::uint64_t>(cq->wallclock_offset);
}

}  // namespace

void fill_poll_ops(ibv_cq_ex& e) {
  e.start_poll = start_poll;
  e.next_poll = next_poll;
  e.end_poll = end_poll;
  e.read_opcode = read_opcode;
  e.read_vendor_err = read_vendor_err;
  e.read_byte_len = read_byte_len;
  e.read_imm_data = read_imm_data;
  e.read_qp_num = read_qp_num;
  e.read_src_qp = read_src_qp;
  e.read_wc_flags = read_wc_flags;
  e.read_slid = read_slid;
  e.read_sl = read_sl;
  e.read_dlid_path_bits = read_dlid_path_bits;
  e.read_completion_ts = read_completion_ts;
  e.read_completion_wallclock_ns = read_completion_wallclock_ns;
  // CVLAN, flow tags and tag matching are refused at creation
  // (create_cq_ex_op), so their readers stay NULL.
}

Cq* cq_of(ibv_cq* cq) {
  if (cq == nullptr || ctx_of(cq->context, reinterpret_cast<Cq*>(cq)->born) == nullptr) {
    errno = EINVAL;
    return nullptr;
  }
  return reinterpret_cast<Cq*>(cq);
}

ibv_cq_ex* create_cq_ex_op(ibv_context* context, ibv_cq_init_attr_ex* attr) {
  if (attr == nullptr) {
    errno = EINVAL;
    return nullptr;
  }
  if ((attr->comp_mask & ~static_cast<std::uint32_t>(IBV_CQ_INIT_ATTR_MASK_FLAGS | IBV_CQ_INIT_ATTR_MASK_PD)) != 0) {
    errno = EINVAL;
    return nullptr;
  }
  // A parent domain only (verbs.h: the CQ's buffers come from its
  // allocators; uroce's do not, see domains.cc), held while the CQ lives.
  ibv_pd* parent = nullptr;
  if ((attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_PD) != 0) {
    if (parent_domain_of(attr->parent_domain) == nullptr || attr->parent_domain->context != context) {
      errno = EINVAL;
      return nullptr;
    }
    parent = attr->parent_domain;
  }
  if ((attr->wc_flags & ~kSupportedWcFlags) != 0) {
    errno = unsupported(EOPNOTSUPP, "ibv_create_cq_ex: CVLAN, flow tags and tag matching are not supported "
                                    "(wc_flags beyond IBV_WC_STANDARD_FLAGS and the completion timestamps)");
    return nullptr;
  }
  // IBV_CREATE_CQ_ATTR_SINGLE_THREADED is a hint. IGNORE_OVERRUN is refused:
  // an overrun puts a uroce CQ in error (programs such as UCX then fall back
  // to ibv_create_cq).
  if ((attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) != 0 &&
      (attr->flags & ~static_cast<std::uint32_t>(IBV_CREATE_CQ_ATTR_SINGLE_THREADED)) != 0) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  ibv_cq_ex* made = create(context, *attr);
  if (made != nullptr && parent != nullptr) {
    reinterpret_cast<Cq*>(made)->parent_domain = parent;
    hold_domain(parent);
  }
  return made;
}

}  // namespace uroce::ibverbs

using uroce::ibverbs::allocate;
using uroce::ibverbs::Channel;
using uroce::ibverbs::Cq;
using uroce::ibverbs::cq_of;
using uroce::ibverbs::ctx_of;

extern "C" {

ibv_comp_channel* ibv_create_comp_channel(ibv_context* context) {
  if (ctx_of(context) == nullptr) return nullptr;
  auto* ch = allocate<Channel>();
  if (ch == nullptr) return nullptr;
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    const int e = errno;
    delete ch;
    errno = e;
    return nullptr;
  }
  fcntl(fds[1], F_SETFL, O_NONBLOCK);  // the engine never blocks on it
  ch->ibv.context = context;
  ch->ibv.fd = fds[0];
  ch->ibv.refcnt = 0;
  ch->write_fd = fds[1];
  return &ch->ibv;
}

int ibv_destroy_comp_channel(ibv_comp_channel* channel) {
  if (channel == nullptr) return EINVAL;
  Channel* ch = uroce::ibverbs::channel_of(channel);
  {
    std::lock_guard<std::mutex> lock(ch->mutex);
    if (!ch->live.empty()) return EBUSY;  // CQs still deliver to it
  }
  close(ch->ibv.fd);
  close(ch->write_fd);
  delete ch;
  return 0;
}

ibv_cq* ibv_create_cq(ibv_context* context, int cqe, void* cq_context, ibv_comp_channel* channel, int comp_vector) {
  if (cqe < 1) {
    errno = EINVAL;
    return nullptr;
  }
  ibv_cq_init_attr_ex attr{};
  attr.cqe = static_cast<std::uint32_t>(cqe);
  attr.cq_context = cq_context;
  attr.channel = channel;
  attr.comp_vector = static_cast<std::uint32_t>(comp_vector);
  ibv_cq_ex* ex = uroce::ibverbs::create(context, attr);
  return ex != nullptr ? ibv_cq_ex_to_cq(ex) : nullptr;
}

int ibv_destroy_cq(ibv_cq* ibv_cq) {
  Cq* cq = cq_of(ibv_cq);
  if (cq == nullptr) return EINVAL;
  uroce::ibverbs::Ctx* x = cq->ctx;
  {
    // Under the context's lock, so that the event monitor never sees the
    // CQ between uroce's destroy and its leaving the list. EBUSY while QPs
    // use it; afterwards no engine fires its events.
    std::lock_guard<std::mutex> lock(x->mutex);
    if (const int rc = x->ctx->destroy_cq(cq->cq); rc != 0) return rc;
    std::erase(x->cqs, cq);
    uroce::ibverbs::forget_events(x, ibv_cq);
  }
  if (Channel* ch = cq->channel) {
    // No event of it is handed out from here on.
    std::lock_guard<std::mutex> lock(ch->mutex);
    std::erase_if(ch->live, [cq](const auto& e) { return e.second == cq; });
    --ch->ibv.refcnt;
  }
  // As rdma-core does: wait until every event handed out is acknowledged.
  pthread_mutex_lock(&ibv_cq->mutex);
  while (ibv_cq->comp_events_completed != cq->comp_events.load() ||
         ibv_cq->async_events_completed != cq->async_events.load()) {
    pthread_cond_wait(&ibv_cq->cond, &ibv_cq->mutex);
  }
  pthread_mutex_unlock(&ibv_cq->mutex);
  pthread_cond_destroy(&ibv_cq->cond);
  pthread_mutex_destroy(&ibv_cq->mutex);
  uroce::ibverbs::release_domain(cq->parent_domain);
  delete cq;
  return 0;
}

int ibv_get_cq_event(ibv_comp_channel* channel, ibv_cq** cq_out, void** cq_context) {
  if (channel == nullptr || cq_out == nullptr || cq_context == nullptr) {
    errno = EINVAL;
    return -1;
  }
  Channel* ch = uroce::ibverbs::channel_of(channel);
  uroce::ibverbs::busy_poll_events(ch);
  for (;;) {
    std::uint64_t id = 0;
    const ssize_t n = read(ch->ibv.fd, &id, sizeof id);
    if (n != static_cast<ssize_t>(sizeof id)) {
      if (n >= 0) errno = EIO;
      return -1;  // errno EAGAIN on an O_NONBLOCK fd with no event, EINTR, ...
    }
    std::lock_guard<std::mutex> lock(ch->mutex);
    const auto it = std::find_if(ch->live.begin(), ch->live.end(), [id](const auto& e) { return e.first == id; });
    if (it == ch->live.end()) continue;  // its CQ is gone
    Cq* cq = it->second;
    cq->comp_events.fetch_add(1);
    *cq_out = ibv_cq_ex_to_cq(&cq->ex);
    *cq_context = cq->ex.cq_context;
    return 0;
  }
}

void ibv_ack_cq_events(ibv_cq* cq, unsigned int nevents) {
  if (cq == nullptr) return;
  pthread_mutex_lock(&cq->mutex);
  cq->comp_events_completed += nevents;
  pthread_cond_broadcast(&cq->cond);
  pthread_mutex_unlock(&cq->mutex);
}

// Every completion that waits is kept, in order; fewer entries than wait
// is EINVAL, as rdma-core's providers answer. Under the poll lock: no
// ibv_poll_cq of another thread reads the ring meanwhile.
int ibv_resize_cq(ibv_cq* ibv_cq, int cqe) {
  Cq* cq = cq_of(ibv_cq);
  if (cq == nullptr || cqe < 1) return EINVAL;
  std::lock_guard<uroce::ibverbs::SpinLock> lock(cq->poll_lock);
  if (const int rc = cq->cq->resize(cqe); rc != 0) return rc;
  ibv_cq->cqe = cqe;
  return 0;
}

}  // extern "C"
