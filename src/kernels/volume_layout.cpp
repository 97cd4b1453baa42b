// Volume <-> token transposes: argument checks, device dispatch and the CPU oracle.
#include "kernels/volume_layout.h"

#include "kernels/kernel_checks.h"
#include "kernels/volume_layout_cuda.h"

namespace s3d::kernels {
namespace {

// The [B, C, N] reading of a volume, checked against the tokens [B N, C] it pairs with.
struct Dims {
  int64_t B = 0, C = 0, N = 0;
};

Dims check_pair(const char* op, const Tensor& volume, const Tensor& tokens) {
  detail::check_dtype(volume, DType::F32, op, "volume");
  detail::check_dtype(tokens, DType::F32, op, "tokens");
  S3D_CHECK(volume.ndim() >= 3, op, ": volume must be f32 [B, C, spatial...], got ",
            volume.describe());
  Dims d;
  d.B = volume.size(0);
  d.C = volume.size(1);
  d.N = d.B * d.C == 0 ? 0 : volume.numel() / (d.B * d.C);
  detail::check_shape(tokens, {d.B * d.N, d.C}, op, "tokens");
  detail::check_same_device(op, {{"volume", &volume}, {"tokens", &tokens}});
  return d;
}

namespace cpu {

// out[b, q, p] = in[b, p, q] for in [B, P, Q].
void transpose_batched(const float* in, int64_t B, int64_t P, int64_t Q, float* out) {
  for (int64_t b = 0; b < B; ++b)
    for (int64_t p = 0; p < P; ++p)
      for (int64_t q = 0; q < Q; ++q) out[(b * Q + q) * P + p] = in[(b * P + p) * Q + q];
}

}  // namespace cpu

void transpose(const Tensor& in, int64_t B, int64_t P, int64_t Q, Tensor& out) {
  if (B * P * Q == 0) return;
  if (in.is_cuda()) {
    cuda::transpose_batched(in, B, P, Q, out);
  } else {
    cpu::transpose_batched(in.data_as<float>(), B, P, Q, out.data_as<float>());
  }
}

}  // namespace

void volume_to_tokens(const Tensor& volume, Tensor& tokens) {
  const Dims d = check_pair("volume_to_tokens", volume, tokens);
  transpose(volume, d.B, d.C, d.N, tokens);  // [B, C, N] -> [B, N, C]
}

void tokens_to_volume(const Tensor& tokens, Tensor& volume) {
  const Dims d = check_pair("tokens_to_volume", volume, tokens);
  transpose(tokens, d.B, d.N, d.C, volume);  // [B, N, C] -> [B, C, N]
}

}  // namespace s3d::kernels
