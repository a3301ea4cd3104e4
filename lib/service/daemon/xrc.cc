// XRC domains of uroced's clients (IBTA annex A14). A domain is the
// client's own: its XRC SRQs and target QPs are made on it through
// create_srq and create_qp (srq_ah.cc, server.cc), and it closes with the
// client. Sharing one domain between clients (ibv_open_xrcd of one file by
// several processes) is not done: see docs/ibverbs.md.
#include <cerrno>
#include <string>

#include "service_daemon/server.h"

namespace uroce::daemon {

using service::Reply;
using service::Request;

void Server::op_open_xrcd(Client& c, const Request&, const int*, int, Reply& reply, std::vector<int>&) {
  XrcDomain* x = ctx_.open_xrcd();
  if (x == nullptr) {
    fail(reply, ENOMEM, ctx_.last_error());
    return;
  }
  reply.handle = c.next_handle++;
  c.xrcds[reply.handle] = x;
}

void Server::op_close_xrcd(Client& c, const Request& req, const int*, int, Reply& reply, std::vector<int>&) {
  XrcDomain** x = find(c.xrcds, req.handle, "XRC domain", reply);
  if (x == nullptr) return;
  if (const int e = ctx_.close_xrcd(*x); e != 0) {
    fail(reply, e, "close_xrcd: XRC SRQs or target QPs of this domain remain: destroy them first");
    return;
  }
  c.xrcds.erase(req.handle);
}

}  // namespace uroce::daemon
