// detail::sort_order (mesh/voxel_index.h): the radix sort behind the voxel stages, against
// std::stable_sort, on keys shaped like voxel keys and on keys with every bit free, at sizes
// on both sides of its parallel threshold, with one thread and with all.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

#include "mesh/voxel_index.h"

namespace s3d::mesh {
namespace {

std::vector<int32_t> stable_reference(const std::vector<uint64_t>& keys) {
  std::vector<int32_t> order(keys.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return keys[a] < keys[b]; });
  return order;
}

std::vector<uint64_t> voxel_keys(int64_t n, int32_t side, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> c(0, side - 1);
  std::vector<uint64_t> keys(n);
  for (auto& k : keys) k = detail::pack_key(c(rng), c(rng), c(rng));  // repeats included
  return keys;
}

TEST(VoxelIndex, SortOrderIsTheStableOrderForAnyThreadCount) {
  const int most = omp_get_max_threads();
  std::mt19937_64 rng(7);
  for (const int64_t n : {0, 1, 2, 3, 17, 1001, 65535, 65537, 200003}) {
    std::vector<std::vector<uint64_t>> cases = {voxel_keys(n, 1024, 11), voxel_keys(n, 3, 12)};
    std::vector<uint64_t> wide(n), equal(n, 0x123456789abcdefULL);
    for (auto& k : wide) k = rng();
    cases.push_back(wide);
    cases.push_back(equal);
    for (const auto& keys : cases) {
      const std::vector<int32_t> want = stable_reference(keys);
      for (const int threads : {1, std::max(2, most)}) {
        omp_set_num_threads(threads);
        EXPECT_EQ(detail::sort_order(keys), want) << "n " << n << ", threads " << threads;
      }
    }
  }
  omp_set_num_threads(most);
}

}  // namespace
}  // namespace s3d::mesh
