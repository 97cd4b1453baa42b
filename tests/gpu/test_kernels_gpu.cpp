// Every reference-path kernel on the GPU against the same op on the CPU oracle, from the same
// random non-zero inputs, into poisoned outputs.
//
// Contracts (tests/gpu/gpu_test_util.h):
//   bitwise: cast, add, mul, add_scalar, gather_rows, copy_rows, rope_apply, cfg_combine,
//            euler_step, axpby_sub, xstart_to_pred, guidance_rescale
//   <= 1 bf16 ulp / 2e-6 relative (f32): layer_norm, head_rmsnorm (sum order; both sum in
//            double, so expect 0 differences), silu, gelu_tanh, rope_phases,
//            timestep_embedding, ape_embedding, asset_std (libm vs CUDA transcendentals,
//            fp64 sum order)
//   gelu_tanh may also differ where 1 + tanh(inner) cancels (x below about -4): there a
//            1-2 ulp difference between glibc's and CUDA's tanhf is amplified; excused when
//            |gpu - cpu| <= 2^-22 |x| + 1 ulp of the output, and counted.
// Tests named *Small* use tiny sizes, for compute-sanitizer (cache off, so that memcheck
// sees each allocation's true bounds), e.g.
//   SPARSE3D_NO_CACHING=1 compute-sanitizer --error-exitcode 1 --tool memcheck
//       build/bin/sparse3d_gpu_tests --gtest_filter='KernelsGpu.*Small*'
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cmath>
#include <vector>

#include "core/cuda_util.h"
#include "gpu_test_util.h"
#include "kernels/elementwise.h"
#include "kernels/embedding.h"
#include "kernels/layernorm.h"
#include "kernels/qk_norm_rope.h"
#include "kernels/sampler_ops.h"

namespace s3d {
namespace {

using test::Contract;
using test::meets;
using test::on_gpu;
using test::poisoned;
using test::random_tensor;
using test::tag;

constexpr DType kFloatTypes[] = {DType::BF16, DType::F32};
constexpr int64_t kC = 1536, kH = 12, kD = 128, kMlp = 8192;
const int64_t kLargeT[] = {1000, 30227};

// ---- unary float maps: cast, silu, gelu_tanh ----

using UnaryOp = void (*)(const Tensor&, Tensor&);

// Runs op on CPU and GPU. `offset_rows` > 0 views the input from row 1 of a taller tensor, so
// that odd widths give pointers that are not 16-byte aligned (the scalar path).
void check_unary(UnaryOp op, const char* name, const Shape& s, DType in, DType out_t,
                 Contract contract, float scale, bool unaligned = false,
                 const test::Excuse& excuse = {}) {
  Shape tall = s;
  tall[0] += unaligned ? 1 : 0;
  Tensor x_full = random_tensor(tall, in, 1000 + s.back(), scale);
  Tensor x = unaligned ? x_full.rows(1, tall[0]) : x_full;
  Tensor x_gpu_full = on_gpu(x_full);
  Tensor x_gpu = unaligned ? x_gpu_full.rows(1, tall[0]) : x_gpu_full;
  Tensor cpu_out = poisoned(s, out_t, Device::CPU);
  Tensor gpu_out = poisoned(s, out_t, Device::CUDA);
  op(x, cpu_out);
  op(x_gpu, gpu_out);
  EXPECT_TRUE(meets(gpu_out, cpu_out, contract,
                    tag(name, s, in, out_t) + (unaligned ? " unaligned" : ""), excuse));
}

const Shape kOddShapes[] = {{1, 13}, {7, 200}, {7, 13}, {1, 1536}};

TEST(KernelsGpu, CastSmall) {
  S3D_REQUIRE_CUDA();
  for (const Shape& s : kOddShapes)
    for (DType in : kFloatTypes)
      for (DType out_t : kFloatTypes)
        for (bool unaligned : {false, true})
          check_unary(kernels::cast, "cast", s, in, out_t, Contract::Bitwise, 3.0f, unaligned);
}

TEST(KernelsGpu, CastLarge) {
  S3D_REQUIRE_CUDA();
  for (int64_t T : kLargeT) {
    check_unary(kernels::cast, "cast", {T, kC}, DType::F32, DType::BF16, Contract::Bitwise, 3.0f);
    check_unary(kernels::cast, "cast", {T, kC}, DType::BF16, DType::F32, Contract::Bitwise, 3.0f);
  }
}

TEST(KernelsGpu, SiluSmall) {
  S3D_REQUIRE_CUDA();
  for (const Shape& s : kOddShapes)
    for (DType in : kFloatTypes)
      for (DType out_t : kFloatTypes)
        for (bool unaligned : {false, true})
          check_unary(kernels::silu, "silu", s, in, out_t, Contract::Close, 4.0f, unaligned);
}

TEST(KernelsGpu, SiluLarge) {
  S3D_REQUIRE_CUDA();
  check_unary(kernels::silu, "silu", {2, kC}, DType::F32, DType::F32, Contract::Close, 4.0f);
  for (int64_t T : kLargeT)
    check_unary(kernels::silu, "silu", {T, kC}, DType::BF16, DType::BF16, Contract::Close, 4.0f);
}

// gelu's excuse: y = 0.5 x (1 + tanh(inner)) with tanh near -1 (spacing 2^-24 there); two
// ulps of tanh move y by 2^-24 |x|, plus one ulp of the rounded output.
test::Excuse gelu_cancellation(const Tensor& x, DType out_t) {
  std::vector<float> xv = x.to_floats();
  return [xv = std::move(xv), out_t](size_t i, double gpu, double cpu) {
    const double ulp = out_t == DType::BF16 ? test::bf16_ulp(cpu) : test::f32_ulp(cpu);
    return xv[i] < 0.0f && std::fabs(gpu - cpu) <= std::ldexp(std::fabs(xv[i]), -22) + ulp;
  };
}

void check_gelu(const Shape& s, DType in, DType out_t, bool unaligned) {
  Shape tall = s;
  tall[0] += unaligned ? 1 : 0;
  Tensor x_full = random_tensor(tall, in, 2000 + s.back(), 2.0f);
  Tensor x = unaligned ? x_full.rows(1, tall[0]) : x_full;
  Tensor x_gpu_full = on_gpu(x_full);
  Tensor x_gpu = unaligned ? x_gpu_full.rows(1, tall[0]) : x_gpu_full;
  Tensor cpu_out = poisoned(s, out_t, Device::CPU);
  Tensor gpu_out = poisoned(s, out_t, Device::CUDA);
  kernels::gelu_tanh(x, cpu_out);
  kernels::gelu_tanh(x_gpu, gpu_out);
  EXPECT_TRUE(meets(gpu_out, cpu_out, Contract::Close,
                    tag("gelu_tanh", s, in, out_t) + (unaligned ? " unaligned" : ""),
                    gelu_cancellation(x, out_t)));
}

TEST(KernelsGpu, GeluTanhSmall) {
  S3D_REQUIRE_CUDA();
  for (const Shape& s : kOddShapes)
    for (DType in : kFloatTypes)
      for (DType out_t : kFloatTypes)
        for (bool unaligned : {false, true}) check_gelu(s, in, out_t, unaligned);
}

TEST(KernelsGpu, GeluTanhLarge) {
  S3D_REQUIRE_CUDA();
  for (int64_t T : kLargeT) check_gelu({T, kMlp}, DType::BF16, DType::BF16, false);
}

// ---- add, mul ----

void check_binary(const Shape& s, const Shape& bs, DType ta, DType tb, DType to, bool unaligned) {
  Shape tall = s;
  tall[0] += unaligned ? 1 : 0;
  Tensor a_full = random_tensor(tall, ta, 3000 + s.back(), 2.0f);
  Tensor a = unaligned ? a_full.rows(1, tall[0]) : a_full;
  Tensor a_gpu_full = on_gpu(a_full);
  Tensor a_gpu = unaligned ? a_gpu_full.rows(1, tall[0]) : a_gpu_full;
  Tensor b = random_tensor(bs, tb, 3001 + s.back(), 2.0f);
  Tensor b_gpu = on_gpu(b);
  const std::string what = cat(shape_str(s), " ", dtype_name(ta), " ", shape_str(bs), " ",
                               dtype_name(tb), " -> ", dtype_name(to), unaligned ? " unaligned" : "");
  Tensor cpu_out = poisoned(s, to, Device::CPU);
  Tensor gpu_out = poisoned(s, to, Device::CUDA);
  kernels::add(a, b, cpu_out);
  kernels::add(a_gpu, b_gpu, gpu_out);
  EXPECT_TRUE(meets(gpu_out, cpu_out, Contract::Bitwise, "add " + what));
  cpu_out.poison();
  gpu_out.poison();
  kernels::mul(a, b, cpu_out);
  kernels::mul(a_gpu, b_gpu, gpu_out);
  EXPECT_TRUE(meets(gpu_out, cpu_out, Contract::Bitwise, "mul " + what));
}

TEST(KernelsGpu, AddMulSmall) {
  S3D_REQUIRE_CUDA();
  for (const Shape& s : kOddShapes)
    for (bool broadcast : {false, true})
      for (DType ta : kFloatTypes)
        for (DType tb : kFloatTypes)
          for (DType to : kFloatTypes)
            for (bool unaligned : {false, true})
              check_binary(s, broadcast ? Shape{s.back()} : s, ta, tb, to, unaligned);
}

TEST(KernelsGpu, AddMulLarge) {
  S3D_REQUIRE_CUDA();
  // block.modulation (f32 [6C]) + shared modulation (bf16 [B, 6C]) -> bf16
  check_binary({2, 6 * kC}, {6 * kC}, DType::BF16, DType::F32, DType::BF16, false);
  for (int64_t T : kLargeT) {
    check_binary({T, kC}, {T, kC}, DType::BF16, DType::BF16, DType::BF16, false);
    check_binary({T, kC}, {kC}, DType::BF16, DType::F32, DType::F32, false);
  }
}

// ---- add_scalar, gather_rows, copy_rows ----

void check_add_scalar(int64_t B, int64_t C, DType in, DType to) {
  Tensor mod = random_tensor({B, 6 * C}, in, 4000 + C, 0.5f);
  Tensor mod_gpu = on_gpu(mod);
  Tensor cpu_out = poisoned({B, C}, to, Device::CPU);
  Tensor gpu_out = poisoned({B, C}, to, Device::CUDA);
  kernels::add_scalar(RowView::columns(mod, 4 * C, C), 1.0f, cpu_out);  // 1 + scale_mlp
  kernels::add_scalar(RowView::columns(mod_gpu, 4 * C, C), 1.0f, gpu_out);
  EXPECT_TRUE(meets(gpu_out, cpu_out, Contract::Bitwise, tag("add_scalar", {B, C}, in, to)));
}

TEST(KernelsGpu, AddScalarSmall) {
  S3D_REQUIRE_CUDA();
  for (DType in : kFloatTypes)
    for (DType to : kFloatTypes)
      for (int64_t C : {13, 200}) check_add_scalar(3, C, in, to);
}

TEST(KernelsGpu, AddScalarLarge) {
  S3D_REQUIRE_CUDA();
  check_add_scalar(2, kC, DType::BF16, DType::BF16);
  check_add_scalar(10, kC, DType::F32, DType::BF16);
}

void check_gather(int64_t T, int64_t B, int64_t C, DType dt) {
  Tensor mod = random_tensor({B, 6 * C}, dt, 5000 + C);
  Tensor mod_gpu = on_gpu(mod);
  Tensor index = test::random_ints({T}, 5001 + T, 0, static_cast<int>(B));
  Tensor index_gpu = on_gpu(index);
  Tensor cpu_out = poisoned({T, C}, dt, Device::CPU);
  Tensor gpu_out = poisoned({T, C}, dt, Device::CUDA);
  kernels::gather_rows(RowView::columns(mod, 2 * C, C), index, cpu_out);  // gate_msa
  kernels::gather_rows(RowView::columns(mod_gpu, 2 * C, C), index_gpu, gpu_out);
  EXPECT_TRUE(meets(gpu_out, cpu_out, Contract::Bitwise, tag("gather_rows", {T, C}, dt, dt)));
}

TEST(KernelsGpu, GatherRowsSmall) {
  S3D_REQUIRE_CUDA();
  for (DType dt : kFloatTypes)
    for (int64_t T : {1, 7})
      for (int64_t C : {13, 200}) check_gather(T, 3, C, dt);
}

TEST(KernelsGpu, GatherRowsLarge) {
  S3D_REQUIRE_CUDA();
  for (int64_t T : kLargeT) {
    check_gather(T, 3, kC, DType::BF16);
    check_gather(T, 3, kC, DType::F32);
  }
}

// Copies the k slot of a packed [T, 3, H, D] buffer into the v slot of another; the q and k
// slots of the destination must keep their poison.
void check_copy_rows(int64_t T, int64_t H, int64_t D) {
  const int64_t HD = H * D;
  Tensor src = random_tensor({T, 3, H, D}, DType::BF16, 6000 + D);
  Tensor src_gpu = on_gpu(src);
  Tensor cpu_dst = poisoned({T, 3, H, D}, DType::BF16, Device::CPU);
  Tensor gpu_dst = poisoned({T, 3, H, D}, DType::BF16, Device::CUDA);
  RowView cpu_view = RowView::columns(cpu_dst, 2 * HD, HD);
  RowView gpu_view = RowView::columns(gpu_dst, 2 * HD, HD);
  kernels::copy_rows(RowView::columns(src, HD, HD), cpu_view);
  kernels::copy_rows(RowView::columns(src_gpu, HD, HD), gpu_view);
  const Tensor got = gpu_dst.to(Device::CPU);
  int64_t written_outside = 0;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t c = 0; c < 2 * HD; ++c)
      written_outside += got.data_as<uint16_t>()[t * 3 * HD + c] != 0xFFFF;
  EXPECT_EQ(written_outside, 0) << "copy_rows wrote outside its destination view";
  // Only the destination slot is compared: the rest is poison (NaN) on both sides.
  Tensor cpu_v = Tensor::empty({T, HD}, DType::BF16, Device::CPU);
  Tensor gpu_v = Tensor::empty({T, HD}, DType::BF16, Device::CUDA);
  RowView cv = RowView::of(cpu_v), gv = RowView::of(gpu_v);
  kernels::copy_rows(cpu_view, cv);
  kernels::copy_rows(gpu_view, gv);
  EXPECT_TRUE(meets(gpu_v, cpu_v, Contract::Bitwise,
                    cat("copy_rows T ", T, " H ", H, " D ", D)));
}

TEST(KernelsGpu, CopyRowsSmall) {
  S3D_REQUIRE_CUDA();
  for (int64_t T : {1, 7}) {
    check_copy_rows(T, 2, 12);  // rows of 48 bytes: 16-byte words
    check_copy_rows(T, 3, 10);  // rows of 60 bytes: element words
  }
}

TEST(KernelsGpu, CopyRowsLarge) {
  S3D_REQUIRE_CUDA();
  for (int64_t T : kLargeT) check_copy_rows(T, kH, kD);
}

// ---- layer_norm ----

void check_layer_norm(int64_t T, int64_t C, DType in, DType to, bool affine, float eps,
                      bool unaligned = false) {
  Tensor x_full = random_tensor({T + (unaligned ? 1 : 0), C}, in, 7000 + C, 2.0f, 0.5f);
  Tensor x = unaligned ? x_full.rows(1, T + 1) : x_full;
  Tensor x_gpu_full = on_gpu(x_full);
  Tensor x_gpu = unaligned ? x_gpu_full.rows(1, T + 1) : x_gpu_full;
  Tensor w = random_tensor({C}, DType::F32, 7001 + C, 0.3f, 1.0f);
  Tensor b = random_tensor({C}, DType::F32, 7002 + C, 0.3f);
  Tensor w_gpu = on_gpu(w), b_gpu = on_gpu(b);
  Tensor cpu_out = poisoned({T, C}, to, Device::CPU);
  Tensor gpu_out = poisoned({T, C}, to, Device::CUDA);
  kernels::layer_norm(x, affine ? &w : nullptr, affine ? &b : nullptr, eps, cpu_out);
  kernels::layer_norm(x_gpu, affine ? &w_gpu : nullptr, affine ? &b_gpu : nullptr, eps, gpu_out);
  EXPECT_TRUE(meets(gpu_out, cpu_out, Contract::Close,
                    tag("layer_norm", {T, C}, in, to) + (affine ? " affine" : "") +
                        (unaligned ? " unaligned" : "")));
}

TEST(KernelsGpu, LayerNormSmall) {
  S3D_REQUIRE_CUDA();
  for (int64_t T : {1, 7})
    for (int64_t C : {13, 200, 1536})
      for (DType in : kFloatTypes)
        for (DType to : kFloatTypes)
          for (bool affine : {false, true}) {
            check_layer_norm(T, C, in, to, affine, 1e-6f);
            check_layer_norm(T, C, in, to, affine, 1e-6f, true);
          }
}

TEST(KernelsGpu, LayerNormLarge) {
  S3D_REQUIRE_CUDA();
  for (int64_t T : kLargeT) {
    check_layer_norm(T, kC, DType::BF16, DType::BF16, false, 1e-6f);  // norm1, norm3
    check_layer_norm(T, kC, DType::BF16, DType::BF16, true, 1e-6f);   // norm2
    check_layer_norm(T, kC, DType::F32, DType::F32, false, 1e-5f);    // final norm
  }
  check_layer_norm(1000, kMlp, DType::F32, DType::BF16, true, 1e-6f);
  check_layer_norm(1000, kMlp + 8, DType::BF16, DType::BF16, false, 1e-6f);
  check_layer_norm(7, 20000, DType::BF16, DType::F32, false, 1e-6f);
}

// ---- head_rmsnorm, rope ----

// The q and k slots of a packed [T, 3, H, D] buffer (self-attention).
void check_head_rmsnorm(int64_t T, int64_t H, int64_t D) {
  Tensor qkv = random_tensor({T, 3, H, D}, DType::BF16, 8000 + D, 1.5f);
  Tensor qkv_gpu = on_gpu(qkv);
  Tensor gamma = random_tensor({H, D}, DType::F32, 8001 + D, 0.3f, 1.0f);
  Tensor gamma_gpu = on_gpu(gamma);
  for (int64_t slot : {0, 1}) {
    Tensor cpu_out = poisoned({T, H, D}, DType::BF16, Device::CPU);
    Tensor gpu_out = poisoned({T, H, D}, DType::BF16, Device::CUDA);
    kernels::head_rmsnorm(RowView::columns(qkv, slot * H * D, H * D), gamma, H, D, cpu_out);
    kernels::head_rmsnorm(RowView::columns(qkv_gpu, slot * H * D, H * D), gamma_gpu, H, D,
                          gpu_out);
    EXPECT_TRUE(meets(gpu_out, cpu_out, Contract::Close,
                      cat("head_rmsnorm T ", T, " H ", H, " D ", D, " slot ", slot)));
  }
}

TEST(KernelsGpu, HeadRmsNormSmall) {
  S3D_REQUIRE_CUDA();
  for (int64_t T : {1, 7}) {
    check_head_rmsnorm(T, 2, 64);
    check_head_rmsnorm(T, 3, 10);  // D % 4 != 0: scalar path
    check_head_rmsnorm(T, 12, 128);
  }
}

TEST(KernelsGpu, HeadRmsNormLarge) {
  S3D_REQUIRE_CUDA();
  for (int64_t T : kLargeT) check_head_rmsnorm(T, kH, kD);
  // Cross-attention K: the k slot of [B, L, 2, H, D] (rows = B * L, stride 2HD).
  const int64_t BL = 2 * 4101;
  Tensor kv = random_tensor({BL, 2, kH, kD}, DType::BF16, 8100, 1.5f);
  Tensor kv_gpu = on_gpu(kv);
  Tensor gamma = random_tensor({kH, kD}, DType::F32, 8101, 0.3f, 1.0f);
  Tensor gamma_gpu = on_gpu(gamma);
  Tensor cpu_out = poisoned({BL, kH, kD}, DType::BF16, Device::CPU);
  Tensor gpu_out = poisoned({BL, kH, kD}, DType::BF16, Device::CUDA);
  kernels::head_rmsnorm(RowView::columns(kv, 0, kH * kD), gamma, kH, kD, cpu_out);
  kernels::head_rmsnorm(RowView::columns(kv_gpu, 0, kH * kD), gamma_gpu, kH, kD, gpu_out);
  EXPECT_TRUE(meets(gpu_out, cpu_out, Contract::Close, "head_rmsnorm cross-attention k"));
}

void check_rope_phases(int64_t T, int head_dim) {
  const int64_t half = head_dim / 2;
  Tensor coords = test::random_coords(T, 9000 + T);
  Tensor coords_gpu = on_gpu(coords);
  Tensor cc = poisoned({T, half}, DType::F32, Device::CPU);
  Tensor cs = poisoned({T, half}, DType::F32, Device::CPU);
  Tensor gc = poisoned({T, half}, DType::F32, Device::CUDA);
  Tensor gs = poisoned({T, half}, DType::F32, Device::CUDA);
  kernels::rope_phases(coords, head_dim, 1.0f, 10000.0f, cc, cs);
  kernels::rope_phases(coords_gpu, head_dim, 1.0f, 10000.0f, gc, gs);
  EXPECT_TRUE(meets(gc, cc, Contract::Close, cat("rope_phases cos T ", T, " D ", head_dim)));
  EXPECT_TRUE(meets(gs, cs, Contract::Close, cat("rope_phases sin T ", T, " D ", head_dim)));
}

TEST(KernelsGpu, RopePhasesSmall) {
  S3D_REQUIRE_CUDA();
  for (int64_t T : {1, 7})
    for (int head_dim : {128, 64, 10, 2}) check_rope_phases(T, head_dim);
}

TEST(KernelsGpu, RopePhasesLarge) {
  S3D_REQUIRE_CUDA();
  for (int64_t T : kLargeT) check_rope_phases(T, kD);
}

// Phases from rope_phases on the CPU (the same tables feed both sides).
void check_rope_apply(int64_t T, int64_t H, int64_t D) {
  Tensor coords = test::random_coords(T, 9100 + T);
  Tensor cos_t = Tensor::empty({T, D / 2}, DType::F32, Device::CPU);
  Tensor sin_t = Tensor::empty({T, D / 2}, DType::F32, Device::CPU);
  kernels::rope_phases(coords, static_cast<int>(D), 1.0f, 10000.0f, cos_t, sin_t);
  Tensor x = random_tensor({T, H, D}, DType::BF16, 9101 + D, 2.0f);
  Tensor cpu_out = poisoned({T, H, D}, DType::BF16, Device::CPU);
  Tensor gpu_out = poisoned({T, H, D}, DType::BF16, Device::CUDA);
  kernels::rope_apply(x, cos_t, sin_t, cpu_out);
  kernels::rope_apply(on_gpu(x), on_gpu(cos_t), on_gpu(sin_t), gpu_out);
  EXPECT_TRUE(meets(gpu_out, cpu_out, Contract::Bitwise, cat("rope_apply T ", T, " H ", H, " D ", D)));
}

TEST(KernelsGpu, RopeApplySmall) {
  S3D_REQUIRE_CUDA();
  for (int64_t T : {1, 7}) {
    check_rope_apply(T, 2, 64);
    check_rope_apply(T, 3, 10);  // D % 8 != 0: one pair per thread
  }
}

TEST(KernelsGpu, RopeApplyLarge) {
  S3D_REQUIRE_CUDA();
  for (int64_t T : kLargeT) check_rope_apply(T, kH, kD);
}

// ---- embeddings ----

void check_timestep(const std::vector<float>& t, int64_t dim) {
  const int64_t B = static_cast<int64_t>(t.size());
  Tensor tt = Tensor::from_floats(t, {B}, DType::F32);
  Tensor cpu_out = poisoned({B, dim}, DType::F32, Device::CPU);
  Tensor gpu_out = poisoned({B, dim}, DType::F32, Device::CUDA);
  kernels::timestep_embedding(tt, cpu_out);
  kernels::timestep_embedding(on_gpu(tt), gpu_out);
  EXPECT_TRUE(meets(gpu_out, cpu_out, Contract::Close, cat("timestep_embedding B ", B, " dim ", dim)));
}

TEST(KernelsGpu, TimestepEmbeddingSmall) {
  S3D_REQUIRE_CUDA();
  check_timestep({1000.0f}, 256);
  check_timestep({1000.0f, 999.3f, 437.25f, 12.5f, 0.75f, 0.0f, 600.0f}, 256);
  check_timestep({1000.0f, 3.5f}, 7);
}

void check_ape(int64_t T, int64_t C) {
  Tensor coords = test::random_coords(T, 9200 + T);
  Tensor cpu_out = poisoned({T, C}, DType::F32, Device::CPU);
  Tensor gpu_out = poisoned({T, C}, DType::F32, Device::CUDA);
  kernels::ape_embedding(coords, cpu_out);
  kernels::ape_embedding(on_gpu(coords), gpu_out);
  EXPECT_TRUE(meets(gpu_out, cpu_out, Contract::Close, cat("ape_embedding T ", T, " C ", C)));
}

TEST(KernelsGpu, ApeEmbeddingSmall) {
  S3D_REQUIRE_CUDA();
  for (int64_t T : {1, 7})
    for (int64_t C : {200, 7, 1536}) check_ape(T, C);
}

TEST(KernelsGpu, ApeEmbeddingLarge) {
  S3D_REQUIRE_CUDA();
  for (int64_t T : kLargeT) check_ape(T, kC);
}

// ---- sampler ----

void check_sampler_maps(const Shape& s) {
  Tensor x = random_tensor(s, DType::F32, 9300 + s[0]);
  Tensor v = random_tensor(s, DType::F32, 9301 + s[0], 1.5f);
  Tensor xg = on_gpu(x), vg = on_gpu(v);
  Tensor co = poisoned(s, DType::F32, Device::CPU), go = poisoned(s, DType::F32, Device::CUDA);
  const float a = 1.0f - 1e-5f, b = 1e-5f + (1.0f - 1e-5f) * 0.73f;
  kernels::cfg_combine(x, v, 7.5f, -6.5f, co);
  kernels::cfg_combine(xg, vg, 7.5f, -6.5f, go);
  EXPECT_TRUE(meets(go, co, Contract::Bitwise, "cfg_combine " + shape_str(s)));
  co.poison();
  go.poison();
  kernels::euler_step(x, v, 0.0625f, co);
  kernels::euler_step(xg, vg, 0.0625f, go);
  EXPECT_TRUE(meets(go, co, Contract::Bitwise, "euler_step " + shape_str(s)));
  co.poison();
  go.poison();
  kernels::axpby_sub(x, a, v, b, co);
  kernels::axpby_sub(xg, a, vg, b, go);
  EXPECT_TRUE(meets(go, co, Contract::Bitwise, "axpby_sub " + shape_str(s)));
  co.poison();
  go.poison();
  kernels::xstart_to_pred(x, a, v, b, co);
  kernels::xstart_to_pred(xg, a, vg, b, go);
  EXPECT_TRUE(meets(go, co, Contract::Bitwise, "xstart_to_pred " + shape_str(s)));
}

TEST(KernelsGpu, SamplerMapsSmall) {
  S3D_REQUIRE_CUDA();
  for (const Shape& s : {Shape{1, 32}, Shape{7, 13}, Shape{7, 32}}) check_sampler_maps(s);
}

TEST(KernelsGpu, SamplerMapsLarge) {
  S3D_REQUIRE_CUDA();
  for (int64_t T : kLargeT) check_sampler_maps({T, 32});
}

// asset_std, then guidance_rescale with those stds, over assets of the given token counts.
void check_std_and_rescale(const std::vector<int32_t>& counts, int64_t C) {
  std::vector<int32_t> offsets = {0}, batch;
  for (size_t b = 0; b < counts.size(); ++b) {
    offsets.push_back(offsets.back() + counts[b]);
    batch.insert(batch.end(), counts[b], static_cast<int32_t>(b));
  }
  const int64_t T = offsets.back(), B = static_cast<int64_t>(counts.size());
  Tensor off = Tensor::from_ints(offsets, {B + 1});
  Tensor bi = Tensor::from_ints(batch, {T});
  Tensor pos = random_tensor({T, C}, DType::F32, 9400 + T, 0.9f, 0.1f);
  Tensor cfg = random_tensor({T, C}, DType::F32, 9401 + T, 2.5f, -0.2f);
  Tensor sp_c = poisoned({B}, DType::F32, Device::CPU), sc_c = poisoned({B}, DType::F32, Device::CPU);
  Tensor sp_g = poisoned({B}, DType::F32, Device::CUDA), sc_g = poisoned({B}, DType::F32, Device::CUDA);
  kernels::asset_std(pos, off, sp_c);
  kernels::asset_std(cfg, off, sc_c);
  Tensor off_g = on_gpu(off), pos_g = on_gpu(pos), cfg_g = on_gpu(cfg);
  kernels::asset_std(pos_g, off_g, sp_g);
  kernels::asset_std(cfg_g, off_g, sc_g);
  const std::string what = cat(B, " assets, T ", T, " C ", C);
  EXPECT_TRUE(meets(sp_g, sp_c, Contract::Close, "asset_std " + what));
  EXPECT_TRUE(meets(sc_g, sc_c, Contract::Close, "asset_std " + what));
  // The rescale itself is bitwise: feed both sides the CPU's stds.
  Tensor out_c = poisoned({T, C}, DType::F32, Device::CPU);
  Tensor out_g = poisoned({T, C}, DType::F32, Device::CUDA);
  kernels::guidance_rescale(cfg, sp_c, sc_c, bi, 0.5f, 0.5f, out_c);
  kernels::guidance_rescale(cfg_g, on_gpu(sp_c), on_gpu(sc_c), on_gpu(bi), 0.5f, 0.5f, out_g);
  EXPECT_TRUE(meets(out_g, out_c, Contract::Bitwise, "guidance_rescale " + what));
}

TEST(KernelsGpu, AssetStdAndRescaleSmall) {
  S3D_REQUIRE_CUDA();
  check_std_and_rescale({1}, 32);
  check_std_and_rescale({1, 7, 3}, 13);
}

TEST(KernelsGpu, AssetStdAndRescaleLarge) {
  S3D_REQUIRE_CUDA();
  check_std_and_rescale({3664, 30227, 11833}, 32);
  check_std_and_rescale({1000}, kC);
}

// ---- plumbing: devices, launch counts, stream capture ----

TEST(KernelsGpu, MixedDevicesAreRejectedSmall) {
  S3D_REQUIRE_CUDA();
  Tensor a = random_tensor({2, 8}, DType::F32, 1);
  Tensor a_gpu = on_gpu(a);
  Tensor out_gpu = Tensor::empty({2, 8}, DType::F32, Device::CUDA);
  EXPECT_TRUE(test::throws_error([&] { kernels::add(a, a_gpu, out_gpu); },
                                 {"add", "different devices", "cpu", "cuda"}));
  EXPECT_TRUE(test::throws_error([&] { kernels::layer_norm(a, nullptr, nullptr, 1e-6f, out_gpu); },
                                 {"layer_norm", "different devices"}));
  Tensor gamma = random_tensor({1, 8}, DType::F32, 2);
  Tensor q = random_tensor({2, 8}, DType::BF16, 3);
  Tensor q_out = Tensor::empty({2, 1, 8}, DType::BF16, Device::CUDA);
  EXPECT_TRUE(test::throws_error(
      [&] { kernels::head_rmsnorm(RowView::of(on_gpu(q)), gamma, 1, 8, q_out); },
      {"head_rmsnorm", "different devices", "gamma"}));
  Tensor t = Tensor::from_floats({1.0f}, {1}, DType::F32);
  Tensor emb = Tensor::empty({1, 8}, DType::F32, Device::CUDA);
  EXPECT_TRUE(test::throws_error([&] { kernels::timestep_embedding(t, emb); },
                                 {"timestep_embedding", "different devices"}));
  Tensor off = Tensor::from_ints({0, 2}, {2});
  Tensor std_out = Tensor::empty({1}, DType::F32, Device::CUDA);
  EXPECT_TRUE(test::throws_error([&] { kernels::asset_std(a_gpu, off, std_out); },
                                 {"asset_std", "different devices", "offsets"}));
}

// Each op is one kernel launch, counted under its own name.
TEST(KernelsGpu, EachOpIsOneCountedLaunchSmall) {
  S3D_REQUIRE_CUDA();
  Tensor x = on_gpu(random_tensor({7, 200}, DType::BF16, 1));
  Tensor y = Tensor::empty({7, 200}, DType::BF16, Device::CUDA);
  reset_launch_counts();
  kernels::layer_norm(x, nullptr, nullptr, 1e-6f, y);
  kernels::gelu_tanh(x, y);
  kernels::add(x, x, y);
  const LaunchCounts counts = launch_counts();
  EXPECT_EQ(counts.total, 3u);
  EXPECT_EQ(counts.by_op.at("layer_norm"), 1u);
  EXPECT_EQ(counts.by_op.at("gelu_tanh"), 1u);
  EXPECT_EQ(counts.by_op.at("add"), 1u);
}

// The ops run on current_stream() and never synchronise: a block of them can be captured
// into a CUDA graph (capture fails on any host synchronisation or use of the legacy stream),
// and replaying the graph gives the eager results bit for bit.
TEST(KernelsGpu, OpsAreGraphCapturableSmall) {
  S3D_REQUIRE_CUDA();
  const int64_t T = 7, H = 2, D = 64, C = H * D;
  Tensor x = on_gpu(random_tensor({T, C}, DType::BF16, 1));
  Tensor qkv = on_gpu(random_tensor({T, 3, H, D}, DType::BF16, 2));
  Tensor gamma = on_gpu(random_tensor({H, D}, DType::F32, 3, 0.3f, 1.0f));
  Tensor coords = on_gpu(test::random_coords(T, 4));
  Tensor mod = on_gpu(random_tensor({1, 6 * C}, DType::BF16, 5));
  Tensor batch = on_gpu(Tensor::from_ints(std::vector<int32_t>(T, 0), {T}));
  Tensor off = on_gpu(Tensor::from_ints({0, static_cast<int32_t>(T)}, {2}));
  Tensor lat = on_gpu(random_tensor({T, 32}, DType::F32, 6));
  Tensor tt = on_gpu(Tensor::from_floats({700.0f}, {1}, DType::F32));

  struct Outputs {
    Tensor ln, mod_rows, q, cos, sin, q_rot, act, emb, ape, step, stdv;
  };
  auto make_outputs = [&] {
    return Outputs{Tensor::empty({T, C}, DType::BF16, Device::CUDA),
                   Tensor::empty({T, C}, DType::BF16, Device::CUDA),
                   Tensor::empty({T, H, D}, DType::BF16, Device::CUDA),
                   Tensor::empty({T, D / 2}, DType::F32, Device::CUDA),
                   Tensor::empty({T, D / 2}, DType::F32, Device::CUDA),
                   Tensor::empty({T, H, D}, DType::BF16, Device::CUDA),
                   Tensor::empty({T, C}, DType::BF16, Device::CUDA),
                   Tensor::empty({1, 256}, DType::F32, Device::CUDA),
                   Tensor::empty({T, C}, DType::F32, Device::CUDA),
                   Tensor::empty({T, 32}, DType::F32, Device::CUDA),
                   Tensor::empty({1}, DType::F32, Device::CUDA)};
  };
  auto run_ops = [&](Outputs& o) {
    kernels::layer_norm(x, nullptr, nullptr, 1e-6f, o.ln);
    kernels::gather_rows(RowView::columns(mod, C, C), batch, o.mod_rows);
    kernels::head_rmsnorm(RowView::columns(qkv, 0, C), gamma, H, D, o.q);
    kernels::rope_phases(coords, D, 1.0f, 10000.0f, o.cos, o.sin);
    kernels::rope_apply(o.q, o.cos, o.sin, o.q_rot);
    kernels::gelu_tanh(o.ln, o.act);
    kernels::timestep_embedding(tt, o.emb);
    kernels::ape_embedding(coords, o.ape);
    kernels::euler_step(lat, lat, 0.1f, o.step);
    kernels::asset_std(lat, off, o.stdv);
  };

  Outputs eager = make_outputs();
  run_ops(eager);
  synchronize();

  Outputs captured = make_outputs();
  for (Tensor* t : {&captured.ln, &captured.mod_rows, &captured.q, &captured.cos, &captured.sin,
                    &captured.q_rot, &captured.act, &captured.emb, &captured.ape, &captured.step,
                    &captured.stdv})
    t->poison();
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  cudaStream_t previous = current_stream();
  set_current_stream(stream);
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
  run_ops(captured);
  cudaGraph_t graph = nullptr;
  const cudaError_t end = cudaStreamEndCapture(stream, &graph);
  set_current_stream(previous);
  ASSERT_EQ(end, cudaSuccess) << cudaGetErrorString(end);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);

  EXPECT_TRUE(meets(captured.ln, eager.ln, Contract::Bitwise, "graph layer_norm"));
  EXPECT_TRUE(meets(captured.mod_rows, eager.mod_rows, Contract::Bitwise, "graph gather_rows"));
  EXPECT_TRUE(meets(captured.q_rot, eager.q_rot, Contract::Bitwise, "graph head_rmsnorm+rope"));
  EXPECT_TRUE(meets(captured.act, eager.act, Contract::Bitwise, "graph gelu_tanh"));
  EXPECT_TRUE(meets(captured.emb, eager.emb, Contract::Bitwise, "graph timestep_embedding"));
  EXPECT_TRUE(meets(captured.ape, eager.ape, Contract::Bitwise, "graph ape_embedding"));
  EXPECT_TRUE(meets(captured.step, eager.step, Contract::Bitwise, "graph euler_step"));
  EXPECT_TRUE(meets(captured.stdv, eager.stdv, Contract::Bitwise, "graph asset_std"));
}

}  // namespace
}  // namespace s3d
