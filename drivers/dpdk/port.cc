#include "dpdk/port.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <cstring>

#include "dpdk/eal.h"
#include "dpdk/rte.h"
#include "log/log.h"

namespace uroce::dpdk {
namespace {

rte_mempool* as_pool(void* p) { return static_cast<rte_mempool*>(p); }

std::string errno_text(int rc) { return rte_strerror(rc < 0 ? -rc : rc); }

std::string device_name(std::uint16_t port) {
  char name[RTE_ETH_NAME_MAX_LEN] = {};
  return rte_eth_dev_get_name_by_port(port, name) == 0 ? name : "?";
}

// 802.1Qbb on `priority`, both ways (RTE_ETH_FC_FULL: the port sends PFC
// frames for it when its receive buffer fills, and holds that priority's
// transmission when paused). Thresholds and pause time are taken from the
// port's link-level settings where it reports them: their units and bounds
// are the device's own (ixgbe counts KB of its receive buffer and refuses
// 0), so the driver's values are the only safe guess. Returns what
// rte_eth_dev_priority_flow_ctrl_set returned.
int set_pfc(std::uint16_t port, int priority) {
  rte_eth_pfc_conf pfc{};
  if (rte_eth_dev_flow_ctrl_get(port, &pfc.fc) != 0) pfc.fc = rte_eth_fc_conf{};
  pfc.fc.mode = RTE_ETH_FC_FULL;
  if (pfc.fc.pause_time == 0) pfc.fc.pause_time = 0xffff;  // the longest; the port resumes with XON (time 0)
  pfc.fc.mac_ctrl_frame_fwd = 0;
  pfc.priority = static_cast<std::uint8_t>(priority);
  logger().debug("port {}: PFC on priority {}: high water {}, low water {}, pause time {}, send XON {}", port,
                 priority, pfc.fc.high_water, pfc.fc.low_water, pfc.fc.pause_time, pfc.fc.send_xon);
  return rte_eth_dev_priority_flow_ctrl_set(port, &pfc);
}

// A driver's ways of saying it has no PFC: ethdev answers -ENOTSUP when the
// driver leaves the op out, and some drivers return -ENOSYS from a stub.
bool pfc_unsupported(int rc) { return rc == -ENOTSUP || rc == -EOPNOTSUPP || rc == -ENOSYS; }

}  // namespace

std::uint16_t port_count() { return rte_eth_dev_count_avail(); }

bool parse_rx_loss(std::string_view text, RxLoss& loss, std::string& error) {
  const std::size_t comma = text.find(',');
  const std::string p(text.substr(0, comma));
  RxLoss parsed;
  char* end = nullptr;
  parsed.probability = std::strtod(p.c_str(), &end);
  bool ok = !p.empty() && end == p.c_str() + p.size() && parsed.probability >= 0 && parsed.probability < 1;
  // A whole decimal number, nothing before or after it.
  auto number = [](std::string_view digits, auto& value) {
    const auto r = std::from_chars(digits.data(), digits.data() + digits.size(), value);
    return !digits.empty() && r.ec == std::errc() && r.ptr == digits.data() + digits.size();
  };
  if (ok && comma != std::string_view::npos) {
    const std::string_view rest = text.substr(comma + 1);
    const std::size_t second = rest.find(',');
    ok = number(rest.substr(0, second), parsed.seed) &&
         (second == std::string_view::npos || number(rest.substr(second + 1), parsed.min_bytes));
  }
  if (!ok) {
    error = "UROCE_RX_LOSS must be a probability from 0 to below 1, then optionally ,SEED and ,MIN_BYTES (like "
            "0.02,7 or 0.02,7,1024: only frames of 1024 bytes or more are dropped); not '" +
            std::string(text) + "'";
    return false;
  }
  loss = parsed;
  return true;
}

std::unique_ptr<Port> Port::open(const PortConfig& config, std::string& error) {
  // Every failure is returned in `error` (the caller reports it, once) and
  // logged at debug level.
  auto fail = [&error](std::string message) {
    logger().debug("{}", message);
    error = std::move(message);
    return nullptr;
  };
  std::uint16_t port = config.port_id;
  if (!config.name.empty() && rte_eth_dev_get_port_by_name(config.name.c_str(), &port) != 0) {
    return fail("no DPDK port named '" + config.name + "' (add it with --vdev or bind the NIC to a DPDK driver)");
  }
  if (!rte_eth_dev_is_valid_port(port)) {
    return fail("no DPDK port " + std::to_string(port) + " (EAL found " + std::to_string(port_count()) + ")");
  }
  RxLoss rx_loss = config.rx_loss;
  if (const char* env = std::getenv("UROCE_RX_LOSS"); env != nullptr && *env != '\0') {
    if (std::string message; !parse_rx_loss(env, rx_loss, message)) return fail(message);
  }
  if (!(rx_loss.probability >= 0 && rx_loss.probability < 1)) {
    return fail("RX loss " + std::to_string(rx_loss.probability) + ": a probability from 0 to below 1");
  }
  if (config.pfc_priority < -1 || config.pfc_priority > 7) {
    return fail("PFC priority " + std::to_string(config.pfc_priority) + ": give an 802.1p priority from 0 to 7");
  }
  rte_eth_dev_info info{};
  if (int rc = rte_eth_dev_info_get(port, &info); rc != 0) {
    return fail("cannot query port " + std::to_string(port) + ": " + errno_text(rc));
  }
  const char* driver = info.driver_name != nullptr ? info.driver_name : "?";
  logger().debug("port {}: driver {}, at most {} RX / {} TX queues, max RX frame {}, TX offloads {:#x}", port,
                 driver, info.max_rx_queues, info.max_tx_queues, info.max_rx_pktlen, info.tx_offload_capa);
  if (config.queues > info.max_rx_queues || config.queues > info.max_tx_queues) {
    return fail("port " + std::to_string(port) + " has at most " +
                std::to_string(std::min(info.max_rx_queues, info.max_tx_queues)) + " queue pairs, " +
                std::to_string(config.queues) + " asked");
  }

  const std::string pool_name = "uroce_rx_" + std::to_string(port);
  // Room for the largest frame and what a driver puts beside it in the
  // same buffer: net_virtio wants the MTU plus Ethernet, VLAN and its own
  // 12-byte header in one mbuf (else "Rx scatter check failed" and the
  // port does not start), others a VLAN tag or the CRC.
  constexpr std::uint16_t kDriverSlack = 64;
  const auto data_room = static_cast<std::uint16_t>(config.max_frame + kDriverSlack + RTE_PKTMBUF_HEADROOM);
  rte_mempool* pool = rte_pktmbuf_pool_create(pool_name.c_str(), config.mbufs, 256, 0, data_room,
                                              static_cast<int>(rte_eth_dev_socket_id(port) < 0 ? SOCKET_ID_ANY : rte_eth_dev_socket_id(port)));
  if (pool == nullptr) {
    return fail("cannot create the mbuf pool for port " + std::to_string(port) + ": " + rte_strerror(rte_errno) +
                " (more hugepages, or a larger -m with --no-huge)");
  }
  logger().debug("port {}: mbuf pool {}: {} mbufs of {} bytes", port, pool_name, config.mbufs, data_room);

  rte_eth_conf conf{};
  // Ask for jumbo frames only where the device says it takes them. The
  // reported maximum is no guide otherwise: DPDK 22.11's af_packet and memif
  // report 1518 yet carry frames up to their framesz/bsize chains, while
  // net_tap (1522) refuses longer frames. config.max_frame is the caller's
  // word for what the link carries.
  if (config.max_frame > RTE_ETHER_MAX_LEN && info.max_rx_pktlen >= config.max_frame) {
    conf.rxmode.mtu = static_cast<std::uint32_t>(config.max_frame - RTE_ETHER_HDR_LEN - RTE_ETHER_CRC_LEN);
  }
  const bool multi_seg = config.zero_copy_tx && (info.tx_offload_capa & RTE_ETH_TX_OFFLOAD_MULTI_SEGS);
  if (multi_seg) conf.txmode.offloads |= RTE_ETH_TX_OFFLOAD_MULTI_SEGS;
  const bool ipv4_cksum = config.ipv4_checksum_offload && (info.tx_offload_capa & RTE_ETH_TX_OFFLOAD_IPV4_CKSUM);
  if (ipv4_cksum) conf.txmode.offloads |= RTE_ETH_TX_OFFLOAD_IPV4_CKSUM;
  // With several queues, RSS spreads the peers' flows over them by IP
  // addresses and UDP ports (a RoCEv2 QP's source port is its flow's
  // entropy), and the engine that receives a frame hands it to the one
  // serving its QP. A port that cannot hash delivers everything to queue
  // 0: it still works, through the handover.
  std::uint64_t rss = 0;
  if (config.queues > 1) {
    rss = (RTE_ETH_RSS_IP | RTE_ETH_RSS_UDP) & info.flow_type_rss_offloads;
    if (rss != 0) {
      conf.rxmode.mq_mode = RTE_ETH_MQ_RX_RSS;
      conf.rx_adv_conf.rss_conf.rss_hf = rss;
    } else {
      logger().info("port {} ({}, driver {}): no RSS over IP/UDP: every frame arrives on queue 0 and its engine "
                    "passes on those of the other engines' QPs",
                    port, device_name(port), driver);
    }
  }
  int rc = rte_eth_dev_configure(port, config.queues, config.queues, &conf);
  for (std::uint16_t q = 0; rc == 0 && q < config.queues; ++q) {
    rc = rte_eth_rx_queue_setup(port, q, config.rx_desc, rte_eth_dev_socket_id(port), nullptr, pool);
    if (rc == 0) rc = rte_eth_tx_queue_setup(port, q, config.tx_desc, rte_eth_dev_socket_id(port), nullptr);
  }
  if (rc == 0) rc = rte_eth_dev_start(port);
  if (rc != 0) {
    rte_mempool_free(pool);
    return fail("cannot start port " + std::to_string(port) + ": " + errno_text(rc));
  }
  PortPfc pfc = PortPfc::kOff;
  if (config.pfc_priority >= 0) {
    const int p = config.pfc_priority;
    rc = set_pfc(port, p);
    if (rc == 0) {
      pfc = PortPfc::kOn;
    } else if (pfc_unsupported(rc)) {
      // Not fatal: where the PMD cannot, the NIC can still be told by the
      // kernel side (a bifurcated driver's netdev, or before binding) and
      // the switch by its own configuration; the stack's traffic class
      // rule holds either way.
      pfc = PortPfc::kUnsupported;
      logger().warn("port {} ({}, driver {}): PFC on priority {} not enabled: the driver has no priority flow "
                    "control; enable it on the NIC (its vendor tool, or `dcb pfc set dev IFACE prio-pfc {}:on`) "
                    "and on the switch port",
                    port, device_name(port), driver, p, p);
    } else {
      rte_eth_dev_stop(port);
      rte_mempool_free(pool);
      return fail("port " + std::to_string(port) + " (" + device_name(port) + ", driver " + driver +
                  ") refused PFC on priority " + std::to_string(p) + ": " + errno_text(rc) +
                  " (check the NIC's DCB settings, or run without a PFC priority)");
    }
  }
  if (rx_loss.probability > 0) {
    logger().warn("port {} ({}): dropping {} of the frames it receives on purpose (a lossy link for tests), seed {}{}",
                  port, driver, rx_loss.probability, rx_loss.seed,
                  rx_loss.min_bytes > 0 ? fmt::format(", frames of {} bytes or more only", rx_loss.min_bytes) : "");
  }
  logger().info("port {} ({}): {} queue pair(s) of {} RX / {} TX descriptors, max frame {}, MTU {}, "
                "TX offloads: multi-segment (zero-copy) {}, IPv4 checksum {}; PFC {}; RSS {:#x}",
                port, driver, config.queues, config.rx_desc, config.tx_desc, config.max_frame,
                conf.rxmode.mtu != 0 ? std::to_string(conf.rxmode.mtu) : "default", multi_seg ? "on" : "off",
                ipv4_cksum ? "on" : "off",
                pfc == PortPfc::kOn            ? "on priority " + std::to_string(config.pfc_priority)
                : pfc == PortPfc::kUnsupported ? std::string("not supported by the driver")
                                               : std::string("not asked"),
                rss);
  auto opened = std::unique_ptr<Port>(new Port(port, pool, multi_seg, ipv4_cksum, config.max_frame, pfc));
  opened->max_tx_segments_ = std::min(info.tx_desc_lim.nb_seg_max, info.tx_desc_lim.nb_mtu_seg_max);
  if (opened->max_tx_segments_ < 3) opened->multi_seg_tx_ = false;  // a head, a piece and a tail at the least
  opened->rx_loss_ = rx_loss;
  opened->tx_split_pages_ = std::strcmp(driver, "net_e1000_em") == 0 || std::strcmp(driver, "net_vmxnet3") == 0;
  opened->rings_torn_down_by_interrupt_thread_ = std::strcmp(driver, "net_memif") == 0;
  return opened;
}

namespace {

struct Closing {
  std::uint16_t port;
  rte_mempool* pool;
};

void close_port(void* arg) {
  auto* c = static_cast<Closing*>(arg);
  rte_eth_dev_stop(c->port);
  rte_eth_dev_close(c->port);
  rte_mempool_free(c->pool);
}

}  // namespace

// Some PMDs serve their control channel on EAL's interrupt thread: memif
// reads its peer's messages there and tears the connection down when the
// peer leaves. Closing the port from this thread while that runs frees the
// queues and the pool under it (seen as a SIGSEGV in memif at exit, when
// both ends of a memif link close at once), so the close runs there,
// serialised with the PMD's handlers.
Port::~Port() {
  Closing c{port_id_, as_pool(pool_)};
  run_on_interrupt_thread(close_port, &c);
}

std::uint16_t Port::send_copies(std::uint16_t queue, std::span<const std::vector<std::uint8_t>> frames) {
  std::vector<rte_mbuf*> burst;
  burst.reserve(frames.size());
  for (const auto& f : frames) {
    rte_mbuf* m = rte_pktmbuf_alloc(as_pool(pool_));
    if (m == nullptr) break;
    char* dst = rte_pktmbuf_append(m, static_cast<std::uint16_t>(f.size()));
    if (dst == nullptr) {
      rte_pktmbuf_free(m);
      break;
    }
    std::memcpy(dst, f.data(), f.size());
    burst.push_back(m);
  }
  const std::uint16_t sent = rte_eth_tx_burst(port_id_, queue, burst.data(), static_cast<std::uint16_t>(burst.size()));
  for (std::size_t i = sent; i < burst.size(); ++i) rte_pktmbuf_free(burst[i]);
  return sent;
}

std::uint16_t Port::receive_copies(std::uint16_t queue, std::vector<std::vector<std::uint8_t>>& out,
                                   std::uint16_t max) {
  std::vector<rte_mbuf*> burst(max);
  const std::uint16_t n = rte_eth_rx_burst(port_id_, queue, burst.data(), max);
  for (std::uint16_t i = 0; i < n; ++i) {
    rte_mbuf* m = burst[i];
    std::vector<std::uint8_t> copy(rte_pktmbuf_pkt_len(m));
    // rte_pktmbuf_read gathers segments into `copy`, but for a contiguous
    // mbuf it returns a pointer to the data and copies nothing.
    const void* data = rte_pktmbuf_read(m, 0, static_cast<std::uint32_t>(copy.size()), copy.data());
    if (data != nullptr && data != copy.data()) std::memcpy(copy.data(), data, copy.size());
    out.push_back(std::move(copy));
    rte_pktmbuf_free(m);
  }
  return n;
}

}  // namespace uroce::dpdk

namespace uroce::dpdk {
namespace {

// Whether the driver's xstat `name` counts pause frames (802.3x PAUSE or a
// PFC XOFF) and in which direction: 'r', 't', or 0; 'd' for the time we
// were held paused (received pause durations, us). Drivers name them their
// own way (mlx5 rx_prio3_pause and rx_prio3_pause_duration, ixgbe
// rx_priority3_xoff_packets, ice rx_priority_3_xoff_packets); transitions
// and XON are not frames that paused anything.
char pause_direction(std::string_view name) {
  const bool pause = name.find("pause") != std::string_view::npos || name.find("xoff") != std::string_view::npos;
  if (!pause || name.find("xon") != std::string_view::npos || name.find("transition") != std::string_view::npos) {
    return 0;
  }
  if (name.find("duration") != std::string_view::npos) {
    return name.starts_with("rx") && name.find("pause") != std::string_view::npos ? 'd' : 0;
  }
  if (name.starts_with("rx") || name.find("_rx_") != std::string_view::npos) return 'r';
  if (name.starts_with("tx") || name.find("_tx_") != std::string_view::npos) return 't';
  return 0;
}

}  // namespace

LinkCounters Port::link_counters() const {
  std::call_once(pause_ids_found_, [this] {
    const int n = rte_eth_xstats_get_names(port_id_, nullptr, 0);
    if (n <= 0) return;
    std::vector<rte_eth_xstat_name> names(static_cast<std::size_t>(n));
    const int got = rte_eth_xstats_get_names(port_id_, names.data(), static_cast<unsigned>(n));
    for (int i = 0; i < got && i < n; ++i) {
      switch (pause_direction(names[static_cast<std::size_t>(i)].name)) {
        case 'r':
          rx_pause_ids_.push_back(static_cast<std::uint64_t>(i));
          break;
        case 't':
          tx_pause_ids_.push_back(static_cast<std::uint64_t>(i));
          break;
        case 'd':
          rx_paused_us_ids_.push_back(static_cast<std::uint64_t>(i));
          break;
        default:
          break;
      }
    }
  });
  LinkCounters c;
  rte_eth_stats s{};
  if (rte_eth_stats_get(port_id_, &s) == 0) {
    c.link_rx_packets = s.ipackets;
    c.link_tx_packets = s.opackets;
    c.link_rx_bytes = s.ibytes;
    c.link_tx_bytes = s.obytes;
    c.link_rx_missed = s.imissed;
    c.link_rx_errors = s.ierrors;
    c.link_tx_errors = s.oerrors;
    c.link_rx_no_mbuf = s.rx_nombuf;
  }
  auto sum = [this](const std::vector<std::uint64_t>& ids) {
    if (ids.empty()) return std::uint64_t{0};
    std::vector<std::uint64_t> values(ids.size());
    if (rte_eth_xstats_get_by_id(port_id_, ids.data(), values.data(), static_cast<unsigned>(ids.size())) !=
        static_cast<int>(ids.size())) {
      return std::uint64_t{0};
    }
    std::uint64_t total = 0;
    for (std::uint64_t v : values) total += v;
    return total;
  };
  c.link_rx_pause_frames = sum(rx_pause_ids_);
  c.link_tx_pause_frames = sum(tx_pause_ids_);
  c.link_rx_paused_us = sum(rx_paused_us_ids_);
  return c;
}

}  // namespace uroce::dpdk
