// --post-list N: each QP's send WRs gathered and posted N to a call,
// chained through wr.next (perftest's --post_list), so that the device
// sees one post_send, and one doorbell, per list.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <vector>

namespace uroce::perf {

class PostLists {
 public:
  PostLists(std::uint32_t qps, std::uint32_t per_list)
      : per_list_(per_list), wrs_(std::size_t{qps} * per_list), sges_(wrs_.size()), count_(qps, 0) {}

  // The place of QP `qp`'s next WR: fill wr(i) with sge(i) as its SGE.
  std::size_t add(std::uint32_t qp) {
    if (count_[qp] == 0) open_.push_back(qp);
    return std::size_t{qp} * per_list_ + count_[qp]++;
  }
  ibv_send_wr& wr(std::size_t i) { return wrs_[i]; }
  ibv_sge& sge(std::size_t i) { return sges_[i]; }
  bool full(std::uint32_t qp) const { return count_[qp] == per_list_; }

  // Posts QP `qp`'s list, chained, with post(qp, first WR); what it returned.
  template <typename Post>
  bool flush(std::uint32_t qp, Post&& post) {
    const std::uint32_t n = count_[qp];
    if (n == 0) return true;
    ibv_send_wr* first = &wrs_[std::size_t{qp} * per_list_];
    for (std::uint32_t k = 0; k < n; ++k) first[k].next = k + 1 < n ? &first[k + 1] : nullptr;
    count_[qp] = 0;
    return post(qp, first);
  }
  // Every list not yet posted, whatever its length (the test may post no
  // more until completions come).
  template <typename Post>
  bool flush_all(Post&& post) {
    bool ok = true;
    for (const std::uint32_t qp : open_) ok = flush(qp, post) && ok;
    open_.clear();
    return ok;
  }

 private:
  std::uint32_t per_list_;
  std::vector<ibv_send_wr> wrs_;
  std::vector<ibv_sge> sges_;
  std::vector<std::uint32_t> count_;  // per QP: WRs gathered
  std::vector<std::uint32_t> open_;   // QPs with WRs gathered since the last flush_all
};

}  // namespace uroce::perf
