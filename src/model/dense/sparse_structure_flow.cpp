#include "model/dense/sparse_structure_flow.h"

#include "core/error.h"
#include "kernels/embedding.h"
#include "kernels/qk_norm_rope.h"

namespace s3d::model {
namespace {

// The R^3 rows of `table` (one asset) repeated for each of `batch` assets.
Tensor tiled(const Tensor& table, int batch) {
  const int64_t n = table.size(0);
  Tensor out = Tensor::empty({n * batch, table.size(1)}, table.dtype(), table.device());
  for (int b = 0; b < batch; ++b) {
    Tensor rows = out.rows(b * n, (b + 1) * n);
    rows.copy_from(table);
  }
  return out;
}

}  // namespace

SparseStructureFlowModel::SparseStructureFlowModel(Checkpoint checkpoint)
    : SLatFlowModel(std::move(checkpoint)) {
  const ModelConfig& c = config();
  S3D_CHECK(c.dense(), "SparseStructureFlowModel: the checkpoint's config is a ",
            family_name(c.family), ", not a SparseStructureFlowModel");
  // The kernels' CPU versions are the host computation: fp32 phases and frequencies, the C
  // library's cosf/sinf per element, as PyTorch's CPU kernels evaluate the original's tables.
  const Tensor coords = grid_coords(1, c.resolution);
  const int64_t n = c.grid_tokens();
  if (c.pe_mode == "rope") {
    const int half = c.head_dim() / 2;
    Tensor cos_h = Tensor::empty({n, half}, DType::F32, Device::CPU);
    Tensor sin_h = Tensor::empty({n, half}, DType::F32, Device::CPU);
    kernels::rope_phases(coords, c.head_dim(), 1.0f, 10000.0f, cos_h, sin_h);
    rope_cos_ = cos_h.to(device());
    rope_sin_ = sin_h.to(device());
  } else {
    Tensor ape_h = Tensor::empty({n, c.model_channels}, DType::F32, Device::CPU);
    kernels::ape_embedding(coords, ape_h);
    ape_ = ape_h.to(device());
  }
}

DenoiserSummary SparseStructureFlowModel::summary() const {
  DenoiserSummary s = SLatFlowModel::summary();
  s.family = family_name(ModelFamily::SparseStructureFlow);
  s.unbiased_rescale_std = true;
  return s;
}

Tensor SparseStructureFlowModel::grid_coords(int batch, int resolution) {
  const int64_t r = resolution, n = r * r * r;
  S3D_CHECK(batch >= 1 && resolution >= 1, "grid_coords: batch ", batch, " and resolution ",
            resolution, " must be positive");
  Tensor c = Tensor::empty({n * batch, 4}, DType::I32, Device::CPU);
  int32_t* p = c.data_as<int32_t>();
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t t = 0; t < n; ++t) {
      int32_t* row = p + 4 * (b * n + t);
      row[0] = static_cast<int32_t>(b);
      row[1] = static_cast<int32_t>(t / (r * r));
      row[2] = static_cast<int32_t>((t / r) % r);
      row[3] = static_cast<int32_t>(t % r);
    }
  }
  return c;
}

void SparseStructureFlowModel::check_request(const Tensor& coords, int batch, int cond_tokens,
                                             const Tensor& concat_cond) const {
  const ModelConfig& c = config();
  S3D_CHECK(batch >= 1, "request: needs at least one asset, got ", batch);
  check_tensor(coords, "request coords", DType::I32, {-1, 4});
  S3D_CHECK(coords.device() == Device::CPU, "request coords must be on the host");
  const int64_t n = c.grid_tokens(), r = c.resolution;
  S3D_CHECK(coords.size(0) == n * batch, "request coords: the dense model (",
            family_name(c.family), ", resolution ", r, ") takes the whole ", r, "^3 grid of each "
            "asset, ", n, " tokens x ", batch, " assets = ", n * batch, " rows; got ",
            coords.size(0));
  S3D_CHECK(!concat_cond.defined(), "request: concat_cond given, but ",
            family_name(c.family), " takes none");
  const int32_t* p = coords.data_as<int32_t>();
  for (int64_t row = 0; row < n * batch; ++row) {
    const int64_t b = row / n, t = row % n;
    const int32_t* q = p + 4 * row;
    const bool ok = q[0] == b && q[1] == t / (r * r) && q[2] == (t / r) % r && q[3] == t % r;
    S3D_CHECK(ok, "request coords row ", row, " is (", q[0], ", ", q[1], ", ", q[2], ", ", q[3],
              "); the dense model's tokens are each asset's grid in raster order, so it must "
              "be (", b, ", ", t / (r * r), ", ", (t / r) % r, ", ", t % r, ")");
  }
  SLatFlowModel::check_request(coords, batch, cond_tokens, concat_cond);
}

void SparseStructureFlowModel::position_tables(Request& r) const {
  if (rope_cos_.defined()) {
    r.rope_cos = tiled(rope_cos_, r.batch);
    r.rope_sin = tiled(rope_sin_, r.batch);
  }
  if (ape_.defined()) r.position_f32 = tiled(ape_, r.batch);
}

}  // namespace s3d::model
