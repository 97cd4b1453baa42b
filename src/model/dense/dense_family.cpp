#include "model/dense/dense_family.h"

#include "core/error.h"
#include "kernels/embedding.h"

namespace s3d::model {
namespace {

// Every voxel of the volume is a token: R^3 per asset. 64^3 = 262,144 tokens is far above
// TRELLIS.2's 16^3 and keeps one asset's activations within a GPU.
constexpr int kMaxResolution = 64;

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

// One asset's tables, computed once on the host and kept on the model's device.
class GridTables : public Positions {
 public:
  GridTables(const ModelConfig& c, Device device) {
    // The kernels' CPU versions are the host computation: fp32 phases and frequencies, the C
    // library's cosf/sinf per element, as PyTorch's CPU kernels evaluate the original's tables.
    const Tensor coords = grid_coords(1, c.resolution);
    if (c.pe_mode == "rope") {
      RopeTables t = rope_tables(coords, c.head_dim(), 1.0f, 10000.0f);
      cos_ = t.cos.to(device);
      sin_ = t.sin.to(device);
    } else {
      Tensor ape = Tensor::empty({c.grid_tokens(), c.model_channels}, DType::F32, Device::CPU);
      kernels::ape_embedding(coords, ape);
      ape_ = ape.to(device);
    }
  }
  void apply(Request& r) const override {
    if (cos_.defined()) {
      r.rope_cos = tiled(cos_, r.batch);
      r.rope_sin = tiled(sin_, r.batch);
    }
    if (ape_.defined()) r.position_f32 = tiled(ape_, r.batch);
  }

 private:
  Tensor cos_, sin_, ape_;
};

}  // namespace

std::vector<std::pair<std::string, ModelConfig>> DenseFamily::presets() const {
  ModelConfig released;  // the released sparse-structure flow model: the 1024 blocks, 16^3
  released.family = name();
  released.resolution = 16;
  released.in_channels = released.out_channels = 8;
  ModelConfig tiny = released;  // tiny's blocks over an 8^3 grid of 8 channels
  tiny.resolution = 8;
  tiny.model_channels = 128;
  tiny.num_blocks = 2;
  tiny.num_heads = 2;
  tiny.mlp_ratio = 4.0;
  tiny.cond_channels = 64;
  return {{"trellis2-ss-16", released}, {"tiny-ss", tiny}};
}

void DenseFamily::check_config(const ModelConfig& c) const {
  S3D_CHECK(c.resolution <= kMaxResolution, "model config: a ", name(), " resolution of ",
            c.resolution, " means ", c.grid_tokens(), " tokens per asset; at most ",
            kMaxResolution, " (", int64_t(kMaxResolution) * kMaxResolution * kMaxResolution,
            " tokens) is accepted");
  S3D_CHECK(c.in_channels == c.out_channels, "model config: ", name(), " takes no concat_cond, "
            "so in_channels (", c.in_channels, ") must equal out_channels (", c.out_channels, ")");
}

void DenseFamily::check_coords(const ModelConfig& c, const Tensor& coords, int batch) const {
  check_grid_coords(coords, batch, c.resolution, "the dense model (" + name() + ")");
}

std::unique_ptr<Positions> DenseFamily::positions(const ModelConfig& c, Device device) const {
  return std::make_unique<GridTables>(c, device);
}

}  // namespace s3d::model
