#include "bench/packing.h"

#include <cstring>

#include "core/error.h"

namespace s3d::bench {

sparse3d::TensorView view_of(const Tensor& t) {
  sparse3d::TensorView v;
  v.data = const_cast<void*>(t.data());
  v.dtype = t.dtype();
  v.device = t.device();
  v.shape = t.shape();
  return v;
}

PackedCopies pack_copies(const payload::Asset& asset, int copies, int64_t out_channels) {
  S3D_CHECK(copies >= 1, "pack_copies: copies must be >= 1, got ", copies);
  const int64_t T = asset.coords.size(0), L = asset.cond.size(0), C = asset.cond.size(1);
  PackedCopies p;
  p.batch = copies;
  p.coords = Tensor::empty({copies * T, 4}, DType::I32, Device::CPU);
  p.cond = Tensor::empty({copies, L, C}, asset.cond.dtype(), Device::CPU);
  p.noise = Tensor::empty({copies * T, out_channels}, DType::F32, Device::CPU);
  if (asset.concat_cond.defined())
    p.concat_cond =
        Tensor::empty({copies * T, asset.concat_cond.size(1)}, DType::F32, Device::CPU);
  const uint64_t per_copy = static_cast<uint64_t>(T * out_channels);
  for (int c = 0; c < copies; ++c) {
    Tensor coords = p.coords.rows(c * T, (c + 1) * T);
    coords.copy_from(asset.coords);
    int32_t* rows = coords.data_as<int32_t>();
    for (int64_t t = 0; t < T; ++t) rows[4 * t] = c;
    p.cond.rows(c, c + 1).copy_from(asset.cond.reshape({1, L, C}));
    const sparse3d::Array noise =
        sparse3d::draw_noise(asset.noise_seed, T, out_channels, c * per_copy);
    std::memcpy(p.noise.rows(c * T, (c + 1) * T).data(), noise.view.data, noise.view.nbytes());
    if (p.concat_cond.defined())
      p.concat_cond.rows(c * T, (c + 1) * T).copy_from(asset.concat_cond);
  }
  return p;
}

}  // namespace s3d::bench
