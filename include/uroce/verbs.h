// uroce's verbs-like API: the object model every RDMA programmer knows
// (device context, protection domain, memory region, completion queue,
// queue pair), with rdma-core's <infiniband/verbs.h> types for work requests,
// completions, QP attributes and their masks. Only that header is used: no
// libibverbs library and no kernel device are needed.
//
// Objects are created by and owned by their Context; destroy them through
// the Context (as with ibv_dealloc_pd and friends) or let the Context's
// destructor release everything. Calls return 0 or an errno value like the
// verbs they mirror; errors also leave a one-line message in
// Context::last_error().
//
// A Context runs on a port the embedder gives it: the PacketIo and Clock of
// include/uroce/port.h (drivers/ hold a DPDK port and a simulated link).
#pragma once

#include <infiniband/verbs.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "uroce/port.h"

namespace uroce {

namespace cc {
struct DcqcnParams;
struct DelayParams;
}  // namespace cc

namespace internal {
struct Access;  // lib/verbs/internal.h: how drivers and tests reach behind this API
}  // namespace internal

// ibv_wc_status_str without the libibverbs library: "success",
// "transport retry counter exceeded", ...
const char* wc_status_str(ibv_wc_status status);

// Where Context::resolve_gid() stands on a peer's Ethernet address.
enum class Reach { kKnown, kPending, kUnreachable };

class Context;
class ProtectionDomain;
class MemoryRegion;
class MemoryWindow;
class CompletionQueue;
class QueuePair;
class SharedReceiveQueue;
class AddressHandle;
class DeviceMemory;
class XrcDomain;
struct Stat;     // include/uroce/stats.h
struct QpStats;  // include/uroce/stats.h

// Device limits, as ibv_query_device reports them.
struct DeviceLimits {
  // 10,000 connected QPs per core with room to spare (docs/performance.md
  // measures them): a QP costs its queues plus a few KiB.
  std::uint32_t max_qp = 16384;
  std::uint32_t max_qp_wr = 16384;
  std::uint32_t max_sge = 16;
  std::uint32_t max_inline_data = 256;
  std::uint32_t max_cqe = 1u << 20;
  std::uint32_t max_mr = 65536;
  // READs and atomics outstanding per QP, as responder (the bound of
  // max_dest_rd_atomic) and as initiator (of max_rd_atomic). 128, as Soft-RoCE
  // reports: perftest sets a peer's value on its own QP.
  std::uint32_t max_qp_rd_atom = 128;
  std::uint32_t max_qp_init_rd_atom = 128;
  // Device memory (Context::alloc_dm): the most a context holds at once,
  // each allocation counted in whole 4 KiB pages (attached to uroced: each
  // client, the daemon's value).
  std::uint64_t max_dm_size = 256 * 1024;
};

// ibv_qp_init_attr with this API's CQ objects.
struct QpInitAttr {
  CompletionQueue* send_cq = nullptr;
  CompletionQueue* recv_cq = nullptr;
  ibv_qp_cap cap{};                  // max_send_wr, max_recv_wr, max_send_sge, max_recv_sge, max_inline_data
  // RC; UC (SENDs and WRITEs without ACKs: a message hit by loss is
  // dropped whole); UD (datagrams of at most the port's MTU, each to the
  // address handle of its WR, received behind a 40-byte GRH).
  ibv_qp_type qp_type = IBV_QPT_RC;
  bool sq_sig_all = false;
  // The engine (port queue, worker) that serves the QP; -1: the one serving
  // the fewest QPs. EINVAL past PortConfig's queues.
  int worker = -1;
  // Receives from this shared receive queue instead of a queue of its own
  // (cap.max_recv_wr and max_recv_sge are then ignored, post_recv refused).
  // The QP is served by the engine that serves the SRQ's other QPs.
  SharedReceiveQueue* srq = nullptr;
  // XRC (IBTA annex A14). IBV_QPT_XRC_SEND: an initiator QP, which only
  // sends, each WR to the XRC SRQ its wr.qp_type.xrc.remote_srqn names at
  // the peer (recv_cq and the receive caps are ignored). IBV_QPT_XRC_RECV:
  // a target QP of `xrcd`, which only receives: each request goes into the
  // XRC SRQ of `xrcd` it names, checked against that SRQ's PD, completing
  // on that SRQ's CQ; the QP's own PD and CQs only own it (no key is ever
  // checked against that PD, nothing completes on those CQs).
  XrcDomain* xrcd = nullptr;
};

// A QP's transport options beyond RoCEv2, for a lossy, multipath fabric
// (docs/transport.md, "Selective repeat"). Both ends must use the same ones:
// they agree through ECE (ibv_set_ece, rdma_cm) or are set on both ends by
// the operator; against any other peer a QP keeps the defaults, and its
// packets are RoCEv2's.
struct TransportOptions {
  // RC: the responder takes packets out of order within the window and
  // places each where it belongs; the requester resends only what the
  // peer's selective ACKs say is missing.
  bool selective_repeat = false;
  // Each packet leaves on one of this many paths (UDP source ports, which
  // ECMP switches hash); 1: one path, as RoCEv2. More needs selective_repeat.
  std::uint8_t spray_paths = 1;
  // Packets in flight at most (the path's bandwidth-delay product); 0: the
  // transport's window.
  std::uint32_t bdp_packets = 0;
};

// ECE (ibv_set_ece, rdma_cm's REQ and REP): the ibv_ece.options bits uroce
// agrees on under its vendor id (ibv_query_device's vendor_id, 0x020000).
// Bit 0: the QP runs selective repeat (TransportOptions::selective_repeat);
// the others are reserved, zero.
inline constexpr std::uint32_t kEceSelectiveRepeat = 1u << 0;

// ibv_srq_init_attr's attributes.
struct SrqInitAttr {
  std::uint32_t max_wr = 0;
  std::uint32_t max_sge = 1;
  std::uint32_t srq_limit = 0;  // armed at creation when non-zero
  // An XRC SRQ (ibv_create_srq_ex, IBV_SRQT_XRC): of this domain, its
  // receive completions on `cq` (required with xrcd). Requests name it by
  // SharedReceiveQueue::srq_num().
  XrcDomain* xrcd = nullptr;
  CompletionQueue* cq = nullptr;
};

// Context::create_cq's attributes.
struct CqAttr {
  int cqe = 0;  // capacity
  // Completion events, as Context::create_cq's on_event and arg.
  void (*on_event)(void* arg) = nullptr;
  void* arg = nullptr;
  // Each completion carries the time its engine completed the work
  // (CompletionQueue::poll's completion_ts): the engines' clock in ns, the
  // clock ClockValues::raw_ns reads. Attached to uroced: the daemon's.
  bool completion_timestamps = false;
};

// The device's clock and the wall clock read together (Context::query_clock,
// ibv_query_rt_values_ex). The raw clock counts nanoseconds.
struct ClockValues {
  std::uint64_t raw_ns = 0;       // the engines' clock (PortConfig::clock; attached: uroced's)
  std::uint64_t realtime_ns = 0;  // CLOCK_REALTIME at the same moment
};

// ProtectionDomain::rereg_mr: what changes (ibv_rereg_mr).
struct ReregAttr {
  int flags = 0;                     // IBV_REREG_MR_CHANGE_TRANSLATION, _PD, _ACCESS
  ProtectionDomain* pd = nullptr;    // with CHANGE_PD: the new PD, of the same Context
  void* addr = nullptr;              // with CHANGE_TRANSLATION: the new memory
  std::size_t length = 0;
  std::uint64_t iova = 0;            // with CHANGE_TRANSLATION: its remote address
  int access = 0;                    // with CHANGE_ACCESS: ibv_access_flags
};

// Where a Context sends and receives frames, and its addresses.
struct PortConfig {
  PacketIo* io = nullptr;            // the port (simulated link, DPDK port, ...); not owned
  // Several queues of one port, one engine each (queue i: engine i, worker
  // i); `io` is then queues[0] or nullptr. A QP is served by one engine;
  // packets for it that arrive on another queue are passed to that engine.
  // The queues must release each other's frames (queues of one DPDK port
  // do). Not owned.
  std::vector<PacketIo*> queues;
  Clock* clock = nullptr;            // time source (virtual in the simulator); not owned
  std::uint8_t mac[6] = {};
  ibv_gid gid = {};                  // our RoCEv2 GID (IPv4-mapped ::ffff:a.b.c.d, or IPv6)
  ibv_mtu active_mtu = IBV_MTU_4096; // largest path MTU the port carries
  std::uint64_t seed = 1;            // for the transport's randomness (initial PSNs)
  // QP numbers drawn from `seed` instead of the kernel's randomness, so a
  // simulated run repeats exactly (a QP's number picks its UDP source port,
  // and so its path through ECMP). For simulators only: on a real port QP
  // numbers must be unpredictable.
  bool seeded_qpns = false;
  // Pages for alloc_buffer(): hugepages when reserved, else normal (kAuto);
  // hugepages or an error (kHuge); normal pages (kNormal).
  enum class Pages { kAuto, kHuge, kNormal } buffer_pages = Pages::kAuto;
  // DCQCN congestion control (conf/dcqcn.conf): ECN-capable marking on what
  // is sent, CNPs for CE-marked packets received, a rate per QP cut by the
  // CNPs it receives. nullptr: off. Not owned; must outlive the Context.
  const cc::DcqcnParams* dcqcn = nullptr;
  // Delay-based congestion control (conf/delay.conf, lib/cc/delay.h): a
  // window per RC QP on the round trip of each ACK, needing nothing from
  // the switches. nullptr: off. At most one of dcqcn and delay_cc: open
  // refuses both. Not owned; must outlive the Context.
  const cc::DelayParams* delay_cc = nullptr;
  // The fabric's lossless priority (802.1p, 0-7), the one PFC protects;
  // -1: none. Switches and NICs that trust DSCP map it to a priority as
  // DSCP >> 3, so an address vector (QP or AH) whose DSCP is 0 sends with
  // DSCP pfc_priority << 3 instead (its ECN bits kept); one whose DSCP maps
  // to another priority sends as asked, counted in the engine counter
  // paths_outside_pfc_priority and warned about once. CNPs keep their own
  // DSCP (dcqcn->cnp_dscp): a warning at open if it maps to this priority.
  // The port's own PFC is set where the port is opened (DPDK: dpdk::PortConfig).
  int pfc_priority = -1;
  // A floor under every QP's local ACK timeout: the exponent as in
  // ibv_qp_attr::timeout (4.096 us * 2^N, 1-31); 0: none. A QP whose own
  // timeout is shorter waits this long instead (ibv_query_qp still reports
  // its own; 0, infinite, stays infinite). For paths slower than programs
  // expect, such as a software peer on a loaded host: the stock tools set 14
  // (67 ms), and with 7 retries give up after about half a second.
  std::uint8_t min_ack_timeout = 0;
};

class Context {
 public:
  // A device on `port`. Never returns nullptr for a valid config; `error` says
  // what is wrong otherwise ("no packet I/O given: ...").
  static std::unique_ptr<Context> open(const PortConfig& port, std::string& error);
  // A device served by the uroced daemon at `socket_path` (service mode,
  // README "Running as a service"): every call below works as in process,
  // its objects living in the daemon, the data path in shared memory. Memory
  // given to reg_mr is moved onto a shared memory file at the same
  // addresses (whole pages; see the README for what that implies). nullptr
  // and a one-line `error` when no daemon listens there or it refuses us.
  // Attached, progress() and the workers are the daemon's (no-ops here),
  // and the device's counters (stats(), qp_stats()) are read from the
  // daemon's telemetry (uroced --stats), not here; a QP's counters work.
  static std::unique_ptr<Context> attach(const std::string& socket_path, std::string& error);
  bool attached() const;
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  const DeviceLimits& limits() const;
  const ibv_gid& gid() const;
  ibv_mtu active_mtu() const;  // the largest path MTU the port carries
  // The message of the last call on this context that failed in the calling
  // thread ("" if none did); each thread has its own.
  const std::string& last_error() const;

  ProtectionDomain* alloc_pd();
  int dealloc_pd(ProtectionDomain* pd);  // EBUSY while MRs or QPs use it

  // cqe: capacity. Overflow is an error: the CQ stops accepting completions,
  // poll() returns -EOVERFLOW, and QPs that post to it move to ERR.
  // `on_event(arg)`: completion events (CompletionQueue::arm), called on the
  // thread that runs the engine (a worker, or progress()'s caller), so it
  // must be short and must not call into this Context (a pipe write is the
  // intended use). nullptr: arm() is refused.
  CompletionQueue* create_cq(int cqe, void (*on_event)(void* arg) = nullptr, void* arg = nullptr);
  // The same with CqAttr (completion timestamps).
  CompletionQueue* create_cq(const CqAttr& attr);
  // The raw clock completions are stamped with and the wall clock, read
  // together. 0, or an errno value (attached: the daemon did not answer).
  int query_clock(ClockValues& values);
  int destroy_cq(CompletionQueue* cq);  // EBUSY while QPs use it

  // Memory for regions, as PortConfig::buffer_pages says. Aligned to 4 KiB
  // at least. nullptr when out of memory, or when hugepages were required
  // and none are free (last_error() names the command that reserves them).
  void* alloc_buffer(std::size_t bytes);

  // ibv_alloc_dm: `length` bytes of device memory, zeroed: memory the
  // engines reach on their own, which the program reads and writes through
  // DeviceMemory::copy_to and copy_from and registers with
  // ProtectionDomain::reg_dm_mr. In process a buffer of this Context's;
  // attached to uroced a memory file the daemon owns and maps into this
  // process (no other client gets it). nullptr on error: length 0
  // (EINVAL), past what is left of limits().max_dm_size, counted in whole
  // 4 KiB pages (ENOMEM), no memory.
  DeviceMemory* alloc_dm(std::size_t length);
  // ibv_open_xrcd: a new XRC domain (IBTA annex A14); its target QPs and
  // XRC SRQs are served by one engine. Sharing one between processes (by
  // a file, as ibv_open_xrcd's fd) is the verbs library's: see
  // docs/ibverbs.md. nullptr on error (Context::last_error()).
  XrcDomain* open_xrcd();
  // ibv_close_xrcd: 0; EBUSY while XRC SRQs or target QPs of it remain;
  // EINVAL for a domain not of this context.
  int close_xrcd(XrcDomain* xrcd);
  // ibv_free_dm: 0; EBUSY while regions of it are registered; EINVAL for
  // memory not of this context.
  int free_dm(DeviceMemory* dm);

  // The port's GID table as rdma-core lists a RoCEv2 port's: index 0 the
  // IPv6 link-local address (fe80::, from the MAC), index 1 the IPv4-mapped
  // ::ffff:a.b.c.d. EINVAL for other indexes.
  int query_gid(int index, ibv_gid& gid) const;
  void free_buffer(void* buffer);

  // The Ethernet address of the peer with GID `gid`, without waiting: never
  // blocks, never holds the engines (safe beside the workers, from any
  // thread but a worker's). Returns
  //  kKnown        the port knows it (`mac` filled when non-null);
  //  kPending      not yet: a request (ARP, neighbour solicitation) has gone
  //                out or will go out in the engines' next burst, or too
  //                many resolutions are under way (at most 64 at once) and
  //                this one waits its turn; ask again later (a few ms);
  //  kUnreachable  a recent attempt got no answer within a second (the GID
  //                is then refused for 5 s: the negative cache), or the port
  //                cannot reach it at all.
  // Attached to uroced the daemon resolves when an address is set: kKnown,
  // `mac` untouched. QueuePair::modify (IBV_QP_AV) and create_ah wait on
  // this outside any control call, for a second and a half at most.
  Reach resolve_gid(const ibv_gid& gid, std::uint8_t mac[6] = nullptr);

  // One run of every engine's loop: receive, timers, transmit. The
  // simulator and single-threaded embedders call this, and under
  // Progress::kCaller any thread may. Returns the number of frames received
  // plus sent; 0 (and nothing done) while workers run, another thread's
  // control call (telemetry's, say) runs, or another thread's progress()
  // does (one poller at a time: the others return at once).
  std::size_t progress();
  // The same, for a caller that says why it runs the engines, so that
  // they order the poll's work for it:
  //  kAny      receive, then timers, then send (answers to what came too);
  //            what progress() does.
  //  kPolling  the caller hands what came to a program that may answer at
  //            once (lib/ibverbs's ibv_poll_cq): as kAny, but a QP whose only
  //            answer is a plain ACK keeps it for the next progress() (any
  //            thread's, any kind; or the helper's). The ACK then leaves in
  //            one burst with the program's answer instead of in a burst of
  //            its own ahead of it (a memif burst costs 300-500 ns). An ACK
  //            waits one poll at most; NAKs, READ responses and atomic ACKs
  //            never wait.
  //  kPosted   the caller has just posted work (ibv_post_send): it goes out
  //            first, then the poll receives, runs timers and sends again.
  enum class ProgressFor : std::uint8_t { kAny, kPolling, kPosted };
  std::size_t progress(ProgressFor why);
  // Request packets (SEND, WRITE, READ, atomic, UD datagrams) the engines
  // have handed to this context's QPs: a caller that polls learns whether a
  // peer's WRITE, which no completion announces, may have come (lib/ibverbs
  // lingers on it). Any thread; 0 attached to uroced.
  std::uint64_t requests_received() const;

  // Runs each engine on a thread of its own, engine i pinned to cpus[i]
  // (-1: not pinned), until stop_workers() or the Context goes. Application
  // threads then post and poll through lock-free rings. Every control call
  // (PD, CQ, MR, QP create/modify/query/destroy) holds all workers between
  // two bursts while it runs. Returns 0; EBUSY if workers already run;
  // EINVAL unless there is one CPU per engine (PortConfig::queues).
  int start_workers(const std::vector<int>& cpus);
  // The same, and each worker also runs `hook.run(arg, i)` (i: its engine)
  // after every poll of its engine, and `hook.before(arg, i)` before it,
  // never while a control call holds it: how uroced moves work between its
  // clients' shared rings and the QPs (requests before a poll, so they go
  // out in it; completions after). Each returns how much it did (0:
  // nothing, so the worker may yield) and must not block or make control
  // calls; either may be null.
  struct WorkerHook {
    std::size_t (*run)(void* arg, std::size_t worker) = nullptr;
    void* arg = nullptr;
    std::size_t (*before)(void* arg, std::size_t worker) = nullptr;
  };
  int start_workers(const std::vector<int>& cpus, WorkerHook hook);
  int start_worker(int cpu) { return start_workers({cpu}); }

  // How start_workers runs the engines:
  //  kWorkers  one thread per engine, polling it without pause (the default);
  //  kCaller   no such threads: the engines run inside progress(), called by
  //            the application's own threads (lib/ibverbs calls it from
  //            ibv_poll_cq, ibv_post_send, ibv_get_cq_event),
  //            and by one helper thread that polls only while no caller has
  //            for a while: a program blocked in a system call, asleep, or
  //            spinning on memory without a verbs call. The helper runs
  //            flat out while the rest of the process takes no CPU (a server
  //            waiting on a socket), in short bursts (a few us in each 50)
  //            while it does (a program spinning on memory: such a program
  //            sees data tens of us late), and sleeps up to a millisecond
  //            when no frame moves (timers then fire that late). Pinned to
  //            cpus[0] when that is not -1, else where the caller of
  //            start_workers may run; one helper whatever the engines,
  //            `hook` run around each engine's poll inside progress().
  //            One core then serves a program and its engines
  //            (docs/performance.md, "Progress in the caller").
  // Set before start_workers: EBUSY while workers or the helper run.
  // Attached to uroced: ENOTSUP (the daemon's cores run the engines).
  enum class Progress : std::uint8_t { kWorkers, kCaller };
  int set_progress(Progress mode);
  Progress progress_mode() const;
  // kCaller: the helper runs the engines from now on, not at its next look
  // (up to a millisecond later): for a thread about to block (in read(2) on
  // a completion channel) or one that posted work it will not poll for
  // (the CM's MADs). A no-op otherwise.
  void hand_to_helper();
  // Stops and joins the workers. The workers block every signal. Called on
  // a thread that is inside a control call (exit() from a signal handler
  // that interrupted one), it returns at once: that call holds them.
  void stop_workers();

  // The device's counters (include/uroce/stats.h): every engine counter and
  // drop reason (scope kEngine), then every counter of its port (kPort),
  // each summed over the engines and their port queues. Copied in one
  // read-only control call, so the values are a consistent set; safe beside
  // the workers, but not from a worker or inside another control call.
  std::vector<Stat> stats() const;
  // The same for engine `engine` alone and its port queue (engine i serves
  // PortConfig::queues[i]); empty past the last queue.
  std::vector<Stat> engine_stats(std::size_t engine) const;
  // The numbers of the QPs the engines serve, engine by engine (one
  // read-only control call).
  std::vector<std::uint32_t> qp_nums() const;
  // QP `qpn`'s counters, state and engine, copied in one read-only control
  // call. Returns false, `out` untouched, when no engine serves that QP.
  bool qp_stats(std::uint32_t qpn, QpStats& out) const;
  // The QPs numbered `first_qpn` or more, in ascending order, at most
  // `max` of them, copied in one read-only control call: a reader walks
  // 10,000 QPs a page at a time (the next from the last one's qp_num + 1)
  // without holding the engines for all of them at once.
  std::vector<QpStats> qp_stats_page(std::uint32_t first_qpn, std::size_t max) const;
  // The same page written over out[at], out[at + 1], ... (out grows as
  // needed; what it held is reused, not freed): how many QPs it holds. A
  // reader that reads every QP ten times a second allocates nothing once
  // its vector has held them all.
  std::size_t qp_stats_page(std::uint32_t first_qpn, std::size_t max, std::vector<QpStats>& out, std::size_t at) const;

 private:
  friend struct internal::Access;
  struct Impl;
  Context() = default;
  std::unique_ptr<Impl> impl_;
};

class ProtectionDomain {
 public:
  // Registers [addr, addr + length) with ibv_access_flags. The region's iova
  // (the address remote peers use) is addr. nullptr on error (see
  // Context::last_error(): bad flags, zero length, out of keys).
  MemoryRegion* reg_mr(void* addr, std::size_t length, int access);
  // The same with a remote address `iova` that differs from addr (ibv_reg_mr_iova).
  MemoryRegion* reg_mr_iova(void* addr, std::size_t length, std::uint64_t iova, int access);
  // EBUSY while memory windows are bound to the region (IBTA 11.2.8.5).
  int dereg_mr(MemoryRegion* mr);
  // On-demand paging: with IBV_ACCESS_ON_DEMAND in `access`, reg_mr and
  // reg_mr_iova neither pin nor populate the memory, which need not be
  // mapped yet; addr nullptr with length SIZE_MAX is the implicit region of
  // the whole address space (iova = address). A transfer that reaches a page
  // not mapped then ends with IBV_WC_LOC_PROT_ERR locally, or a remote
  // access NAK to a peer (docs/transport.md, "On-demand paging").
  // ibv_advise_mr: prefetch (IBV_ADVISE_MR_ADVICE_PREFETCH, _WRITE, _NO_FAULT;
  // flags 0 or IBV_ADVISE_MR_FLAG_FLUSH) the SGEs' ranges of ODP regions of
  // this PD. 0, ENOTSUP (another advice), EINVAL (flags), EFAULT (an lkey not
  // an ODP region of this PD, a range outside it or not mapped), EPERM
  // (PREFETCH_WRITE on a region without LOCAL_WRITE).
  int advise_mr(int advice, std::uint32_t flags, const ibv_sge* sg_list, std::uint32_t num_sge);
  // ibv_reg_dm_mr: bytes [offset, offset + length) of `dm` as a zero-based
  // region: SGEs and peers address it from 0 (iova 0; addr is where this
  // process sees its first byte, which no SGE uses). Access
  // as reg_mr's. nullptr on error (Context::last_error(): the range leaves
  // the memory, zero length, memory of another context, bad flags).
  MemoryRegion* reg_dm_mr(DeviceMemory* dm, std::uint64_t offset, std::size_t length, int access);

  // ibv_alloc_mw: an unbound memory window (IBTA 10.6.7) of type
  // IBV_MW_TYPE_1 (bound by QueuePair::bind_mw) or IBV_MW_TYPE_2 (bound by
  // an IBV_WR_BIND_MW work request, invalidated by IBV_WR_LOCAL_INV or a
  // peer's SEND with Invalidate). nullptr on error: another type (EINVAL),
  // out of keys (ENOMEM; windows share the device's max_mr keys).
  MemoryWindow* alloc_mw(ibv_mw_type type);
  // ibv_dealloc_mw: a bound window's rkey stops working. EINVAL for a window
  // not of this PD.
  int dealloc_mw(MemoryWindow* mw);
  // ibv_rereg_mr: changes the region's translation (addr, length, iova),
  // PD or access in place; it keeps its lkey and rkey. From the return on,
  // every access goes through the new translation: a packet or WQE that
  // resolved the region before is checked again (as after dereg_mr), and
  // the old memory is never touched. Returns 0; EINVAL (no or unknown
  // flags, zero length or no address with CHANGE_TRANSLATION, bad access
  // as reg_mr, a PD of another Context, not a region of this PD); errors
  // of registering the new memory otherwise (ENOMEM; attached: the daemon's).
  // On an error nothing changed.
  int rereg_mr(MemoryRegion* mr, const ReregAttr& change);

  // Creates an RC, UC, UD or XRC (QpInitAttr::xrcd) QP in RESET. nullptr
  // on error (unsupported type, caps over the device limits, CQ missing).
  QueuePair* create_qp(const QpInitAttr& attr);
  int destroy_qp(QueuePair* qp);

  // ibv_create_srq: a shared receive queue of this PD. `on_limit(arg)` runs
  // on the engine's thread (attached to uroced: the library's event thread)
  // when fewer WQEs than the armed limit remain (IBV_EVENT_SRQ_LIMIT_REACHED);
  // it must not block or make control calls.
  // nullptr on error: max_wr or max_sge over the device limits (EINVAL), or
  // over a budget of uroced's (ENOMEM, max_srqs) when attached.
  SharedReceiveQueue* create_srq(const SrqInitAttr& attr, void (*on_limit)(void* arg) = nullptr,
                                 void* arg = nullptr);
  // EBUSY while QPs use it.
  int destroy_srq(SharedReceiveQueue* srq);

  // ibv_create_ah: where UD sends go. RoCEv2 needs the GRH (is_global 1,
  // dgid the peer's GID, sgid_index 0 or 1 of the same family); the peer's
  // Ethernet address is resolved first (Context::resolve_gid(), waited for
  // up to 1.5 s while the engines keep running), EHOSTUNREACH if no answer
  // came or the GID failed in the last 5 s. nullptr on error
  // (Context::last_error()).
  AddressHandle* create_ah(const ibv_ah_attr& attr);
  int destroy_ah(AddressHandle* ah);

  Context& context() { return *ctx_; }
  // In-process: its identity, a 64-bit number no other PD of this process
  // ever has (the memory-region table's PD check compares it, so a PD made
  // after any number of others never passes for a live one). Attached to
  // uroced: the daemon's handle of it.
  std::uint64_t id() const { return id_; }
  // ibv_pd's 32-bit handle: the low half of id() (not unique in-process).
  std::uint32_t handle() const { return static_cast<std::uint32_t>(id_); }

  ProtectionDomain(Context* ctx, std::uint64_t id) : ctx_(ctx), id_(id) {}

 private:
  Context* ctx_;
  std::uint64_t id_;
};

class MemoryRegion {
 public:
  void* addr = nullptr;
  std::size_t length = 0;
  std::uint64_t iova = 0;
  std::uint32_t lkey = 0;
  std::uint32_t rkey = 0;
  int access = 0;
  ProtectionDomain* pd = nullptr;
  DeviceMemory* dm = nullptr;  // reg_dm_mr's; nullptr for regions of the program's memory
};

// Device memory (Context::alloc_dm).
class DeviceMemory {
 public:
  // ibv_memcpy_to_dm / ibv_memcpy_from_dm: 0; EINVAL when offset or length
  // is not a multiple of 4 (device memory is read and written in 4-byte
  // words, as rdma-core's one provider of it, mlx5, does) or the range
  // leaves the memory. Safe beside the engines, which may place into it:
  // a copy races with an RDMA WRITE into the same bytes as host memory does.
  int copy_to(std::uint64_t offset, const void* src, std::size_t length);
  int copy_from(void* dst, std::uint64_t offset, std::size_t length) const;
  std::size_t length() const { return length_; }
  Context& context() { return *ctx_; }

  DeviceMemory(Context* ctx, void* addr, std::size_t length, std::uint32_t handle)
      : ctx_(ctx), addr_(static_cast<std::uint8_t*>(addr)), length_(length), handle_(handle) {}
  // Where this process sees the memory (the backends and tests).
  std::uint8_t* addr() const { return addr_; }
  // Attached to uroced: the daemon's handle of it; 0 in process.
  std::uint32_t handle() const { return handle_; }
  // Regions registered on it (reg_dm_mr; free_dm refuses while any are).
  std::atomic<std::uint32_t> regions{0};

 private:
  Context* ctx_;
  std::uint8_t* addr_;
  std::size_t length_;
  std::uint32_t handle_;
};

// A memory window (ProtectionDomain::alloc_mw). ibv() is what an
// IBV_WR_BIND_MW work request names in wr.bind_mw.mw; its rkey is the
// window's: type 1, the one its last bind gave it; type 2, the one it was
// allocated with (each bind names its own in wr.bind_mw.rkey: the same but
// for the low 8 bits, the consumer's key). wr.bind_mw.bind_info.mr is read
// for its lkey only: any ibv_mr whose lkey is the region's will do (our
// libibverbs' is one); nullptr (or length 0) unbinds a type 1 window.
// An XRC domain (Context::open_xrcd).
class XrcDomain {
 public:
  Context& context() const { return *ctx_; }
  // Attached to uroced: the daemon's handle of it; in process a number
  // unique in the context.
  std::uint32_t handle() const { return handle_; }
  // The engine its target QPs and XRC SRQs use (in process).
  int engine() const { return engine_; }

  XrcDomain(Context* ctx, std::uint32_t handle, int engine);
  ~XrcDomain();
  XrcDomain(const XrcDomain&) = delete;
  XrcDomain& operator=(const XrcDomain&) = delete;

  // Its SRQs by number, as the engine looks them up (in process; lib/verbs).
  struct Targets;
  Targets* targets() const { return targets_.get(); }
  std::uint32_t users = 0;  // XRC SRQs and target QPs of it (control path)

 private:
  Context* ctx_;
  std::uint32_t handle_;
  int engine_;
  std::unique_ptr<Targets> targets_;
};

class MemoryWindow {
 public:
  ibv_mw* ibv() { return &mw_; }
  ibv_mw_type type() const { return mw_.type; }
  std::uint32_t rkey() const { return mw_.rkey; }
  ProtectionDomain* pd() const { return pd_; }
  // Attached to uroced: the daemon's handle of it.
  std::uint32_t handle() const { return mw_.handle; }

  MemoryWindow(ProtectionDomain* pd, ibv_mw_type type, std::uint32_t rkey, std::uint32_t handle) : pd_(pd) {
    mw_.type = type;
    mw_.rkey = rkey;
    mw_.handle = handle;
  }
  void set_rkey(std::uint32_t rkey) { mw_.rkey = rkey; }

 private:
  ibv_mw mw_{};
  ProtectionDomain* pd_;
};

class CompletionQueue {
 public:
  // Up to n completions into wc. Returns how many, or -EOVERFLOW once the
  // queue has overflowed.
  int poll(int n, ibv_wc* wc);
  // The same, and each completion's timestamp into completion_ts[i] (ns of
  // the engines' clock, ClockValues::raw_ns; 0 for a CQ made without
  // CqAttr::completion_timestamps).
  int poll(int n, ibv_wc* wc, std::uint64_t* completion_ts);
  bool timestamps() const;
  int capacity() const;
  // ibv_resize_cq: the CQ holds `cqe` completions from now on; those that
  // wait are kept, in order. 0; EINVAL for cqe below 1, over max_cqe, or
  // below the number waiting plus the send work requests its QPs have
  // posted and not completed (nothing changed). Not while another thread
  // polls this CQ.
  int resize(int cqe);
  // ibv_req_notify_cq: one event (the create_cq callback) for the next
  // completion, or with `solicited_only` for the next solicited receive or
  // completion in error. If completions already wait to be polled when a
  // CQ is armed for the next one, the event comes at once (as RNICs do), so
  // the arm-then-poll pattern never sleeps on a full CQ. Returns 0; EINVAL
  // for a CQ created without a callback. Safe beside the workers, from the
  // thread that polls.
  int arm(bool solicited_only);
  // Whether the CQ has overflowed (poll() returns -EOVERFLOW).
  bool overflowed() const;

  ~CompletionQueue();
  CompletionQueue(const CompletionQueue&) = delete;
  CompletionQueue& operator=(const CompletionQueue&) = delete;

 private:
  friend struct internal::Access;
  struct Impl;
  explicit CompletionQueue(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

class SharedReceiveQueue {
 public:
  // ibv_post_srq_recv: 0, ENOMEM (full), EINVAL (too many SGEs); *bad_wr
  // the first work request not posted. One thread at a time.
  int post_recv(ibv_recv_wr* wr, ibv_recv_wr** bad_wr);
  // ibv_modify_srq: IBV_SRQ_LIMIT arms the limit event (0 disarms); a limit
  // over max_wr, or IBV_SRQ_MAX_WR (no resizing), is EINVAL.
  int modify(const ibv_srq_attr& attr, int attr_mask);
  // ibv_query_srq: max_wr, max_sge, and srq_limit (0 once the event fired).
  int query(ibv_srq_attr& attr) const;
  // WQEs posted and not yet taken by a QP.
  std::uint32_t count() const;
  ProtectionDomain* pd() const;
  // ibv_get_srq_num: an XRC SRQ's number (what XRC requests name); 0 for
  // a basic SRQ.
  std::uint32_t srq_num() const;

  ~SharedReceiveQueue();
  SharedReceiveQueue(const SharedReceiveQueue&) = delete;
  SharedReceiveQueue& operator=(const SharedReceiveQueue&) = delete;

 private:
  friend struct internal::Access;
  struct Impl;
  explicit SharedReceiveQueue(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// An address handle (ibv_ah): put ibv() in ibv_send_wr.wr.ud.ah. The
// headers it stands for are copied into each WR at post time, so it may be
// destroyed once the posts that use it have returned.
class AddressHandle {
 public:
  // The verbs handle. Its context and pd fields are left for a verbs
  // library to fill; handle is unique within the Context.
  ibv_ah* ibv();
  // The AddressHandle behind an ibv() pointer; nullptr if it is not one.
  static AddressHandle* of(const ibv_ah* ah);
  const ibv_ah_attr& attr() const;
  ProtectionDomain* pd() const;

  ~AddressHandle();
  AddressHandle(const AddressHandle&) = delete;
  AddressHandle& operator=(const AddressHandle&) = delete;

 private:
  friend struct internal::Access;
  struct Impl;
  explicit AddressHandle(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

class QueuePair {
 public:
  std::uint32_t qp_num() const;

  // ibv_modify_qp: attr_mask is IBV_QP_* bits. Checks the transition and the
  // required and allowed attributes of IBTA table 91 (RC); EINVAL otherwise,
  // with the reason in Context::last_error(). With IBV_QP_AV the peer's
  // Ethernet address is resolved first, outside the control call (the
  // engines keep running; Context::resolve_gid(), waited for up to 1.5 s):
  // EHOSTUNREACH if no answer came or the GID failed in the last 5 s. A
  // move to RESET takes the QP's completions out of its CQs (as mlx5 does):
  // not while another thread polls them (our libibverbs holds their poll
  // locks for it).
  int modify(const ibv_qp_attr& attr, int attr_mask);
  int query(ibv_qp_attr& attr, int attr_mask, QpInitAttr* init_attr = nullptr) const;
  ibv_qp_state state() const;
  // The transport options (TransportOptions), set in RESET or INIT, before
  // the QP receives or sends: 0; EINVAL in another state, for a QP type
  // they do not apply to (RC only), or spraying without selective repeat;
  // EOPNOTSUPP for selective repeat on a QP with an SRQ, or beyond
  // transport_capabilities. In process and attached to uroced alike.
  int set_transport_options(const TransportOptions& options);
  TransportOptions transport_options() const;
  // The most set_transport_options takes on this build: selective_repeat
  // true once the transport runs it, the most spray_paths. ECE
  // (ibv_set_ece, rdma_cm) agrees only to what this says.
  static TransportOptions transport_capabilities();

  // ibv_post_send / ibv_post_recv. Returns 0, or ENOMEM (queue full), EINVAL
  // (bad opcode, too many SGEs, inline too long, QP state; UD: no address
  // handle of this PD, or longer than the MTU), and sets *bad_wr to the
  // first work request not posted. UC and UD sends complete as soon as
  // they have left (no ACK is awaited).
  int post_send(ibv_send_wr* wr, ibv_send_wr** bad_wr);
  int post_recv(ibv_recv_wr* wr, ibv_recv_wr** bad_wr);
  // ibv_bind_mw: binds the type 1 window `mw` as `bind` says (a work
  // request on this QP's send queue, completing with IBV_WC_BIND_MW, or
  // IBV_WC_MW_BIND_ERR when the bind breaks a rule: the region lacks
  // IBV_ACCESS_MW_BIND, remote write or atomic without its local write, a
  // range beyond it, another PD). On 0 mw->rkey() is the new rkey (the old
  // one stops working when the bind executes). EINVAL: not a type 1 window,
  // or zero-based; else as post_send.
  int bind_mw(MemoryWindow* mw, const ibv_mw_bind& bind);
  // Work requests the engine has finished with since the QP was created or
  // last reset, send and receive side (their slots are free again): for a
  // proxy that mirrors the queues (uroced). Safe beside the workers.
  std::uint32_t send_retired() const;
  std::uint32_t recv_retired() const;

  // A per-QP counter by name (lib/transport/counters.h lists them); 0 for
  // an unknown name.
  std::uint64_t counter(const char* name) const;
  // Every per-QP counter (scope kQp, include/uroce/stats.h), in list order,
  // each read as counter() reads it: safe while workers run.
  std::vector<Stat> stats() const;

  // The QP's DCQCN state (reaction point). `enabled` false when the device
  // runs without congestion control or the QP has sent nothing yet.
  struct CongestionState {
    bool enabled = false;
    double rate_bps = 0;    // current rate Rc
    double target_bps = 0;  // target rate Rt
    double alpha = 0;
    std::uint64_t cnps = 0; // CNPs that cut the rate
  };
  CongestionState congestion() const;

  ~QueuePair();
  QueuePair(const QueuePair&) = delete;
  QueuePair& operator=(const QueuePair&) = delete;

 private:
  friend struct internal::Access;
  struct Impl;
  QueuePair(Context* ctx, std::unique_ptr<Impl> impl);
  Context* ctx_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace uroce
