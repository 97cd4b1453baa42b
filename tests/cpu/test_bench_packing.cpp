// The bench's multi-asset request (bench --batch K): K copies of one asset with their batch
// indices renumbered, the conditions stacked, and each copy's noise from its own offset of
// the asset's stream. And the result's fingerprint, read through the public Engine API.
#include <gtest/gtest.h>

#include <cstring>

#include "bench/environment.h"
#include "bench/packing.h"
#include "contract/fingerprint.h"

namespace s3d::bench {
namespace {

payload::Asset small_asset(bool concat) {
  payload::Asset a;
  a.name = "a";
  a.coords = Tensor::from_ints({0, 1, 2, 3, 0, 1, 2, 4, 0, 5, 0, 0}, {3, 4});
  a.cond = Tensor::from_floats({1, 2, 3, 4, 5, 6, 7, 8}, {2, 4}, DType::BF16);
  if (concat) a.concat_cond = Tensor::from_floats({9, 8, 7, 6, 5, 4}, {3, 2}, DType::F32);
  a.noise_seed = 42;
  return a;
}

TEST(BenchPacking, CopiesAreRenumberedStackedAndDrawnFromTheirOffsets) {
  const payload::Asset a = small_asset(true);
  const int64_t out = 5;
  const PackedCopies p = pack_copies(a, 3, out);
  EXPECT_EQ(p.batch, 3);
  EXPECT_EQ(p.coords.shape(), Shape({9, 4}));
  EXPECT_EQ(p.cond.shape(), Shape({3, 2, 4}));
  EXPECT_EQ(p.cond.dtype(), DType::BF16);
  EXPECT_EQ(p.noise.shape(), Shape({9, out}));
  EXPECT_EQ(p.concat_cond.shape(), Shape({9, 2}));
  const int32_t* c = p.coords.data_as<int32_t>();
  const int32_t* src = a.coords.data_as<int32_t>();
  const std::vector<float> cond = p.cond.to_floats(), one = a.cond.to_floats();
  const std::vector<float> concat = p.concat_cond.to_floats(), concat1 = a.concat_cond.to_floats();
  for (int k = 0; k < 3; ++k) {
    for (int t = 0; t < 3; ++t) {
      EXPECT_EQ(c[4 * (3 * k + t)], k) << "copy " << k << " token " << t;
      for (int d = 1; d < 4; ++d) EXPECT_EQ(c[4 * (3 * k + t) + d], src[4 * t + d]);
    }
    for (size_t i = 0; i < one.size(); ++i) EXPECT_EQ(cond[k * one.size() + i], one[i]);
    for (size_t i = 0; i < concat1.size(); ++i)
      EXPECT_EQ(concat[k * concat1.size() + i], concat1[i]);
  }
  // Copy k's noise is the asset's stream from element k x T x out on: one draw of all rows.
  const sparse3d::Array stream = sparse3d::draw_noise(42, 9, out);
  EXPECT_EQ(std::memcmp(p.noise.data(), stream.view.data, stream.view.nbytes()), 0);
  // Copy 0's is the asset's own noise (what a single request draws from the seed).
  const sparse3d::Array own = sparse3d::draw_noise(42, 3, out);
  EXPECT_EQ(std::memcmp(p.noise.data(), own.view.data, own.view.nbytes()), 0);
}

TEST(BenchPacking, OneCopyIsTheAssetAndNoConcatStaysUndefined) {
  const payload::Asset a = small_asset(false);
  const PackedCopies p = pack_copies(a, 1, 2);
  EXPECT_EQ(p.batch, 1);
  EXPECT_FALSE(p.concat_cond.defined());
  EXPECT_EQ(std::memcmp(p.coords.data(), a.coords.data(), 3 * 4 * sizeof(int32_t)), 0);
  const sparse3d::TensorView v = view_of(p.cond);
  EXPECT_EQ(v.shape, (std::vector<int64_t>{1, 2, 4}));
  EXPECT_EQ(v.dtype, DType::BF16);
  EXPECT_EQ(v.device, Device::CPU);
  EXPECT_EQ(v.data, p.cond.data());
  EXPECT_THROW(pack_copies(a, 0, 2), sparse3d::Error);
}

// The engine gives its fingerprint as text; the result file keeps the JSON types it had
// when the bench read the fingerprint directly.
TEST(BenchEnvironment, FingerprintKeepsItsJsonTypes) {
  const io::Json j = fingerprint_json({{"has_gpu", "true"}, {"sm_count", "132"},
                                       {"cuda_runtime", "13.0"}, {"gpu_name", "NVIDIA H200"},
                                       {"nvidia_driver", "580.159.04"}, {"cudnn", "none"}});
  EXPECT_EQ(j.dump(), R"({"cuda_runtime":"13.0","cudnn":"none","gpu_name":"NVIDIA H200",)"
                      R"("has_gpu":true,"nvidia_driver":"580.159.04","sm_count":132})");
  sparse3d::EngineOptions o;
  o.device = sparse3d::DeviceChoice::CPU;
  o.persist_qualification = false;
  sparse3d::Engine e(std::string(SPARSE3D_TEST_DATA) + "/golden/inputs/tiny.json", o);
  EXPECT_EQ(fingerprint_json(e), contract::environment_fingerprint().to_json());
  EXPECT_EQ(utc_now().size(), 20u);
}

}  // namespace
}  // namespace s3d::bench
