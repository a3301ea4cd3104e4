// librdmacm's synchronous helpers (rdma_verbs.h's endpoints), as
// rdma-core's librdmacm builds them on its public calls: rdma_create_ep
// makes a synchronous ID from an rdma_addrinfo, rdma_get_request takes a
// synchronous listener's next request, rdma_destroy_ep undoes both. Our own
// code, behaving as rdma-core's does (rdma_create_ep(3), rdma_get_request(3)).
#include <rdma/rdma_cma.h>

#include <cerrno>

#include "rdmacm/internal.h"

extern "C" {

// A synchronous ID from an rdma_addrinfo: passive, bound to its source and
// keeping `qp_init_attr` for the QP of each request rdma_get_request takes;
// active, its address and route resolved and its QP made (rdma-core's
// rdma_create_ep).
int rdma_create_ep(rdma_cm_id** id, rdma_addrinfo* res, ibv_pd* pd, ibv_qp_init_attr* qp_init_attr) {
  if (id == nullptr || res == nullptr) return fail(EINVAL);
  rdma_cm_id* cm = nullptr;
  if (rdma_create_id(nullptr, &cm, nullptr, static_cast<rdma_port_space>(res->ai_port_space)) != 0) return -1;
  const auto undo = [cm] {
    const int err = errno;
    rdma_destroy_ep(cm);
    errno = err;
    return -1;
  };
  if (res->ai_flags & RAI_PASSIVE) {
    if (rdma_bind_addr(cm, res->ai_src_addr) != 0) return undo();
    if (pd != nullptr) cm->pd = pd;
    if (qp_init_attr != nullptr) {
      ibv_qp_init_attr kept = *qp_init_attr;
      kept.qp_type = static_cast<ibv_qp_type>(res->ai_qp_type);
      uroce::rdmacm::keep_qp_attr(cm, kept);
    }
    *id = cm;
    return 0;
  }
  if (rdma_resolve_addr(cm, res->ai_src_addr, res->ai_dst_addr, 2000) != 0) return undo();
  if (rdma_resolve_route(cm, 2000) != 0) return undo();
  if (qp_init_attr != nullptr) {
    qp_init_attr->qp_type = static_cast<ibv_qp_type>(res->ai_qp_type);
    if (rdma_create_qp(cm, pd, qp_init_attr) != 0) return undo();
  }
  if (res->ai_connect_len > 0 && res->ai_connect != nullptr) {
    uroce::rdmacm::keep_connect_data(cm, res->ai_connect, res->ai_connect_len);
  }
  *id = cm;
  return 0;
}

void rdma_destroy_ep(rdma_cm_id* id) {
  if (id == nullptr) return;
  if (id->qp != nullptr) rdma_destroy_qp(id);
  rdma_destroy_id(id);
}

// A synchronous listener's next connection request: the request's ID (its
// QP made as rdma_create_ep asked), its CONNECT_REQUEST in (*id)->event.
int rdma_get_request(rdma_cm_id* listen, rdma_cm_id** id) {
  if (listen == nullptr || id == nullptr || !uroce::rdmacm::is_synchronous(listen)) return fail(EINVAL);
  if (listen->event != nullptr) {
    rdma_ack_cm_event(listen->event);
    listen->event = nullptr;
  }
  rdma_cm_event* e = nullptr;
  if (rdma_get_cm_event(listen->channel, &e) != 0) return -1;
  int err = 0;
  if (e->status != 0) {
    err = e->status < 0 ? -e->status : e->status;
  } else if (e->event != RDMA_CM_EVENT_CONNECT_REQUEST) {
    err = EINVAL;
  } else if (ibv_qp_init_attr attr{}; uroce::rdmacm::kept_qp_attr(listen, attr)) {
    if (rdma_create_qp(e->id, listen->pd, &attr) != 0) err = errno;
  }
  if (err != 0) {
    listen->event = e;
    return fail(err);
  }
  *id = e->id;
  (*id)->event = e;
  return 0;
}

}  // extern "C"
