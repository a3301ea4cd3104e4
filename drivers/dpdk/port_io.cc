#include "dpdk/port_io.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <deque>
#include <thread>
#include <utility>

#include <sys/mman.h>
#include <unistd.h>

#include <rte_cycles.h>
#include <rte_dev.h>
#include <rte_ethdev.h>
#include <rte_lcore.h>
#include <rte_log.h>
#include <rte_memory.h>
#include <rte_eth_ring.h>
#include <rte_ring.h>

#include "dpdk/rte.h"
#include "log/log.h"
#include "uroce/port.h"
#include "wire/headers.h"
#include "wire/pfc.h"

namespace uroce::dpdk {
namespace {

rte_mbuf* as_mbuf(void* p) { return static_cast<rte_mbuf*>(p); }

// The largest frame taken: a 9000-byte MTU and its Ethernet and VLAN headers.
constexpr std::size_t kMaxFrame = 9022;

// Below this payload size, copying beats attaching external buffers.
constexpr std::uint32_t kZeroCopyFrom = 512;

}  // namespace

PortIo::SegmentCounts& PortIo::new_segment_counts() {
  // Kept for the process's life (reachable here): mbufs freed after their
  // queue is gone still count into them.
  static std::mutex mutex;
  static auto* all = new std::deque<SegmentCounts>;
  std::lock_guard<std::mutex> lock(mutex);
  return all->emplace_back();
}

TscClock::TscClock() : ns_per_cycle_(1e9 / static_cast<double>(rte_get_tsc_hz())) {}

std::uint64_t TscClock::now_ns() { return static_cast<std::uint64_t>(static_cast<double>(rte_rdtsc()) * ns_per_cycle_); }

PortIo::PortIo(PortIo& first, std::uint16_t queue) : PortIo(first.port_, queue, first.ip_, first.neighbors_) {
  std::lock_guard<std::mutex> lock(first.memory_->mutex);
  memory_ = first.memory_;
  memory_->queues.push_back(this);
}

PortIo::PortIo(Port& port, std::uint16_t queue, const std::array<std::uint8_t, 4>& ipv4)
    : PortIo(port, queue, ipv4, std::make_shared<Neighbors>()) {}

PortIo::PortIo(Port& port, std::uint16_t queue, const std::array<std::uint8_t, 4>& ipv4,
               std::shared_ptr<Neighbors> neighbors)
    : port_(port),
      queue_(queue),
      ip_(ipv4),
      neighbors_(std::move(neighbors)),
      memory_(std::make_shared<Memory>()),
      segments_(new_segment_counts()) {
  memory_->queues.push_back(this);
  if (port.rings_torn_down_by_interrupt_thread()) {
    gate_slot_ = std::make_unique<BurstSlot>();
    if (!gate_slot_->gated()) gate_slot_.reset();  // the gate is off: bursts as before it
  }
  if (const RxLoss& loss = port.rx_loss(); loss.probability > 0) {
    rx_loss_threshold_ = static_cast<std::uint64_t>(std::ldexp(loss.probability, 64));
    rx_loss_state_ = loss.seed * 0x9e3779b97f4a7c15ull + queue;
    rx_loss_min_bytes_ = loss.min_bytes;
  }
  rte_ether_addr a{};
  rte_eth_macaddr_get(port.id(), &a);
  std::memcpy(mac_.data(), a.addr_bytes, 6);
}

PortIo::~PortIo() {
  std::lock_guard<std::mutex> lock(memory_->mutex);
  std::erase(memory_->queues, this);
  if (!memory_->queues.empty()) return;
  // The port's last queue: its memory registrations go with it (another
  // port made later in this process registers the same addresses afresh).
  for (Memory::Span& span : memory_->spans) release(span);
  memory_->spans.clear();
}

ibv_gid PortIo::gid() const { return uroce::ipv4_gid(ip_); }

ibv_gid PortIo::link_local() const {
  ibv_gid g{};
  const wire::Ipv6Addr a = wire::ipv6_link_local(mac_.data());
  std::memcpy(g.raw, a.data(), 16);
  return g;
}

void PortIo::count_evictions(NeighborOutcome o) {
  if (o == NeighborOutcome::kEvictedLearned) ++counters_.neighbors_evicted;
  if (o == NeighborOutcome::kEvictedWanted) ++counters_.neighbors_wanted_evicted;
}

void PortIo::add_neighbor(const std::array<std::uint8_t, 4>& ip, const std::array<std::uint8_t, 6>& mac) {
  std::lock_guard<std::mutex> lock(neighbors_->mutex);
  count_evictions(neighbors_->v4.configure(ip, mac));
}

bool PortIo::neighbor(const ibv_gid& gid, std::uint8_t mac[6]) const {
  wire::MacAddr m;
  NeighborState st;
  {
    std::lock_guard<std::mutex> lock(neighbors_->mutex);
    if (is_ipv4_gid(gid)) {
      std::array<std::uint8_t, 4> ip;
      std::memcpy(ip.data(), gid.raw + 12, 4);
      st = neighbors_->v4.state(ip, &m);
    } else {
      std::array<std::uint8_t, 16> ip6;
      std::memcpy(ip6.data(), gid.raw, 16);
      st = neighbors_->v6.state(ip6, &m);
    }
  }
  if (st != NeighborState::kWanted && st != NeighborState::kLearned) return false;
  std::memcpy(mac, m.data(), 6);
  return true;
}

namespace {

// ARP, ICMPv6 (neighbour discovery) and anything neither IPv4 nor IPv6 nor
// VLAN-tagged (MAC Control among them): the port's to answer or count,
// never the engine's.
bool is_control(const std::uint8_t* data, std::uint16_t len) {
  const bool icmp6 = len >= 54 && data[12] == 0x86 && data[13] == 0xdd && data[20] == 58;
  return icmp6 || (len >= 14 && (data[12] != 0x08 || data[13] != 0x00) && (data[12] != 0x86 || data[13] != 0xdd) &&
                   (data[12] != 0x81 || data[13] != 0x00));
}

// A chain the engine takes as it lies: few enough segments, none empty, and
// a first one long enough to tell a RoCE frame from a control frame.
bool passes_in_segments(const rte_mbuf* m) {
  if (m->nb_segs > 1 + engine::RxFrame::kMaxMore || m->data_len < 54) return false;
  for (const rte_mbuf* s = m; s != nullptr; s = s->next) {
    if (s->data_len == 0) return false;
  }
  return !is_control(rte_pktmbuf_mtod(m, const std::uint8_t*), m->data_len);
}

}  // namespace

rte_mbuf* PortIo::linearize(rte_mbuf* m) {
  // Gathered into one mbuf of the pool (sized to the largest frame), which
  // any worker can release.
  const std::uint32_t pkt_len = rte_pktmbuf_pkt_len(m);
  auto* pool = static_cast<rte_mempool*>(port_.pool());
  rte_mbuf* flat = pkt_len <= kMaxFrame ? rte_pktmbuf_alloc(pool) : nullptr;
  auto* dst = flat != nullptr && rte_pktmbuf_tailroom(flat) >= pkt_len
                  ? reinterpret_cast<std::uint8_t*>(rte_pktmbuf_append(flat, static_cast<std::uint16_t>(pkt_len)))
                  : nullptr;
  if (dst == nullptr) {
    ++(flat == nullptr && pkt_len <= kMaxFrame ? counters_.rx_dropped_no_mbuf : counters_.rx_dropped_too_long);
    if (flat != nullptr) rte_pktmbuf_free(flat);
    rte_pktmbuf_free(m);
    return nullptr;
  }
  const void* p = rte_pktmbuf_read(m, 0, pkt_len, dst);
  if (p != dst) std::memcpy(dst, p, pkt_len);
  rte_pktmbuf_free(m);
  ++counters_.rx_linearized;
  return flat;
}

std::uint16_t PortIo::rx_burst(engine::RxFrame* frames, std::uint16_t max) {
  const InBurst in(gate_slot_.get());
  // Requests for addresses being resolved, queued by another thread: sent
  // here, by the queue's owner (one load a burst when there are none).
  if (neighbors_->requests_waiting.load(std::memory_order_relaxed) != 0) [[unlikely]] send_requests();
  if (tx_cleanup_wanted_.load(std::memory_order_relaxed)) [[unlikely]] {
    tx_cleanup_wanted_.store(false, std::memory_order_relaxed);
    rte_eth_tx_done_cleanup(port_.id(), queue_, 0);
  }
  auto** mbufs = reinterpret_cast<rte_mbuf**>(rx_mbufs_.data());
  const std::uint16_t got = rte_eth_rx_burst(port_.id(), queue_, mbufs, std::min<std::uint16_t>(max, 64));
  if (gate_slot_ != nullptr) gate_slot_->moved(got);
  std::uint16_t n = 0;
  for (std::uint16_t i = 0; i < got; ++i) {
    rte_mbuf* m = mbufs[i];
    // A lossy link on purpose (RxLoss): ARP, ND and MAC control pass, and
    // frames shorter than its min_bytes.
    if (rx_loss_threshold_ != 0 && rte_pktmbuf_pkt_len(m) >= rx_loss_min_bytes_ &&
        !is_control(rte_pktmbuf_mtod(m, const std::uint8_t*), m->data_len) && impaired()) [[unlikely]] {
      ++counters_.rx_dropped_impaired;
      rte_pktmbuf_free(m);
      continue;
    }
    if (m->nb_segs > 1) [[unlikely]] {
      if (rte_pktmbuf_pkt_len(m) > kMaxFrame) {
        ++counters_.rx_dropped_too_long;
        rte_pktmbuf_free(m);
        continue;
      }
      if (passes_in_segments(m)) {
        // One copy on RX: the engine reads the headers from a copy and
        // places the payload from the segments.
        engine::RxFrame& f = frames[n++];
        f = engine::RxFrame{rte_pktmbuf_mtod(m, std::uint8_t*), m->data_len, m};
        for (const rte_mbuf* s = m->next; s != nullptr; s = s->next) {
          f.more[f.nmore++] = std::span<const std::uint8_t>(rte_pktmbuf_mtod(s, const std::uint8_t*), s->data_len);
        }
        ++counters_.rx_in_segments;
        continue;
      }
      if ((m = linearize(m)) == nullptr) continue;
    }
    auto* data = rte_pktmbuf_mtod(m, std::uint8_t*);
    const auto len = static_cast<std::uint16_t>(rte_pktmbuf_pkt_len(m));
    if (is_control(data, len)) [[unlikely]] {
      handle_control(data, len);
      rte_pktmbuf_free(m);
      continue;
    }
    frames[n++] = engine::RxFrame{data, len, m};
  }
  return n;
}

bool PortIo::impaired() {
  // splitmix64 (Steele, Lea and Flood 2014): one draw a frame.
  std::uint64_t z = (rx_loss_state_ += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return (z ^ (z >> 31)) < rx_loss_threshold_;
}

void PortIo::rx_release(engine::RxFrame* frames, std::uint16_t n) {
  std::array<rte_mbuf*, 64> done;
  for (std::uint16_t i = 0; i < n;) {
    unsigned k = 0;
    for (; k < done.size() && i < n; ++k, ++i) done[k] = as_mbuf(frames[i].cookie);
    rte_pktmbuf_free_bulk(done.data(), k);
  }
}

std::uint16_t PortIo::tx_heads(wire::TxHead* heads, std::uint16_t n) {
  std::array<rte_mbuf*, 64> m;
  n = std::min<std::uint16_t>(n, static_cast<std::uint16_t>(m.size()));
  if (n == 0) return 0;
  if (rte_pktmbuf_alloc_bulk(static_cast<rte_mempool*>(port_.pool()), m.data(), n) != 0) {
    // The pool is short: what is left, one at a time.
    std::uint16_t got = 0;
    for (; got < n && (m[got] = rte_pktmbuf_alloc(static_cast<rte_mempool*>(port_.pool()))) != nullptr; ++got) {
    }
    if (got < n) ++counters_.tx_dropped_no_mbuf;
    n = got;
  }
  for (std::uint16_t i = 0; i < n; ++i) {
    heads[i] = wire::TxHead{rte_pktmbuf_mtod(m[i], std::uint8_t*), rte_pktmbuf_tailroom(m[i]), m[i]};
  }
  return n;
}

void PortIo::tx_heads_return(const wire::TxHead* heads, std::uint16_t n) {
  for (std::uint16_t i = 0; i < n; ++i) rte_pktmbuf_free(as_mbuf(heads[i].cookie));
}

std::uint16_t PortIo::tx_copy_limit() const {
  return port_.multi_seg_tx() ? static_cast<std::uint16_t>(kZeroCopyFrom - 1) : port_.max_frame();
}

bool PortIo::mark_offloads(void* mbuf, const wire::TxFrame& f) {
  // IPv4 frames whose header checksum the engine left to the port.
  if (!port_.ipv4_checksum_offload() || (f.head.data[f.l3_offset] >> 4) != 4) return false;
  rte_mbuf* m = as_mbuf(mbuf);
  m->ol_flags |= RTE_MBUF_F_TX_IPV4 | RTE_MBUF_F_TX_IP_CKSUM;
  m->tx_offload = rte_mbuf_tx_offload(f.l3_offset, (f.head.data[f.l3_offset] & 0x0fu) * 4u, 0, 0, 0, 0, 0);
  return true;
}

std::uint16_t PortIo::tx_burst(const wire::TxFrame* frames, std::uint16_t n) {
  auto* pool = static_cast<rte_mempool*>(port_.pool());
  std::array<rte_mbuf*, 64> burst;
  std::array<std::uint16_t, 64> origin;  // burst[k] carries frames[origin[k]]
  // What burst[k] adds to the counters once the device takes it: a frame
  // it refuses goes back to the engine, is offered again and counted then.
  struct Tally {
    std::uint32_t copied_bytes = 0;
    std::uint32_t zero_copy_bytes = 0;  // attached from registered memory
    std::uint8_t copied_unregistered = 0;
    std::uint8_t pieces_split = 0;
    bool zero_copy = false;
    bool segment_limit = false;
    bool cksum = false;
  };
  std::array<Tally, 64> tally;
  std::uint16_t built = 0;
  std::uint16_t i = 0;
  for (; i < n && built < burst.size(); ++i) {
    const wire::TxFrame& f = frames[i];
    rte_mbuf* head = as_mbuf(f.head.cookie);
    if (f.frame_bytes() > port_.max_frame() || f.head_len == 0) [[unlikely]] {
      // Larger than the port carries (a path MTU above the port's), or no
      // frame at all: dropped and counted, never offered again, so it
      // cannot block the queue.
      ++counters_.tx_dropped_too_long;
      rte_pktmbuf_free(head);
      continue;
    }
    // The head mbuf holds what the engine wrote: headers, and a short
    // payload with its pad and ICRC.
    head->data_len = f.head_len;
    head->pkt_len = f.head_len;
    Tally& t = tally[built];
    t = Tally{};
    if (f.npieces == 0) {
      t.copied_bytes = f.copied;
      t.cksum = mark_offloads(head, f);
      origin[built] = i;
      burst[built++] = head;
      continue;
    }
    // Zero copy: each payload piece as external buffers pointing into the
    // region, one per IOVA-contiguous run of its pages (one in VA mode),
    // then the pad and ICRC in a tail mbuf. Too many segments for the
    // port: the payload is copied into one.
    std::array<int, wire::TxFrame::kMaxPieces> slots;
    std::array<const IovaTable*, wire::TxFrame::kMaxPieces> tables;
    unsigned nsegs = 1;
    for (int k = 0; k < f.npieces; ++k) {
      const auto* data = f.pieces[k].data();
      const std::size_t len = f.pieces[k].size();
      slots[k] = registered(data, len, tables[k]);
      nsegs += slots[k] < 0 ? 1u : tables[k]->segments(reinterpret_cast<std::uintptr_t>(data), len);
    }
    std::array<rte_mbuf*, 2 * wire::TxFrame::kMaxPieces + 1> segs;
    const bool copy_all = 1 + nsegs > port_.max_tx_segments() || nsegs > segs.size();
    if (copy_all) [[unlikely]] nsegs = 2;
    if (rte_pktmbuf_alloc_bulk(pool, segs.data(), nsegs) != 0) {
      ++counters_.tx_dropped_no_mbuf;
      break;  // the frame stays with the engine, its head too
    }
    if (copy_all) [[unlikely]] {
      for (int k = 0; k < f.npieces; ++k) {
        std::memcpy(rte_pktmbuf_append(segs[0], static_cast<std::uint16_t>(f.pieces[k].size())), f.pieces[k].data(),
                    f.pieces[k].size());
      }
      t.segment_limit = true;
      t.copied_bytes = f.payload_in_pieces();
    } else {
      unsigned s = 0;
      for (int k = 0; k < f.npieces; ++k) {
        auto* data = const_cast<std::uint8_t*>(f.pieces[k].data());
        std::size_t len = f.pieces[k].size();
        if (slots[k] < 0) [[unlikely]] {
          // Memory the port has no registration (DMA mapping) for: the NIC
          // must not be sent to it. Copied into the segment (its buffer
          // holds a whole frame).
          std::memcpy(rte_pktmbuf_append(segs[s++], static_cast<std::uint16_t>(len)), data, len);
          ++t.copied_unregistered;
          continue;
        }
        t.zero_copy_bytes += static_cast<std::uint32_t>(len);
        const auto row = static_cast<std::size_t>(slots[k]);
        auto& attached = segments_.attached[row];
        unsigned runs = 0;
        for (std::size_t run; len > 0; data += run, len -= run, ++runs) {
          const std::uint64_t iova = tables[k]->lookup(reinterpret_cast<std::uintptr_t>(data), len, run);
          rte_mbuf* seg = segs[s++];
          // Its own shared info, at the start of the segment's own buffer
          // (unused while it points into the region), with a reference count
          // of 1: then neither the attach nor the free takes a shared
          // atomic. The free callback counts the segment freed on this
          // queue, so memory is unregistered (and unmapped) only after the
          // frames that point into it are gone (unregister_memory).
          auto* shinfo = static_cast<rte_mbuf_ext_shared_info*>(seg->buf_addr);
          shinfo->free_cb = on_segment_free;
          shinfo->fcb_opaque = &segments_.freed[row];
          rte_mbuf_ext_refcnt_set(shinfo, 1);
          rte_pktmbuf_attach_extbuf(seg, data, iova, static_cast<std::uint16_t>(run), shinfo);
          attached.store(attached.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
          seg->data_len = static_cast<std::uint16_t>(run);
          seg->pkt_len = static_cast<std::uint16_t>(run);
        }
        if (runs > 1) ++t.pieces_split;
      }
    }
    rte_mbuf* tail = segs[nsegs - 1];
    std::memcpy(rte_pktmbuf_append(tail, f.trailer_len), f.trailer.data(), f.trailer_len);
    // Linked by hand: the chain is built once, its length known.
    rte_mbuf* prev = head;
    for (unsigned k = 0; k < nsegs; ++k) {
      prev->next = segs[k];
      prev = segs[k];
    }
    head->nb_segs = static_cast<std::uint16_t>(1 + nsegs);
    head->pkt_len = f.frame_bytes();
    // A zero-copy frame: at least one piece left from the region itself.
    t.zero_copy = t.zero_copy_bytes > 0;
    t.cksum = mark_offloads(head, f);
    origin[built] = i;
    burst[built++] = head;
  }
  std::uint16_t sent = 0;
  {
    const InBurst in(gate_slot_.get());
    sent = rte_eth_tx_burst(port_.id(), queue_, burst.data(), built);
  }
  if (gate_slot_ != nullptr) gate_slot_->moved(sent);
  for (std::uint16_t k = 0; k < sent; ++k) {
    const Tally& t = tally[k];
    counters_.tx_copied_bytes += t.copied_bytes;
    counters_.tx_zero_copy_frames += t.zero_copy;
    counters_.tx_zero_copy_bytes += t.zero_copy_bytes;
    counters_.tx_copied_unregistered += t.copied_unregistered;
    counters_.tx_pieces_split += t.pieces_split;
    counters_.tx_copied_segment_limit += t.segment_limit;
    counters_.tx_ipv4_checksum_offloaded += t.cksum;
  }
  // Taken: every frame before the first one the device refused (dropped
  // ones included); all that were looked at when it took everything. The
  // refused ones go back to the engine with their heads, unchained.
  for (std::uint16_t k = sent; k < built; ++k) {
    rte_mbuf* head = burst[k];
    if (head->next != nullptr) rte_pktmbuf_free(head->next);
    head->next = nullptr;
    head->nb_segs = 1;
    head->pkt_len = head->data_len;
  }
  return sent < built ? origin[sent] : i;
}

namespace {

// The page-aligned span covering [addr, addr + len).
std::pair<std::uint8_t*, std::size_t> page_span(void* addr, std::size_t len) {
  const auto page = static_cast<std::uintptr_t>(sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<std::uintptr_t>(addr) & ~(page - 1);
  const auto end = (reinterpret_cast<std::uintptr_t>(addr) + len + page - 1) & ~(page - 1);
  return {reinterpret_cast<std::uint8_t*>(begin), end - begin};
}

}  // namespace

namespace {
// This thread registered itself with EAL through a port (not EAL's own).
thread_local bool registered_here = false;
}  // namespace

void PortIo::thread_start() {
  if (registered_here || rte_lcore_id() != LCORE_ID_ANY) return;
  // Out of lcore ids (RTE_MAX_LCORE) the thread runs without a cache.
  if (rte_thread_register() == 0) registered_here = true;
}

void PortIo::thread_stop() {
  if (!registered_here) return;
  rte_thread_unregister();
  registered_here = false;
}

void PortIo::on_segment_free(void* /*addr*/, void* opaque) {
  static_cast<std::atomic<std::uint64_t>*>(opaque)->fetch_add(1, std::memory_order_relaxed);
}

int PortIo::registered(const std::uint8_t* p, std::size_t len, const IovaTable*& table) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  const std::uint32_t generation = memory_->generation.load(std::memory_order_acquire);
  if (generation == hit_generation_ && a >= hit_lo_ && a + len <= hit_hi_) [[likely]] {
    table = hit_table_;
    return hit_slot_;
  }
  const std::uint32_t used = memory_->used.load(std::memory_order_acquire);
  for (std::uint32_t i = 0; i < used; ++i) {
    const std::uintptr_t hi = memory_->hi[i].load(std::memory_order_acquire);
    const std::uintptr_t lo = memory_->lo[i].load(std::memory_order_relaxed);
    if (hi != 0 && a >= lo && a + len <= hi) {
      hit_lo_ = lo;
      hit_hi_ = hi;
      hit_slot_ = static_cast<int>(i);
      hit_table_ = memory_->tables[i].load(std::memory_order_relaxed);
      hit_generation_ = generation;
      table = hit_table_;
      return hit_slot_;
    }
  }
  return -1;
}

std::vector<std::pair<PortIo*, std::uint64_t>> PortIo::tx_marks(int slot) const {
  std::vector<std::pair<PortIo*, std::uint64_t>> marks;
  for (PortIo* q : memory_->queues) {
    marks.emplace_back(q, q->segments_.attached[static_cast<std::size_t>(slot)].load(std::memory_order_acquire));
  }
  return marks;
}

bool PortIo::drained(int slot, const std::vector<std::pair<PortIo*, std::uint64_t>>& marks, bool wait) {
  // Segments are freed in the order they were sent (a queue's descriptors
  // complete in order): once a queue has freed as many of the row's as it
  // had attached at the mark, the older ones are gone. Only a queue's own
  // engine may clean up its sent descriptors (this runs outside control
  // calls, beside the engines), so it is asked to in its next rx_burst.
  if (slot < 0) return true;
  const auto row = static_cast<std::size_t>(slot);
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(wait ? 200 : 0);
  for (;;) {
    bool done = true;
    for (const auto& [q, attached] : marks) {
      if (std::find(memory_->queues.begin(), memory_->queues.end(), q) == memory_->queues.end()) continue;  // gone
      if (q->segments_.freed[row].load(std::memory_order_acquire) >= attached) continue;
      if (wait) q->tx_cleanup_wanted_.store(true, std::memory_order_relaxed);
      done = done && q->segments_.freed[row].load(std::memory_order_acquire) >= attached;
    }
    if (done) return true;
    if (std::chrono::steady_clock::now() >= until) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

void PortIo::release(Memory::Span& span) {
  if (span.slot >= 0) {
    memory_->held[static_cast<std::size_t>(span.slot)] = false;
    memory_->tables[static_cast<std::size_t>(span.slot)].store(nullptr, std::memory_order_relaxed);
  }
  span.slot = -1;
  auto* base = reinterpret_cast<void*>(span.lo);
  const std::size_t bytes = span.hi - span.lo;
  if (span.ours) {
    rte_eth_dev_info info{};
    if (span.mapped && rte_eth_dev_info_get(port_.id(), &info) == 0 && info.device != nullptr) {
      for (const IovaTable::Run& r : span.table->runs()) {
        dma_unmap(info.device, reinterpret_cast<void*>(r.va), r.iova, r.bytes);
      }
    }
    rte_extmem_unregister(base, bytes);
  }
  if (span.iova_window != 0) {
    give_iova(span.iova_window, bytes);
    span.iova_window = 0;
  }
  if (span.locked) {
    // mlock does not nest: pages another span still covers stay locked.
    bool shared = false;
    for (const Memory::Span& s : memory_->spans) {
      shared = shared || (&s != &span && s.locked && s.lo < span.hi && span.lo < s.hi);
    }
    if (!shared) munlock(base, bytes);
  }
}

void PortIo::reap_retired() {
  auto& spans = memory_->spans;
  for (auto it = spans.begin(); it != spans.end();) {
    if (it->retired && drained(it->slot, it->marks, false)) {
      release(*it);
      it = spans.erase(it);
    } else {
      ++it;
    }
  }
}

void PortIo::register_memory(void* addr, std::size_t len) {
  const auto [base, bytes] = page_span(addr, len);
  const auto lo = reinterpret_cast<std::uintptr_t>(base);
  const std::uintptr_t hi = lo + bytes;
  Memory& m = *memory_;
  std::lock_guard<std::mutex> lock(m.mutex);
  reap_retired();
  for (Memory::Span& s : m.spans) {
    if (!s.retired && s.lo <= lo && hi <= s.hi) {
      ++s.users;
      ++counters_.regions_in_registered_memory;
      return;
    }
  }
  Memory::Span span;
  span.lo = lo;
  span.hi = hi;
  span.users = 1;
  const auto page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  // IOVA as PA: the pages must stay where they are now (resident; a
  // hugepage or a locked page is not swapped, and the kernel migrates a
  // locked one only when vm.compact_unevictable_allowed is 1: see
  // docs/nic-setup.md), and their addresses are read once.
  // A table without one per page (IOVA = VA, or an IOVA of ours) ends its
  // lookups at pages where the device needs it (Port::tx_split_pages).
  const auto for_device = [&](std::shared_ptr<IovaTable> t) {
    if (port_.tx_split_pages()) t->split_lookups_at(page);
    return t;
  };
  std::string why;
  if (!m.iova_map->identity()) {
    if (mlock(base, bytes) == 0) {
      span.locked = true;
      span.table = IovaTable::read(*m.iova_map, lo, bytes, page, why);
    } else {
      why = std::string("cannot lock it in memory: ") + std::strerror(errno) + " (raise RLIMIT_MEMLOCK: ulimit -l)";
    }
  } else {
    span.table = for_device(std::make_shared<IovaTable>(lo, bytes));
  }
  if (!span.table) {
    // Its frames are copied: the device is never sent to an address that
    // may be wrong.
    ++counters_.regions_iova_unknown;
    logger().warn("port {}: memory at {} ({} bytes) will be copied into frames, not sent zero-copy: its device "
                  "addresses are unknown: {}",
                  port_.id(), static_cast<const void*>(base), bytes, why);
    m.spans.push_back(span);
    return;
  }
  std::vector<rte_iova_t> iovas(span.table->page_iovas().begin(), span.table->page_iovas().end());
  const int rc = rte_extmem_register(base, bytes, iovas.empty() ? nullptr : iovas.data(),
                                     static_cast<unsigned>(iovas.size()), page);
  if (rc == 0) {
    span.ours = true;
    rte_eth_dev_info info{};
    if (rte_eth_dev_info_get(port_.id(), &info) != 0 || info.device == nullptr) {
      span.usable = true;
    } else {
      // One mapping per IOVA-contiguous run (the whole span in VA mode).
      // In VA mode a refusal has a way out (an IOVA of ours, below), so
      // EAL's own error lines about it would only mislead: EAL logs above
      // critical are held back for that one call.
      const std::vector<IovaTable::Run> runs = span.table->runs();
      std::size_t done = 0;
      int map_errno = 0;
      const bool quiet = span.table->identity();
      const int eal_level = rte_log_get_level(RTE_LOGTYPE_EAL);
      if (quiet) rte_log_set_level(RTE_LOGTYPE_EAL, RTE_LOG_CRIT);
      for (; done < runs.size(); ++done) {
        const IovaTable::Run& r = runs[done];
        if (dma_map(info.device, reinterpret_cast<void*>(r.va), r.iova, r.bytes) != 0) {
          map_errno = rte_errno;
          break;
        }
      }
      if (quiet && eal_level >= 0) rte_log_set_level(RTE_LOGTYPE_EAL, static_cast<std::uint32_t>(eal_level));
      if (done == runs.size()) {
        ++counters_.regions_dma_mapped;
        span.usable = span.mapped = true;
      } else if (done == 0 && map_errno == ENOTSUP) {
        ++counters_.regions_dma_unneeded;  // a virtual device reads host memory itself
        span.usable = true;
      } else {
        for (std::size_t k = 0; k < done; ++k) {
          dma_unmap(info.device, reinterpret_cast<void*>(runs[k].va), runs[k].iova, runs[k].bytes);
        }
        // IOVA as VA, but the IOMMU cannot reach the span's own addresses
        // (a 39-bit IOMMU and memory above 2^39, where heaps and mmaps
        // live): mapped instead at an IOVA of our choosing, below 4 GiB.
        if (span.table->identity() && done == 0) {
          const std::uint64_t iova = take_iova(bytes);
          if (iova != 0 && dma_map(info.device, base, iova, bytes) == 0) {
            span.table = for_device(std::make_shared<IovaTable>(lo, bytes, iova));
            span.iova_window = iova;
            span.usable = span.mapped = true;
            ++counters_.regions_dma_mapped;
            ++counters_.regions_iova_chosen;
          } else {
            if (iova != 0) give_iova(iova, bytes);
            logger().warn("port {}: memory at {} ({} bytes) will be copied into frames: the device cannot map it "
                          "({}), at its address or at one below 4 GiB",
                          port_.id(), static_cast<const void*>(base), bytes, rte_strerror(map_errno));
          }
        }
      }
    }
  } else if (rte_errno == EEXIST) {
    // Inside memory DPDK knows already (its own heap), not overlapping ours: usable.
    bool overlaps = false;
    for (const Memory::Span& s : m.spans) overlaps = overlaps || (s.lo < hi && lo < s.hi);
    const rte_memseg_list* msl = rte_mem_virt2memseg_list(base);
    span.usable = !overlaps && msl != nullptr && msl == rte_mem_virt2memseg_list(static_cast<std::uint8_t*>(base) + bytes - 1);
  }
  if (span.usable) {
    for (std::size_t i = 0; i < Memory::kUsable; ++i) {
      if (m.held[i]) continue;
      m.held[i] = true;
      span.slot = static_cast<int>(i);
      m.tables[i].store(span.table.get(), std::memory_order_relaxed);
      m.lo[i].store(lo, std::memory_order_relaxed);
      m.hi[i].store(hi, std::memory_order_release);
      if (m.used.load(std::memory_order_relaxed) <= i) m.used.store(static_cast<std::uint32_t>(i + 1), std::memory_order_release);
      break;
    }
    span.usable = span.slot >= 0;
  }
  if (span.usable) ++counters_.regions_registered;
  else ++counters_.regions_register_failed;
  m.spans.push_back(span);
}

int PortIo::dma_map(rte_device* device, void* va, std::uint64_t iova, std::size_t bytes) {
  const DmaMapper& d = memory_->dma;
  return d.map != nullptr ? d.map(d.arg, va, iova, bytes) : rte_dev_dma_map(device, va, iova, bytes);
}

int PortIo::dma_unmap(rte_device* device, void* va, std::uint64_t iova, std::size_t bytes) {
  const DmaMapper& d = memory_->dma;
  return d.unmap != nullptr ? d.unmap(d.arg, va, iova, bytes) : rte_dev_dma_unmap(device, va, iova, bytes);
}

void PortIo::use_dma_mapper(const DmaMapper& mapper) {
  std::lock_guard<std::mutex> lock(memory_->mutex);
  memory_->dma = mapper;
}

std::uint64_t PortIo::take_iova(std::size_t bytes) {
  // First fit among the free ranges (memory->mutex held).
  auto& free = memory_->iova_free;
  for (auto it = free.begin(); it != free.end(); ++it) {
    const auto [start, end] = *it;
    if (end - start < bytes) continue;
    free.erase(it);
    if (end - start > bytes) free.emplace(start + bytes, end);
    return start;
  }
  return 0;
}

void PortIo::give_iova(std::uint64_t start, std::size_t bytes) {
  auto& free = memory_->iova_free;
  std::uint64_t end = start + bytes;
  // Joined with the free ranges on either side.
  if (auto next = free.find(end); next != free.end()) {
    end = next->second;
    free.erase(next);
  }
  auto prev = free.lower_bound(start);
  if (prev != free.begin() && std::prev(prev)->second == start) {
    std::prev(prev)->second = end;
    return;
  }
  free.emplace(start, end);
}

void PortIo::use_iova_map(std::shared_ptr<IovaMap> map) {
  std::lock_guard<std::mutex> lock(memory_->mutex);
  memory_->iova_map = std::move(map);
}

void PortIo::unregister_memory(void* addr, std::size_t len) {
  const auto [base, bytes] = page_span(addr, len);
  const auto lo = reinterpret_cast<std::uintptr_t>(base);
  const std::uintptr_t hi = lo + bytes;
  Memory& m = *memory_;
  std::lock_guard<std::mutex> lock(m.mutex);
  auto it = std::find_if(m.spans.begin(), m.spans.end(),
                         [&](const Memory::Span& s) { return !s.retired && s.lo <= lo && hi <= s.hi; });
  if (it != m.spans.end() && --it->users == 0) {
    if (it->slot >= 0) {
      // Out of the table first, then every frame that may point into it
      // drained. No engine attaches new segments into it meanwhile: every
      // region on it left the MR table in a control call before this. The row
      // stays held (its counts) until then.
      m.hi[static_cast<std::size_t>(it->slot)].store(0, std::memory_order_release);
      m.generation.fetch_add(1, std::memory_order_acq_rel);
      it->usable = false;
      it->marks = tx_marks(it->slot);
    }
    if (drained(it->slot, it->marks, true)) {
      release(*it);
      m.spans.erase(it);
    } else {
      // The NIC may still read these pages: the registration and DMA
      // mapping stay until its frames are freed (reap_retired); memory
      // registered over them meanwhile is copied, never attached.
      ++counters_.memory_drain_failed;
      it->retired = true;
    }
  }
  reap_retired();
}

bool PortIo::count_mac_control(const std::uint8_t* frame, std::uint16_t len) {
  // Flow control is the MAC's job on both sides of the link: a NIC acts on
  // PAUSE and PFC frames in hardware and does not pass them up, so one here
  // came through a virtual device or a NIC set to forward them. Software
  // cannot pause the NIC's transmit queue in time, so they are counted,
  // to show the link is pausing, and dropped.
  wire::PauseRequest req;
  switch (wire::parse_mac_control(std::span<const std::uint8_t>(frame, len), req)) {
    case wire::MacControl::kNone: return false;
    case wire::MacControl::kPause: ++counters_.rx_pause; break;
    case wire::MacControl::kPfc: ++counters_.rx_pfc; break;
    case wire::MacControl::kOther: ++counters_.rx_mac_control_other; break;
    case wire::MacControl::kMalformed: ++counters_.rx_mac_control_malformed; break;
  }
  return true;
}

bool PortIo::handle_control(const std::uint8_t* frame, std::uint16_t len) {
  // MAC Control first, before anything reads further into the frame (a
  // truncated one may end right after its ether_type).
  if (count_mac_control(frame, len)) return false;
  if (len >= 54 && frame[12] == 0x86 && frame[13] == 0xdd) return handle_icmp6(frame, len);
  if (len < 14 + sizeof(wire::ArpHdr) || frame[12] != 0x08 || frame[13] != 0x06) {
    ++counters_.rx_other;
    return false;
  }
  wire::ArpHdr arp;
  std::memcpy(&arp, frame + 14, sizeof arp);
  if (arp.htype.get() != 1 || arp.ptype.get() != wire::kEtherTypeIpv4 || arp.hlen != 6 || arp.plen != 4) return false;
  // RFC 826: a sender we know or are resolving is merged, whatever the
  // target; one that asks for our address is learned (the bounded tier), as
  // we are about to answer it. A reply we did not ask for is refused.
  // 0.0.0.0 is a probe's sender (RFC 5227 2.1.1), no address to learn.
  const bool request_for_us = arp.oper.get() == wire::kArpRequest && arp.tpa == ip_;
  if (arp.spa != wire::Ipv4Addr{}) {
    std::lock_guard<std::mutex> lock(neighbors_->mutex);
    const NeighborOutcome o = request_for_us ? neighbors_->v4.learn(arp.spa, arp.sha)
                                             : neighbors_->v4.merge(arp.spa, arp.sha);
    count_evictions(o);
    if (arp.oper.get() == wire::kArpReply) {
      ++(o == NeighborOutcome::kMissed ? counters_.neighbors_refused : counters_.arp_replies_learned);
    }
  }
  if (request_for_us) {
    send_arp(wire::kArpReply, arp.sha, arp.spa);
    ++counters_.arp_requests_answered;
  }
  return true;
}

void PortIo::send_arp(std::uint16_t oper, const std::array<std::uint8_t, 6>& dst_mac,
                      const std::array<std::uint8_t, 4>& dst_ip) {
  rte_mbuf* m = rte_pktmbuf_alloc(static_cast<rte_mempool*>(port_.pool()));
  if (m == nullptr) return;
  auto* p = reinterpret_cast<std::uint8_t*>(rte_pktmbuf_append(m, 60));
  std::memset(p, 0, 60);
  wire::EthHdr eth;
  eth.dst = oper == wire::kArpRequest ? wire::MacAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff} : dst_mac;
  eth.src = mac_;
  eth.ether_type.set(wire::kEtherTypeArp);
  std::memcpy(p, &eth, sizeof eth);
  wire::ArpHdr arp;
  arp.htype.set(1);
  arp.ptype.set(wire::kEtherTypeIpv4);
  arp.hlen = 6;
  arp.plen = 4;
  arp.oper.set(oper);
  arp.sha = mac_;
  arp.spa = ip_;
  arp.tha = oper == wire::kArpRequest ? wire::MacAddr{} : dst_mac;
  arp.tpa = dst_ip;
  std::memcpy(p + 14, &arp, sizeof arp);
  if (rte_eth_tx_burst(port_.id(), queue_, &m, 1) != 1) rte_pktmbuf_free(m);
}

namespace {

// ICMPv6 checksum over the IPv6 pseudo-header and the message (RFC 4443 2.3).
std::uint16_t icmp6_checksum(const std::uint8_t* src, const std::uint8_t* dst, const std::uint8_t* msg,
                             std::size_t len) {
  std::uint32_t sum = 0;
  auto add = [&sum](const std::uint8_t* p, std::size_t n) {
    for (std::size_t i = 0; i + 1 < n; i += 2) sum += static_cast<std::uint32_t>(p[i] << 8 | p[i + 1]);
    if (n & 1) sum += static_cast<std::uint32_t>(p[n - 1] << 8);
  };
  add(src, 16);
  add(dst, 16);
  sum += static_cast<std::uint32_t>(len);
  sum += 58;
  add(msg, len);
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return static_cast<std::uint16_t>(~sum);
}

constexpr std::uint8_t kNs = 135;
constexpr std::uint8_t kNa = 136;

}  // namespace

bool PortIo::handle_icmp6(const std::uint8_t* frame, std::uint16_t len) {
  // Neighbour solicitation or advertisement (RFC 4861 4.3, 4.4): hop limit
  // 255, at least 24 bytes of message.
  const std::uint8_t* ip = frame + 14;
  const std::uint8_t* icmp = ip + 40;
  const std::size_t mlen = static_cast<std::size_t>(ip[4] << 8 | ip[5]);
  if (ip[6] != 58 || ip[7] != 255 || mlen < 24 || 54 + mlen > len) {
    ++counters_.rx_other;
    return false;
  }
  if (icmp6_checksum(ip + 8, ip + 24, icmp, mlen) != 0) {
    ++counters_.rx_other;
    return false;
  }
  ibv_gid target{};
  std::memcpy(target.raw, icmp + 8, 16);
  const ibv_gid mine = link_local();
  // The link-layer address option (source for NS, target for NA).
  std::array<std::uint8_t, 6> lla{};
  bool have_lla = false;
  for (std::size_t off = 24; off + 8 <= mlen; off += static_cast<std::size_t>(icmp[off + 1]) * 8) {
    if (icmp[off + 1] == 0) break;
    if ((icmp[off] == 1 || icmp[off] == 2) && icmp[off + 1] == 1) {
      std::memcpy(lla.data(), icmp + off + 2, 6);
      have_lla = true;
    }
  }
  if (icmp[0] == kNs && std::memcmp(target.raw, mine.raw, 16) == 0) {
    ibv_gid from{};
    std::memcpy(from.raw, ip + 8, 16);
    std::array<std::uint8_t, 6> from_mac;
    std::memcpy(from_mac.data(), frame + 6, 6);
    // The solicitor is learned (the bounded tier), as we answer it. From
    // the unspecified address (DAD) there is nothing to learn (RFC 4861 7.2.3).
    std::array<std::uint8_t, 16> key;
    std::memcpy(key.data(), from.raw, 16);
    if (have_lla && key != wire::Ipv6Addr{}) {
      std::lock_guard<std::mutex> lock(neighbors_->mutex);
      count_evictions(neighbors_->v6.learn(key, lla));
    }
    send_nd(false, mine, from, have_lla ? lla : from_mac);
    ++counters_.nd_solicitations_answered;
    return true;
  }
  if (icmp[0] == kNa && have_lla) {
    // Taken for a target being resolved or known; an advertisement for any
    // other is ignored (RFC 4861 7.2.5), else a flood of them fills the table.
    std::array<std::uint8_t, 16> key;
    std::memcpy(key.data(), target.raw, 16);
    std::lock_guard<std::mutex> lock(neighbors_->mutex);
    const NeighborOutcome o = neighbors_->v6.merge(key, lla);
    ++(o == NeighborOutcome::kMissed ? counters_.neighbors_refused : counters_.nd_advertisements_learned);
    return true;
  }
  ++counters_.rx_other;
  return false;
}

void PortIo::send_nd(bool solicit, const ibv_gid& target, const ibv_gid& to, const std::array<std::uint8_t, 6>& to_mac) {
  rte_mbuf* m = rte_pktmbuf_alloc(static_cast<rte_mempool*>(port_.pool()));
  if (m == nullptr) return;
  constexpr std::size_t kMsg = 32;  // type, code, checksum, flags, target, one 8-byte option
  auto* p = reinterpret_cast<std::uint8_t*>(rte_pktmbuf_append(m, 14 + 40 + kMsg));
  std::memset(p, 0, 14 + 40 + kMsg);
  const ibv_gid src = link_local();
  ibv_gid dst = to;
  std::array<std::uint8_t, 6> dst_mac = to_mac;
  if (solicit) {
    // The solicited-node group ff02::1:ffXX:XXXX and its Ethernet address.
    dst = ibv_gid{};
    dst.raw[0] = 0xff;
    dst.raw[1] = 0x02;
    dst.raw[11] = 0x01;
    dst.raw[12] = 0xff;
    std::memcpy(dst.raw + 13, target.raw + 13, 3);
    dst_mac = {0x33, 0x33, 0xff, target.raw[13], target.raw[14], target.raw[15]};
  }
  std::memcpy(p, dst_mac.data(), 6);
  std::memcpy(p + 6, mac_.data(), 6);
  p[12] = 0x86;
  p[13] = 0xdd;
  std::uint8_t* ip = p + 14;
  ip[0] = 0x60;
  ip[5] = kMsg;
  ip[6] = 58;
  ip[7] = 255;
  std::memcpy(ip + 8, src.raw, 16);
  std::memcpy(ip + 24, dst.raw, 16);
  std::uint8_t* icmp = ip + 40;
  icmp[0] = solicit ? kNs : kNa;
  if (!solicit) icmp[4] = 0x60;  // Solicited, Override
  std::memcpy(icmp + 8, target.raw, 16);
  icmp[24] = solicit ? 1 : 2;  // source / target link-layer address
  icmp[25] = 1;
  std::memcpy(icmp + 26, mac_.data(), 6);
  const std::uint16_t sum = icmp6_checksum(ip + 8, ip + 24, icmp, kMsg);
  icmp[2] = static_cast<std::uint8_t>(sum >> 8);
  icmp[3] = static_cast<std::uint8_t>(sum);
  if (rte_eth_tx_burst(port_.id(), queue_, &m, 1) != 1) rte_pktmbuf_free(m);
}

PacketIo::Resolution PortIo::resolve(const ibv_gid& gid, std::uint8_t mac[6], bool ask) {
  // Our own address: a QP connected to another QP of this device
  // (loopback, as RNICs allow) sends to our own MAC. Only the IPv4 GID: a
  // link-local GID names a MAC, and virtual ports may share one (net_ring
  // ports all have 00:00:00:00:00:00), so it is resolved on the link.
  if (const ibv_gid own = this->gid(); std::memcmp(own.raw, gid.raw, 16) == 0) {
    std::memcpy(mac, this->mac().data(), 6);
    return Resolution::kKnown;
  }
  if (is_ipv4_gid(gid)) {
    std::array<std::uint8_t, 4> ip;
    std::memcpy(ip.data(), gid.raw + 12, 4);
    return resolve_on_link(ip, gid, mac, ask);
  }
  std::array<std::uint8_t, 16> ip6;
  std::memcpy(ip6.data(), gid.raw, 16);
  return resolve_on_link(ip6, gid, mac, ask);
}

template <std::size_t N>
PacketIo::Resolution PortIo::resolve_on_link(const std::array<std::uint8_t, N>& ip, const ibv_gid& gid,
                                             std::uint8_t mac[6], bool ask) {
  auto& table = neighbors_->table(ip);
  std::lock_guard<std::mutex> lock(neighbors_->mutex);
  wire::MacAddr m;
  // A learned entry found here is promoted to wanted (we talk to it). The
  // evictions that and want() make go uncounted: any thread calls this, and
  // the counters are the queue owner's.
  if (table.lookup(ip, m) != NeighborOutcome::kMissed) {
    std::memcpy(mac, m.data(), 6);
    return Resolution::kKnown;
  }
  if (!ask) return Resolution::kPending;
  // Pending from the first request on, so that the answer is taken and
  // unasked ones are not (RFC 4861 7.2.5).
  table.want(ip);
  if (neighbors_->requests.size() >= Neighbors::kMaxRequests) {
    ++neighbors_->requests_dropped;
    return Resolution::kPending;
  }
  neighbors_->requests.push_back(gid);
  neighbors_->requests_waiting.store(static_cast<std::uint32_t>(neighbors_->requests.size()), std::memory_order_release);
  return Resolution::kPending;
}

void PortIo::abandon(const ibv_gid& gid) {
  std::lock_guard<std::mutex> lock(neighbors_->mutex);
  if (is_ipv4_gid(gid)) {
    std::array<std::uint8_t, 4> ip;
    std::memcpy(ip.data(), gid.raw + 12, 4);
    neighbors_->v4.give_up(ip);
  } else {
    std::array<std::uint8_t, 16> ip6;
    std::memcpy(ip6.data(), gid.raw, 16);
    neighbors_->v6.give_up(ip6);
  }
}

void PortIo::send_requests() {
  std::array<ibv_gid, Neighbors::kMaxRequests> out;
  std::size_t n = 0;
  {
    std::lock_guard<std::mutex> lock(neighbors_->mutex);
    n = neighbors_->requests.size();
    std::copy(neighbors_->requests.begin(), neighbors_->requests.end(), out.begin());
    neighbors_->requests.clear();
    neighbors_->requests_waiting.store(0, std::memory_order_relaxed);
    counters_.resolve_requests_dropped += std::exchange(neighbors_->requests_dropped, 0);
  }
  for (std::size_t i = 0; i < n; ++i) {
    const ibv_gid& gid = out[i];
    if (is_ipv4_gid(gid)) {
      std::array<std::uint8_t, 4> ip;
      std::memcpy(ip.data(), gid.raw + 12, 4);
      send_arp(wire::kArpRequest, {}, ip);
    } else {
      send_nd(true, gid, gid, {});
    }
    ++counters_.resolve_requests_sent;
  }
}

bool create_ring_pair(const char* name, std::uint16_t& port_a, std::uint16_t& port_b, std::string& error,
                      std::uint16_t queues) {
  const std::string base = name;
  std::vector<rte_ring*> ab(queues);
  std::vector<rte_ring*> ba(queues);
  for (std::uint16_t q = 0; q < queues; ++q) {
    const std::string suffix = queues == 1 ? "" : std::to_string(q);
    const int socket = static_cast<int>(rte_socket_id());
    ab[q] = rte_ring_create((base + "_ab" + suffix).c_str(), 4096, socket, RING_F_SP_ENQ | RING_F_SC_DEQ);
    ba[q] = rte_ring_create((base + "_ba" + suffix).c_str(), 4096, socket, RING_F_SP_ENQ | RING_F_SC_DEQ);
    if (ab[q] == nullptr || ba[q] == nullptr) {
      error = std::string("cannot create rings: ") + rte_strerror(rte_errno);
      return false;
    }
  }
  const auto socket = static_cast<unsigned>(rte_socket_id());
  const int a = rte_eth_from_rings((base + "_a").c_str(), ba.data(), queues, ab.data(), queues, socket);
  const int b = rte_eth_from_rings((base + "_b").c_str(), ab.data(), queues, ba.data(), queues, socket);
  if (a < 0 || b < 0) {
    error = std::string("cannot create net_ring ports: ") + rte_strerror(rte_errno);
    return false;
  }
  port_a = static_cast<std::uint16_t>(a);
  port_b = static_cast<std::uint16_t>(b);
  return true;
}

}  // namespace uroce::dpdk
