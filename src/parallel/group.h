// The ranks of a sequence-parallel group and the one collective they need: an exchange of
// contiguous buffers between ranks (the all-to-all around self-attention is one exchange of P x P
// transfers). A rank's work runs in its own Context (core/context.h: its device, stream, allocator
// and library state), which RankScope makes current; one host thread queues the work of every rank
// in turn. Two implementations:
//   LocalGroup: P simulated ranks on one device (the CPU backend or one GPU), in the caller's
//     context or in one context each; a transfer is a copy. The CPU tests and the one-GPU tests
//     of the sharded forward run on it (with P contexts on one GPU, every tensor a rank reads
//     must have been moved into its context, as on P GPUs); it is a test harness, not a
//     product path.
//   the NCCL group (make_nccl_group): one rank per GPU of one host, one process driving all of
//     them, one communicator per device (ncclCommInitAll), transfers as grouped
//     ncclSend/ncclRecv on each rank's context stream. NCCL is not linked: libnccl.so.2 is
//     opened the first time a group is made, so a build or a wheel that never runs on several
//     GPUs needs no NCCL at all.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/context.h"
#include "core/tensor.h"

namespace s3d::parallel {

// One buffer from rank `from` to rank `to`: src on from's device, dst on to's; both contiguous, of
// one dtype and one element count. from == to is a copy.
struct Transfer {
  int from = 0, to = 0;
  Tensor src, dst;
};

class Group {
 public:
  virtual ~Group() = default;
  virtual int size() const = 0;
  // One line: the implementation and its devices ("local: 3 ranks on CPU").
  virtual std::string describe() const = 0;
  // The context rank r's work runs in, or null when the ranks share the caller's.
  virtual Context* context(int rank) const = 0;
  // Every transfer as one exchange: each has landed before the next work queued for its destination
  // rank runs (stream order); the sources may be released when it returns.
  virtual void exchange(const std::vector<Transfer>& transfers) = 0;

 protected:
  // Throws naming the transfer unless it fits the group and its two buffers match.
  void check(const Transfer& t, size_t index) const;
};

// Makes rank r's context current for the scope's lifetime (nothing when it has none).
class RankScope {
 public:
  RankScope(const Group& group, int rank);

 private:
  std::optional<ContextScope> scope_;
};

class LocalGroup final : public Group {
 public:
  // `ranks` simulated ranks on `device` (the current CUDA device, or the CPU), in the caller's
  // context, or in contexts[r] (one per rank, all on one device; not owned).
  LocalGroup(int ranks, Device device, std::vector<Context*> contexts = {});
  int size() const override { return ranks_; }
  std::string describe() const override;
  Context* context(int rank) const override;
  void exchange(const std::vector<Transfer>& transfers) override;

 private:
  int ranks_;
  Device device_;
  std::vector<Context*> contexts_;
};

// True when this build has the NCCL group (nccl.h was found at build time).
bool nccl_built();
// The version of the libnccl.so.2 that make_nccl_group loads ("2.28.9"), or a line saying why none
// loads (not built with NCCL, library not found). Never throws.
std::string nccl_version();
// A group of one rank per context, each on its own CUDA device (contexts[r]->device(), distinct;
// not owned). Throws one line when NCCL is not built in or cannot be loaded, a context has no
// device, a device is missing or repeated, or NCCL fails.
std::unique_ptr<Group> make_nccl_group(const std::vector<Context*>& contexts);

}  // namespace s3d::parallel
