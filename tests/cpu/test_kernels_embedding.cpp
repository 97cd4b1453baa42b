// CPU oracle of the timestep and absolute position embeddings against fp64 formulas.
#include <gtest/gtest.h>

#include <cmath>

#include "kernel_test_util.h"
#include "kernels/embedding.h"

namespace s3d {
namespace {

using test::matches_exact;
using test::throws_error;

// The op's fp32 frequency table (an fp32 exponent, then expf or powf) is good to a few tens
// of ulps; the argument error grows with |arg| and passes into cos/sin unattenuated.
double arg_budget(double arg) { return 48.0 * std::fabs(arg) + 4.0; }

void check_timestep(const std::vector<float>& t, int64_t dim) {
  const int64_t B = static_cast<int64_t>(t.size()), half = dim / 2;
  Tensor tt = Tensor::from_floats(t, {B}, DType::F32);
  Tensor out = Tensor::empty({B, dim}, DType::F32, Device::CPU);
  out.poison();
  kernels::timestep_embedding(tt, out);
  std::vector<double> exact(B * dim, 0.0), mag(B * dim, 0.0);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t i = 0; i < half; ++i) {
      const double arg = t[b] * std::exp(-std::log(10000.0) * i / half);
      exact[b * dim + i] = std::cos(arg);
      exact[b * dim + half + i] = std::sin(arg);
      mag[b * dim + i] = mag[b * dim + half + i] = arg_budget(arg);
    }
  }
  EXPECT_TRUE(matches_exact(out, exact, mag)) << "B " << B << " dim " << dim;
}

TEST(EmbeddingCpu, TimestepMatchesFp64) {
  const std::vector<float> t = {1000.0f, 999.3f, 437.25f, 12.5f, 0.75f, 0.0f, 1000.0f * 0.6f};
  check_timestep(t, 256);
  check_timestep({500.0f}, 256);
  check_timestep(t, 7);  // odd: a zero column after 3 cos and 3 sin
  check_timestep(t, 1);  // no frequency: only the zero column
}

void check_ape(int64_t T, int64_t C) {
  const int64_t fd = C / 3 / 2;
  Tensor coords = test::random_coords(T, 800 + C);
  Tensor out = Tensor::empty({T, C}, DType::F32, Device::CPU);
  out.poison();
  kernels::ape_embedding(coords, out);
  const int32_t* c = coords.data_as<int32_t>();
  std::vector<double> exact(T * C, 0.0), mag(T * C, 0.0);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t a = 0; a < 3; ++a) {
      for (int64_t j = 0; j < fd; ++j) {
        const double arg = c[t * 4 + 1 + a] / std::pow(10000.0, double(j) / fd);
        const int64_t k = t * C + a * 2 * fd + j;
        exact[k] = std::sin(arg);
        exact[k + fd] = std::cos(arg);
        mag[k] = mag[k + fd] = arg_budget(arg);
      }
    }
  }
  EXPECT_TRUE(matches_exact(out, exact, mag)) << "T " << T << " C " << C;
}

TEST(EmbeddingCpu, ApeMatchesFp64) {
  for (int64_t T : {1, 7, 33}) {
    check_ape(T, 1536);  // 256 frequencies, no padding
    check_ape(T, 200);   // 33 frequencies, 198 used, 2 zero columns
    check_ape(T, 7);     // 1 frequency, 1 zero column
  }
  check_ape(3, 5);  // no frequency: all zeros
}

TEST(EmbeddingCpu, RejectsBadArguments) {
  Tensor t = Tensor::from_floats({1.0f, 2.0f}, {2}, DType::F32);
  Tensor out3 = Tensor::empty({3, 256}, DType::F32, Device::CPU);
  EXPECT_TRUE(throws_error([&] { kernels::timestep_embedding(t, out3); },
                           {"timestep_embedding", "out", "[2, dim]", "[3, 256]"}));
  Tensor t_bf16 = Tensor::from_floats({1.0f, 2.0f}, {2}, DType::BF16);
  Tensor out = Tensor::empty({2, 256}, DType::F32, Device::CPU);
  EXPECT_TRUE(throws_error([&] { kernels::timestep_embedding(t_bf16, out); },
                           {"timestep_embedding", "t", "f32", "bf16"}));
  Tensor huge = Tensor::empty({2, 4000}, DType::F32, Device::CPU);
  EXPECT_TRUE(throws_error([&] { kernels::timestep_embedding(t, huge); },
                           {"timestep_embedding", "2000 frequencies"}));

  Tensor coords = Tensor::from_ints(std::vector<int32_t>(8, 1), {2, 4});
  Tensor ape_out = Tensor::empty({3, 12}, DType::F32, Device::CPU);
  EXPECT_TRUE(throws_error([&] { kernels::ape_embedding(coords, ape_out); },
                           {"ape_embedding", "out", "[2, C]", "[3, 12]"}));
  Tensor coords_f = Tensor::from_floats(std::vector<float>(8, 1.0f), {2, 4}, DType::F32);
  Tensor ape_ok = Tensor::empty({2, 12}, DType::F32, Device::CPU);
  EXPECT_TRUE(throws_error([&] { kernels::ape_embedding(coords_f, ape_ok); },
                           {"ape_embedding", "coords", "i32"}));
}

}  // namespace
}  // namespace s3d
