// Requests the bench builds from payload assets: host tensors and the views that pass them
// to the Engine (which reads them in place).
#pragma once

#include "core/tensor.h"
#include "payload/payload.h"
#include "sparse3d/engine.h"

namespace s3d::bench {

// A view of `t` (host or device), valid while `t` lives.
sparse3d::TensorView view_of(const Tensor& t);

// K copies of one asset packed into one request of batch K (bench --batch): copy c's tokens
// carry batch index c, the conditions stack to [K, L, C], and copy c's noise is the asset's
// stream from element c x (T x out_channels) on, so every copy denoises its own sample
// (copy 0's is the asset's own noise).
struct PackedCopies {
  int batch = 0;
  Tensor coords;       // i32 [K T, 4]
  Tensor cond;         // [K, L, C], the asset's dtype
  Tensor noise;        // f32 [K T, out_channels]
  Tensor concat_cond;  // f32 [K T, concat channels] or undefined
};
PackedCopies pack_copies(const payload::Asset& asset, int copies, int64_t out_channels);

}  // namespace s3d::bench
