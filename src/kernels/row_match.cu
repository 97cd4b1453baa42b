// Row comparison kernel: blocks stride over rows, threads over columns; each thread keeps the
// smallest packed difference it saw per wanted row (row_match.h's encoding), a warp combines
// them by shuffles, and one lane per warp min-combines into the slot with an atomic. The
// packed word orders by element index first, so the slot ends with the row-major first
// difference whatever order the threads ran in.
#include <algorithm>

#include "core/cuda_util.h"
#include "kernels/row_match_cuda.h"

namespace s3d::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxWants = 8;  // wanted rows per launch; more are done in further launches
constexpr unsigned long long kNone = ~0ull;

__device__ __forceinline__ unsigned long long pack(int64_t index, uint16_t got, uint16_t want) {
  return (static_cast<unsigned long long>(index) << 32) |
         (static_cast<unsigned long long>(got) << 16) | want;
}

// wants > 0: b holds `wants` rows, each compared with every row of a; wants == 0: row r of a
// against row r of b.
__global__ void row_mismatch_kernel(const uint16_t* a, int64_t a_stride, int64_t rows,
                                    int64_t cols, const uint16_t* b, int64_t b_stride, int wants,
                                    unsigned long long* slots) {
  unsigned long long best[kMaxWants];
#pragma unroll
  for (int k = 0; k < kMaxWants; ++k) best[k] = kNone;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const uint16_t* row = a + r * a_stride;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      const uint16_t got = row[c];
      if (wants == 0) {
        const uint16_t want = b[r * b_stride + c];
        if (got != want) best[0] = min(best[0], pack(r * cols + c, got, want));
        continue;
      }
#pragma unroll
      for (int k = 0; k < kMaxWants; ++k) {
        if (k >= wants) break;
        const uint16_t want = b[k * b_stride + c];
        if (got != want) best[k] = min(best[k], pack(r * cols + c, got, want));
      }
    }
  }
  const int slots_used = wants == 0 ? 1 : wants;
#pragma unroll
  for (int k = 0; k < kMaxWants; ++k) {
    if (k >= slots_used) break;
    unsigned long long v = best[k];
    for (int offset = 16; offset > 0; offset /= 2) v = min(v, __shfl_down_sync(0xffffffffu, v, offset));
    if ((threadIdx.x & 31) == 0 && v != kNone) atomicMin(slots + k, v);
  }
}

}  // namespace

void row_mismatch(const RowView& a, const RowView& b, bool b_is_table, uint64_t* slots) {
  // Enough blocks to fill the GPU several times over; each strides over the rows.
  const auto blocks = static_cast<unsigned>(std::min<int64_t>(a.rows, 132 * 16));
  const int64_t K = b_is_table ? b.rows : 0;
  for (int64_t k0 = 0; k0 == 0 || k0 < K; k0 += kMaxWants) {
    const int wants = static_cast<int>(std::min<int64_t>(K - k0, kMaxWants));
    row_mismatch_kernel<<<blocks, kThreads, 0, current_stream()>>>(
        static_cast<const uint16_t*>(a.data()), a.stride, a.rows, a.cols,
        static_cast<const uint16_t*>(b.data()) + k0 * b.stride, b.stride, b_is_table ? wants : 0,
        reinterpret_cast<unsigned long long*>(slots) + k0);
    after_launch("row_mismatch");
    if (!b_is_table) break;
  }
}

}  // namespace s3d::kernels::cuda
