#include "model/family.h"

#include <mutex>

#include "core/error.h"
#include "kernels/qk_norm_rope.h"
#include "model/dense/dense_family.h"
#include "model/slat/slat_family.h"

namespace s3d::model {
namespace {

// The registry: the built-in families, one row each, then those registered at run time.
struct Registry {
  std::mutex mutex;
  std::vector<std::unique_ptr<Family>> rows;

  Registry() {
    rows.push_back(std::make_unique<SLatFamily>());
    rows.push_back(std::make_unique<DenseFamily>());
  }
};

Registry& registry() {
  static Registry r;
  return r;
}

}  // namespace

const char* layout_name(AssetLayout l) { return l == AssetLayout::Grid ? "grid" : "tokens"; }

std::vector<const Family*> families() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  std::vector<const Family*> out;
  for (const auto& f : r.rows) out.push_back(f.get());
  return out;
}

const Family& find_family(const std::string& name) {
  std::string known;
  for (const Family* f : families()) {
    if (f->name() == name) return *f;
    known += (known.empty() ? "\"" : ", \"") + f->name() + "\"";
  }
  fail("unknown model family \"", name, "\" (known families: ", known, ")");
}

void register_family(std::unique_ptr<Family> family) {
  S3D_CHECK(family != nullptr, "register_family: no family given");
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  const std::string name = family->name();
  S3D_CHECK(!name.empty(), "register_family: a family needs a name");
  for (const auto& f : r.rows)
    S3D_CHECK(f->name() != name, "register_family: a family named \"", name,
              "\" is already registered");
  r.rows.push_back(std::move(family));
}

Tensor grid_coords(int batch, int resolution) {
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

void check_grid_coords(const Tensor& coords, int batch, int resolution, const std::string& who) {
  const int64_t r = resolution, n = r * r * r;
  S3D_CHECK(coords.size(0) == n * batch, "request coords: ", who, " (resolution ", r,
            ") takes the whole ", r, "^3 grid of each asset, ", n, " tokens x ", batch,
            " assets = ", n * batch, " rows; got ", coords.size(0));
  const int32_t* p = coords.data_as<int32_t>();
  for (int64_t row = 0; row < n * batch; ++row) {
    const int64_t b = row / n, t = row % n;
    const int32_t* q = p + 4 * row;
    const bool ok = q[0] == b && q[1] == t / (r * r) && q[2] == (t / r) % r && q[3] == t % r;
    S3D_CHECK(ok, "request coords row ", row, " is (", q[0], ", ", q[1], ", ", q[2], ", ", q[3],
              "); ", who, "'s tokens are each asset's grid in raster order, so it must be (", b,
              ", ", t / (r * r), ", ", (t / r) % r, ", ", t % r, ")");
  }
}

RopeTables rope_tables(const Tensor& coords, int head_dim, float freq0, float theta) {
  const int64_t T = coords.size(0);
  RopeTables t;
  t.cos = Tensor::empty({T, head_dim / 2}, DType::F32, coords.device());
  t.sin = Tensor::empty({T, head_dim / 2}, DType::F32, coords.device());
  kernels::rope_phases(coords, head_dim, freq0, theta, t.cos, t.sin);
  return t;
}

}  // namespace s3d::model
