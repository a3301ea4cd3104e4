// What the files of lib/ibverbs share: the device and context objects that
// stock binaries see through rdma-core's <infiniband/verbs.h>, and the
// process-wide state (EAL, the one uroce device). Not installed.
#pragma once

#include <time.h>

#include <infiniband/verbs.h>

#include <array>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <new>
#include <string>
#include <string_view>
#include <vector>

#include <atomic>
#include <condition_variable>
#include <mutex>

#include "uroce/verbs.h"

namespace uroce::device {
struct Device;
}  // namespace uroce::device

namespace uroce::ibverbs {

// The device's name in ibv_get_device_list, ibv_devinfo and telemetry.
inline constexpr const char* kDeviceName = "uroce0";
// Port 1 only; its GID table: 0 fe80:: from the MAC, 1 ::ffff:a.b.c.d.
inline constexpr int kGidTableLen = 2;
// Says on stderr that GID `index` (of `verb`) is not in that table, naming
// the two entries there are; returns EINVAL.
int bad_gid_index(const char* verb, int index);

// ibv_device_attr.vendor_id: an IEEE organization id (OUI) no vendor has.
// The first octet 0x02 has the locally-administered bit set, in the
// quadrant IEEE never assigns (802c's AAI, not a CID), and the value is
// beyond 16 bits, so no PCI vendor id either (some providers report one,
// Intel's 0x8086). Not 0: rdma-core's tests require non-zero; not
// Soft-RoCE's 0xFFFFFF: software keyed on it would take uroce for rxe.
// perftest (ib_dev_name, MLNX_VENDOR_ID) keys its quirks on 0x02c9, 0x1425,
// 0x8086, 0x209b, 0x1f67, 0x1f0f and 0x1dd8, then on vendor_part_id alone,
// whose 0 is in none of its tables: no quirk applies.
inline constexpr std::uint32_t kVendorId = 0x020000;

// The shape of rdma-core's struct verbs_device (driver.h, not installed):
// ibv_device, then the provider's ops pointer at +664, which libmlx5's
// mlx5dv_is_supported() compares with its own table. Ours points to a
// private byte, so no vendor library takes the device for its own.
struct Device {
  ibv_device ibv;
  const void* provider_ops;
  device::Device* port;        // the uroce device on its DPDK port (never freed: see device.cc); nullptr attached
  Context* ctx;              // port's, or one attached to uroced (UROCE_SERVICE)
  __be64 guid;               // EUI-64 of the MAC, network order
  ibv_mtu active_mtu;        // largest path MTU the port carries
};
static_assert(sizeof(ibv_device) == 664, "rdma-core v44 layout");
static_assert(offsetof(Device, provider_ops) == 664, "verbs_device::ops sits right after ibv_device");

// Our device behind an ibv_device or an ibv_context; nullptr (errno ENODEV)
// for one that is not ours.
Device* device_of(ibv_device* dev);
Device* device_of(ibv_context* ctx);
// True in a forked child of a process whose device was in-process: it has
// no device (its parent owns the port), and every call on the inherited
// one fails with ENODEV after one line on stderr (device.cc).
bool in_forked_child_of_in_process();

// verbs_context.query_port: length-tolerant (the caller's struct size).
int query_port_op(ibv_context* context, std::uint8_t port_num, ibv_port_attr* attr, std::size_t attr_len);

// The configuration from the environment (config.cc).
struct Config {
  std::vector<std::string> eal;  // program name first, then UROCE_EAL split at blanks
  std::array<std::uint8_t, 4> ip{};
  std::uint16_t port_id = 0;
  std::uint16_t queues = 1;       // port queues, one engine and worker each
  std::vector<int> workers;       // one CPU per queue; -1 not pinned
  std::string cc = "off";         // dcqcn | delay | off: UROCE_CC, or what the files below imply
  std::string dcqcn_file;         // DCQCN's parameters; "" conf/dcqcn.conf's defaults
  std::string delay_file;         // the delay controller's; "" conf/delay.conf's defaults
  int pfc_priority = -1;          // the lossless 802.1p priority; -1 none
  std::uint8_t min_ack_timeout = 0;  // a floor under every QP's local ACK timeout; 0 none
  std::string metrics;            // UROCE_METRICS: Prometheus /metrics on ADDR:PORT; "" off
  bool caller_progress = false;   // UROCE_PROGRESS=caller (uroce::Context::Progress::kCaller)
};
enum class ConfigStatus { kOk, kUnset, kInvalid };
// Reads UROCE_EAL, UROCE_IP (a.b.c.d or a.b.c.d/len), UROCE_PORT_ID
// (default 0), UROCE_QUEUES (default 1), UROCE_WORKERS (CPU list like
// "2,3"; default: unpinned), UROCE_CC (dcqcn, delay or off), UROCE_DCQCN
// (a conf/dcqcn.conf file; alone it means UROCE_CC=dcqcn), UROCE_DELAY (a
// conf/delay.conf file; alone, UROCE_CC=delay) and
// UROCE_PFC (the lossless priority, 0-7 or off) and UROCE_MIN_ACK_TIMEOUT
// (a floor under every QP's local ACK timeout, 0-31) and UROCE_METRICS
// (ADDR:PORT for Prometheus's /metrics, or off) and UROCE_PROGRESS (workers
// or caller) through `env` (std::getenv). kUnset when UROCE_EAL and UROCE_IP are both
// unset; kInvalid with a one-line `message` when one is missing or
// malformed.
ConfigStatus read_config(const char* (*env)(const char*), Config& config, std::string& message);

// --- the verbs objects: each public struct at offset 0, as binaries read
// their fields directly (research note §2.3 item 5) ---------------------

struct Qp;
struct Cq;
struct Srq;

// Set in a forked child (it never runs the parent's engines, whatever
// objects it inherited).
inline bool g_forked_child = false;

// What makes ibv_post_send, ibv_post_recv and ibv_poll_cq safe from several
// threads at once, as verbs promises: uroce's queues have one producer (or
// consumer) each. Uncontended, one atomic exchange.
class SpinLock {
 public:
  void lock() {
    while (flag_.test_and_set(std::memory_order_acquire)) {
      while (flag_.test(std::memory_order_relaxed)) {
      }
    }
  }
  void unlock() { flag_.clear(std::memory_order_release); }

 private:
  std::atomic_flag flag_;
};

// An opened device. The verbs_context comes first: ibv_context sits at its
// end, where the inline verbs look for it.
struct Ctx {
  verbs_context vctx;
  Device* dev = nullptr;
  uroce::Context* ctx = nullptr;  // the device's (shared by every open)
  // UROCE_PROGRESS=caller in process: ibv_poll_cq, ibv_post_send, ... call
  // ctx->progress() (ops.cc).
  bool caller_progress = false;
  int async_write = -1;           // the write end behind context.async_fd
  std::mutex mutex;               // guards qps and cqs (the event monitor reads them)
  std::vector<Qp*> qps;
  std::vector<Cq*> cqs;
  std::vector<Srq*> srqs;
  std::deque<ibv_async_event> events;  // not yet read by ibv_get_async_event
};
// nullptr (errno ENODEV) for a context that is not ours. In a forked child
// served by uroced or by its parent (device.cc, forget_parent), a context
// inherited from the parent is this process's from its first use here on
// (adopt_inherited): it now stands on this process's own attached device,
// so new objects can be made on it; the parent's objects on it stay the
// parent's (Born).
Ctx* ctx_of(ibv_context* c);
// Whether the verbs calls on `c`'s objects run its engines (Ctx::caller_progress).
inline bool caller_progress(const Ctx* c) { return c->caller_progress && !g_forked_child; }
// CLOCK_MONOTONIC in ns (the caller progress loops' deadlines).
inline std::uint64_t monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<std::uint64_t>(ts.tv_nsec);
}
struct Channel;
// ibv_get_cq_event's wait in caller progress (cq.cc).
void busy_poll_events(Channel* ch);

// Which process made a verbs object: each forked child counts one more than
// its parent (device.cc). A child may make objects on a context it
// inherited, but the parent's objects are not its own: their handles are
// the parent's (its engines, or its connection to uroced).
std::uint32_t process_generation();
struct Born {
  std::uint32_t generation = process_generation();
};
// ctx_of(c) for an object born in this process; for one made before a fork
// (its parent's), nullptr with errno ENODEV.
Ctx* ctx_of(ibv_context* c, const Born& object);

struct Td;
struct Pd {
  ibv_pd ibv;
  uroce::ProtectionDomain* pd;
  // A parent domain (ibv_alloc_parent_domain, domains.cc) stands on
  // `protection`, whose uroce PD `pd` is, and counts in `users` the QPs,
  // SRQs, CQs and MRs made on it; a protection domain counts its parents.
  Pd* protection = nullptr;
  Td* td = nullptr;
  std::atomic<std::uint32_t> users{0};
  std::atomic<std::uint32_t> parents{0};
  void* pd_context = nullptr;
  Born born;
};
// A thread domain (ibv_alloc_td): held by the parent domains that name it.
struct Td {
  ibv_td ibv;
  std::atomic<std::uint32_t> parents{0};
  Born born;
};
// An object made on `pd` (held) or destroyed (released): counted when it
// is a parent domain, nothing otherwise.
void hold_domain(ibv_pd* pd);
void release_domain(ibv_pd* pd);
// ibv_dealloc_pd of a parent domain: EBUSY while objects made on it live.
int dealloc_parent_domain(Pd* pd);
// The parent domain behind `pd` (ibv_create_cq_ex's parent_domain); nullptr,
// errno EINVAL, for a plain PD or none of ours.
Pd* parent_domain_of(ibv_pd* pd);
struct Mr {
  ibv_mr ibv;
  uroce::MemoryRegion* mr;
  Born born;
};
// The ibv_mr of `m` once its region is made (`addr` as the program is to
// see it), the PD held; or, with no region, `m` freed, errno from the
// context's last error (ENOMEM out of keys or over uroced's budget, else
// EINVAL) and nullptr. memory.cc.
ibv_mr* finish_mr(Mr* m, ibv_pd* pd, void* addr, std::size_t length);
// A memory window (mw.cc): ibv.rkey follows the window's (type 1 binds).
struct Mw {
  ibv_mw ibv;
  uroce::MemoryWindow* mw;
  Born born;
};

// A completion channel: a pipe carrying one CQ id per event, as the kernel's
// channel carries one record per event (pollable, O_NONBLOCK-able, EAGAIN).
struct Channel {
  ibv_comp_channel ibv;
  int write_fd = -1;
  std::mutex mutex;                  // guards live
  std::vector<std::pair<std::uint64_t, Cq*>> live;  // the CQs on it, by id
};

// Every CQ is an ibv_cq_ex (ibv_cq_ex_to_cq is a cast, and UCX polls the
// result with ibv_poll_cq).
struct Cq {
  ibv_cq_ex ex;
  uroce::CompletionQueue* cq = nullptr;
  Ctx* ctx = nullptr;
  Channel* channel = nullptr;
  std::uint64_t id = 0;              // what its events carry through the channel
  ibv_pd* parent_domain = nullptr;   // ibv_create_cq_ex's, held while the CQ lives
  std::atomic<std::uint32_t> comp_events{0};   // delivered by ibv_get_cq_event
  std::atomic<std::uint32_t> async_events{0};  // delivered by ibv_get_async_event
  bool overflow_reported = false;    // the event monitor's
  SpinLock poll_lock;
  std::uint32_t empty_polls = 0;     // ibv_poll_cq calls in a row that found nothing
  // Caller progress (ops.cc's linger): how many more completing polls go
  // without a linger, and how many the next miss skips. Under poll_lock.
  std::uint32_t linger_off = 0;
  std::uint32_t linger_backoff = 0;
  // Context::requests_received() when a poll last returned completions.
  std::uint64_t requests_seen = 0;
  // ibv_start_poll / ibv_next_poll: the completion being read.
  ibv_wc current{};
  // Completion timestamps (IBV_WC_EX_WITH_COMPLETION_TIMESTAMP[_WALLCLOCK]):
  // the current completion's, in ns of the device's clock, and what turns
  // that clock into CLOCK_REALTIME (read once, at creation).
  bool stamped = false;
  std::uint64_t current_ts = 0;
  std::int64_t wallclock_offset = 0;
  Born born;
};
Cq* cq_of(ibv_cq* cq);

// Every QP is an ibv_qp_ex (ibv_qp_to_qp_ex returns it when it was made with
// send_ops_flags); the ibv_wr_* calls gather work requests here until
// ibv_wr_complete posts them.
struct Xrcd;
struct Qp {
  ibv_qp_ex ex;
  uroce::QueuePair* qp = nullptr;
  Ctx* ctx = nullptr;
  // An XRC target QP (no PD, no CQs: ibv_qp's are NULL): its domain, and
  // the handles ibv_create_qp_ex and ibv_open_qp gave out, each destroyed
  // by ibv_destroy_qp; the QP goes with the last.
  Xrcd* xrcd = nullptr;
  std::uint32_t opens = 1;
  bool new_post_api = false;
  SpinLock send_lock;
  SpinLock recv_lock;
  std::atomic<std::uint32_t> async_events{0};
  // The event monitor's view: the state the application asked for last,
  // and whether communication-established was reported.
  std::atomic<int> requested_state{IBV_QPS_RESET};
  bool fatal_reported = false;
  bool established_reported = false;
  bool last_wqe_reported = false;  // IBV_EVENT_QP_LAST_WQE_REACHED (a QP on an SRQ)
  // The QP's counters when it last entered RESET: what came after counts.
  std::uint64_t rx_base = 0, nak_access_base = 0, nak_invalid_base = 0;
  // Between ibv_wr_start and ibv_wr_complete.
  struct Pending {
    ibv_send_wr wr;
    std::size_t first_sge, sges;
    std::size_t inline_at, inline_len;  // inline bytes in `bytes`
  };
  std::vector<Pending> pending;
  std::vector<ibv_sge> sges;
  std::vector<std::uint8_t> bytes;
  // ECE (ece.cc): once ibv_set_ece was called (by the program, or by
  // librdmacm with the peer's answer), the options it recorded; they decide
  // the QP's transport options when it moves to RTR.
  std::uint32_t ece_options = 0;
  bool ece_set = false;
  std::vector<ibv_send_wr> chain;
  int pending_error = 0;
  Born born;
};
Qp* qp_of(ibv_qp* qp);
// Told by ibv_destroy_qp, before the QP goes and with no lock of ibverbs
// held, that `qp` is being destroyed: librdmacm's CM forgets it, so no
// later event of its connection moves a freed QP (or a new one at its
// address). One hook per process; nullptr for none.
using QpDestroyHook = void (*)(QueuePair* qp);
void set_qp_destroy_hook(QpDestroyHook hook);

// A shared receive queue (srq.cc). Its limit event is set by the engine's
// thread and reported by the event monitor as IBV_EVENT_SRQ_LIMIT_REACHED.
struct Srq {
  ibv_srq ibv;
  uroce::SharedReceiveQueue* srq = nullptr;
  Ctx* ctx = nullptr;
  SpinLock post_lock;
  std::atomic<bool> limit_reached{false};
  std::atomic<std::uint32_t> async_events{0};  // delivered by ibv_get_async_event
  Born born;
};
Srq* srq_of(ibv_srq* srq);
// ibv_create_srq and ibv_create_srq_ex's body: an SRQ of `pd` as `init` says.
ibv_srq* make_srq(ibv_pd* pd, const uroce::SrqInitAttr& init, void* srq_context);
int post_srq_recv(ibv_srq* srq, ibv_recv_wr* wr, ibv_recv_wr** bad);

// Fills the ops of a context (ops.cc): the data path and the unsupported
// verbs' answers.
void fill_data_ops(ibv_context_ops& ops);
// ibv_context.ops' memory-window slots (mw.cc): ibv_alloc_mw, ibv_bind_mw, ibv_dealloc_mw.
ibv_mw* alloc_mw(ibv_pd* pd, ibv_mw_type type);
int bind_mw(ibv_qp* qp, ibv_mw* mw, ibv_mw_bind* bind);
int dealloc_mw(ibv_mw* mw);
// The verbs_context ops we implement (query_device_ex, create_cq_ex,
// create_qp_ex).
// ibv_advise_mr (memory.cc): ProtectionDomain::advise_mr.
int advise_mr_op(ibv_pd* pd, ibv_advise_mr_advice advice, std::uint32_t flags, ibv_sge* sg_list, std::uint32_t num_sge);
// The device's clock rate (ibv_device_attr_ex::hca_core_clock, kHz): the
// engines' clock counts nanoseconds.
inline constexpr std::uint64_t kClockKhz = 1000000;
int query_rt_values_op(ibv_context* context, ibv_values_ex* values);
int query_device_ex_op(ibv_context* context, const ibv_query_device_ex_input* input, ibv_device_attr_ex* attr,
                       std::size_t attr_size);
ibv_cq_ex* create_cq_ex_op(ibv_context* context, ibv_cq_init_attr_ex* attr);
ibv_qp* create_qp_ex_op(ibv_context* context, ibv_qp_init_attr_ex* attr);
// XRC's verbs_context ops (xrc.cc).
// ibv_create_qp_ex of an XRC target QP (IBV_QP_INIT_ATTR_XRCD, no PD).
ibv_qp* create_xrc_target(ibv_context* context, ibv_qp_init_attr_ex& attr);
// ibv_destroy_qp of an XRC target QP's handle: true when it was not the
// last (nothing more to do), false when the QP itself goes now.
bool release_xrc_target(Qp* qp);
// The PD an XRC target QP was made on (its domain's).
uroce::ProtectionDomain* xrc_target_pd(const Qp& qp);
ibv_xrcd* open_xrcd_op(ibv_context* context, ibv_xrcd_init_attr* attr);
int close_xrcd_op(ibv_xrcd* xrcd);
ibv_qp* open_qp_op(ibv_context* context, ibv_qp_open_attr* attr);
ibv_srq* create_srq_ex_op(ibv_context* context, ibv_srq_init_attr_ex* attr);
int get_srq_num_op(ibv_srq* srq, std::uint32_t* srq_num);
// Thread and parent domains' verbs_context ops (domains.cc).
ibv_td* alloc_td_op(ibv_context* context, ibv_td_init_attr* attr);
int dealloc_td_op(ibv_td* td);
ibv_pd* alloc_parent_domain_op(ibv_context* context, ibv_parent_domain_init_attr* attr);
// Device memory's (dm.cc).
ibv_dm* alloc_dm_op(ibv_context* context, ibv_alloc_dm_attr* attr);
int free_dm_op(ibv_dm* dm);
ibv_mr* reg_dm_mr_op(ibv_pd* pd, ibv_dm* dm, std::uint64_t offset, std::size_t length, unsigned access);
// The new post API's function table (qp_ex.cc).
void fill_wr_ops(ibv_qp_ex& ex);
// ibv_start_poll & co. (cq.cc).
void fill_poll_ops(ibv_cq_ex& ex);

// Asynchronous events (events.cc): a thread watches the open contexts'
// QPs and CQs and writes ibv_async_event records to their async_fd.
void watch_events(Ctx* ctx);
void unwatch_events(Ctx* ctx);
// In a forked child (device.cc's fork handler): the watching thread is the
// parent's, so the next watch_events starts one of the child's own.
void forget_watched_contexts_in_child();
// Drops the unread events of a QP or CQ being destroyed (x->mutex held), as
// the kernel drops them.
void forget_events(Ctx* x, const void* object);
// ibv_destroy_qp, x->mutex held: the warning the event monitor gives a QP
// that an error ended (events.cc), if the monitor has not looked since.
void warn_if_ended_by_error(Qp* qp);
// UROCE_COUNTERS=1: the device's non-zero counters, and with several
// engines each one's frames received and passed on, to stderr when the
// program closes its last context, or exits with one open (the workers
// still up). `when` ends the heading line.
void print_counters_on_close(uroce::Context& ctx, const char* when);
// UROCE_COUNTERS=1 too: a QP's transport mode and non-zero counters, one
// line on stderr as ibv_destroy_qp takes it (the device's counters at
// close hold no QP's: they have gone by then).
void print_qp_counters_on_destroy(const QueuePair& qp);

// An asynchronous event of `o` (ibv_cq, ibv_qp, ibv_srq) acknowledged:
// counted in its `acked` field under its mutex, waking a destroy that waits.
template <typename T, typename F>
void count_ack(T* o, F T::*acked) {
  pthread_mutex_lock(&o->mutex);
  ++(o->*acked);
  pthread_cond_broadcast(&o->cond);
  pthread_mutex_unlock(&o->mutex);
}
// As rdma-core's destroy calls: until the `delivered` events of `o` (ibv_qp,
// ibv_srq) are acknowledged; then its mutex and condition go.
template <typename T>
void await_acks(T* o, std::uint32_t delivered) {
  pthread_mutex_lock(&o->mutex);
  while (o->events_completed != delivered) pthread_cond_wait(&o->cond, &o->mutex);
  pthread_mutex_unlock(&o->mutex);
  pthread_cond_destroy(&o->cond);
  pthread_mutex_destroy(&o->mutex);
}

// A new verbs object, value-initialised; nullptr with errno ENOMEM when
// memory is short (verbs' convention for the create calls).
template <typename T>
T* allocate() {
  T* p = new (std::nothrow) T{};
  if (p == nullptr) errno = ENOMEM;
  return p;
}

// Says one line on stderr for a verb uroce does not support yet (once per
// kind of request), and returns `err`.
int unsupported(int err, const char* what);

// ECE (ece.cc): ibv_ece.options bits of kVendorId (include/uroce/verbs.h).
using uroce::kEceSelectiveRepeat;
// The options this build agrees to (QueuePair::transport_capabilities).
std::uint32_t ece_supported();
// UROCE_TRANSPORT: "sr", "gbn", "spray=N", "bdp=N", comma-separated
// ("sr,spray=4,bdp=64"). False with a one-line `message` when malformed
// or asking for what the transport does not run yet.
bool parse_transport(std::string_view text, TransportOptions& options, std::string& message);
// Called by ibv_modify_qp before an RC QP moves to RTR: sets its transport
// options from UROCE_TRANSPORT and what ECE agreed (ece.cc). An errno
// value, with one line on stderr, when they cannot be had.
int apply_transport(Qp& qp);

}  // namespace uroce::ibverbs
