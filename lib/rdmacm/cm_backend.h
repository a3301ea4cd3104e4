// The communication manager librdmacm drives when its device is uroced's
// (UROCE_SERVICE): the daemon's (lib/service/daemon/cm_relay.h), reached
// through a connection of this process's own to the daemon, beside the one
// its verbs calls use. The daemon moves the QPs through their states; this
// side then refreshes the library's view of each (RefreshFn), before the
// call returns or the event is reported, so a program sees its QP in RTS
// when it learns the connection is up.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <memory>
#include <string>
#include <vector>

#include "cm/manager.h"
#include "service/client.h"

namespace uroce::rdmacm {

class ServiceCm final : public cm::Backend {
 public:
  // Connects to the daemon at `socket` and opens its CM for this process.
  // nullptr and a one-line `error`.
  static std::unique_ptr<ServiceCm> open(const std::string& socket, std::string& error);
  ~ServiceCm() override;

  // How the library's view of a QP the daemon moved is brought up to date
  // (librdmacm: ibv_query_qp).
  using RefreshFn = void (*)(void* arg, QueuePair* qp);
  void set_refresh(RefreshFn fn, void* arg) {
    refresh_ = fn;
    refresh_arg_ = arg;
  }

  int listen(std::uint64_t service_id, void* owner, std::uint32_t backlog) override;
  int unlisten(std::uint64_t service_id) override;
  int connect(const cm::ConnectParams& p, std::uint32_t& comm_id) override;
  int accept(std::uint32_t comm_id, const cm::AcceptParams& p) override;
  int reject(std::uint32_t comm_id, const std::vector<std::uint8_t>& private_data,
             wire::RejReason reason = wire::RejReason::kConsumerReject) override;
  int disconnect(std::uint32_t comm_id) override;
  void forget_qp(QueuePair* qp) override;
  int sidr_request(const cm::SidrParams& p, std::uint32_t& request_id) override;
  int qp_attr(std::uint32_t comm_id, ibv_qp_state state, ibv_qp_attr& attr, int& mask) override;
  int establish(std::uint32_t comm_id) override;
  // Reads the daemon's events once its eventfd says some wait: a read(2)
  // that finds nothing otherwise.
  std::size_t poll(std::vector<cm::Event>& events) override;

 private:
  ServiceCm() = default;
  int call(service::Request& req, service::Reply& reply, const char* what);
  void refresh(std::uint32_t comm_id, bool ended);

  std::unique_ptr<service::Client> client_;
  int event_fd_ = -1;
  std::map<std::uint64_t, void*> owners_;      // listened service ID -> listen()'s owner
  std::map<std::uint32_t, QueuePair*> qps_;    // comm ID -> the QP the daemon moves for it
  std::set<std::uint32_t> sidr_requests_;      // SIDR requests to answer (no QP is moved for them)
  RefreshFn refresh_ = nullptr;
  void* refresh_arg_ = nullptr;
};

}  // namespace uroce::rdmacm
