#include "telemetry.h"

#include <rte_eal.h>
#include <rte_telemetry.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <string>

namespace uroce::daemon {
namespace {

std::atomic<const Server*> g_server{nullptr};

// /uroced/clients: each client's process, objects and QP numbers (whose
// counters are at /uroce/qp,0,QPN).
int list_clients(const char*, const char*, rte_tel_data* d) {
  const Server* server = g_server.load();
  if (server == nullptr) return -ENODEV;
  rte_tel_data_start_dict(d);
  for (const Server::ClientRow& r : server->client_table()) {
    // 22.11's telemetry nests arrays only: a client is an array of
    // "field value" strings.
    rte_tel_data* c = rte_tel_data_alloc();
    if (c == nullptr) return -ENOMEM;
    rte_tel_data_start_array(c, RTE_TEL_STRING_VAL);
    std::string qpns;
    for (std::uint32_t q : r.qpns) {
      if (!qpns.empty()) qpns.push_back(' ');
      qpns.append(std::to_string(q));
    }
    const std::string fields[] = {"pid " + std::to_string(r.pid),   "uid " + std::to_string(r.uid),
                                  "pds " + std::to_string(r.pds),   "mrs " + std::to_string(r.mrs),
                                  "cqs " + std::to_string(r.cqs),   "qps " + std::to_string(r.qps),
                                  "srqs " + std::to_string(r.srqs), "ahs " + std::to_string(r.ahs),
                                  "mapped_bytes " + std::to_string(r.mapped_bytes), "qpns " + qpns};
    for (const std::string& f : fields) rte_tel_data_add_array_string(c, f.c_str());
    const std::string name = "client_" + std::to_string(r.id);  // names: [A-Za-z0-9_/] only
    rte_tel_data_add_dict_container(d, name.c_str(), c, 0);
  }
  return 0;
}

}  // namespace

void telemetry_expose_clients(const Server* server) {
  static const bool registered =
      rte_telemetry_register_cmd("/uroced/clients", list_clients,
                                 "uroced's clients: pid, uid, objects, mapped bytes and QPNs (counters: /uroce/qp,0,QPN)") == 0;
  (void)registered;
  g_server.store(server);
}

void telemetry_hide_clients() { g_server.store(nullptr); }

void telemetry_link(const std::string& socket) {
  const std::string target = std::string(rte_eal_get_runtime_dir()) + "/dpdk_telemetry.v2";
  struct stat st{};
  if (stat(target.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode)) return;  // --no-telemetry
  const std::string link = socket + ".telemetry";
  unlink(link.c_str());  // a crashed daemon's, or a previous run's
  if (symlink(target.c_str(), link.c_str()) != 0) {
    spdlog::warn("uroced: cannot link {} to the telemetry socket {}: {} (uroce-stat --socket {} will not find it; "
                 "give uroce-stat the telemetry socket itself)",
                 link, target, std::strerror(errno), target);
  }
}

void telemetry_unlink(const std::string& socket) {
  const std::string link = socket + ".telemetry";
  char target[4096];
  // Only our own link: another daemon may have taken the path since.
  const ssize_t n = readlink(link.c_str(), target, sizeof target - 1);
  if (n <= 0) return;
  target[n] = '\0';
  if (std::string(target) == std::string(rte_eal_get_runtime_dir()) + "/dpdk_telemetry.v2") unlink(link.c_str());
}

}  // namespace uroce::daemon
