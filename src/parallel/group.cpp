#include "parallel/group.h"

#include <set>

#include "core/cuda_util.h"
#include "core/error.h"
#include "kernels/elementwise.h"

namespace s3d::parallel {

void Group::check(const Transfer& t, size_t index) const {
  const int p = size();
  S3D_CHECK(t.from >= 0 && t.from < p && t.to >= 0 && t.to < p, "exchange: transfer ", index,
            " goes from rank ", t.from, " to rank ", t.to, " in a group of ", p);
  S3D_CHECK(t.src.defined() && t.dst.defined(), "exchange: transfer ", index,
            " has an undefined buffer");
  S3D_CHECK(t.src.dtype() == t.dst.dtype() && t.src.numel() == t.dst.numel(), "exchange: transfer ",
            index, " sends ", t.src.describe(), " into ", t.dst.describe());
}

RankScope::RankScope(const Group& group, int rank) {
  S3D_CHECK(rank >= 0 && rank < group.size(), "group: no rank ", rank, " of ", group.size());
  if (Context* c = group.context(rank)) scope_.emplace(*c);
}

LocalGroup::LocalGroup(int ranks, Device device, std::vector<Context*> contexts)
    : ranks_(ranks), device_(device), contexts_(std::move(contexts)) {
  S3D_CHECK(ranks >= 1, "local group: needs at least one rank, got ", ranks);
  S3D_CHECK(contexts_.empty() || contexts_.size() == static_cast<size_t>(ranks),
            "local group: ", contexts_.size(), " contexts for ", ranks, " ranks");
  std::set<int> devices;
  for (Context* c : contexts_) {
    S3D_CHECK(c != nullptr, "local group: a context is missing");
    devices.insert(c->device());
  }
  S3D_CHECK(devices.size() <= 1, "local group: every rank must be on one device");
}

std::string LocalGroup::describe() const {
  return "local: " + std::to_string(ranks_) + " ranks on " + device_name(device_) +
         (contexts_.empty() ? "" : ", one context each");
}

Context* LocalGroup::context(int rank) const {
  return contexts_.empty() ? nullptr : contexts_[static_cast<size_t>(rank)];
}

// With one context per rank the ranks' streams may differ: every source stream is drained before
// the copies, each copy runs on its destination's stream, and the destinations are drained after
// them (so a source may be freed at once). A test harness: simple over fast.
void LocalGroup::exchange(const std::vector<Transfer>& transfers) {
  for (size_t i = 0; i < transfers.size(); ++i) {
    const Transfer& t = transfers[i];
    check(t, i);
    S3D_CHECK(t.src.device() == device_ && t.dst.device() == device_, "local group: transfer ", i,
              " is not on ", device_name(device_));
  }
  const bool own_streams = !contexts_.empty() && device_ == Device::CUDA;
  if (own_streams) {
    for (Context* c : contexts_) S3D_CUDA_CHECK(cudaStreamSynchronize(c->stream()));
  }
  for (const Transfer& t : transfers) {
    const int64_t n = t.src.numel();
    if (n == 0) continue;
    RankScope scope(*this, t.to);
    RowView dst = RowView::of(t.dst.reshape({1, n}));
    kernels::copy_rows(RowView::of(t.src.reshape({1, n})), dst);
  }
  if (own_streams) {
    for (Context* c : contexts_) S3D_CUDA_CHECK(cudaStreamSynchronize(c->stream()));
  }
}

}  // namespace s3d::parallel
