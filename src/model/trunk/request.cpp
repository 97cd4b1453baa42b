#include "model/trunk/request.h"

#include "core/error.h"

namespace s3d::model {

size_t CondKV::bytes() const {
  size_t n = 0;
  for (const auto& t : kv) n += t.nbytes();
  for (const auto& t : k_normed) n += t.nbytes();
  return n;
}

Modulation Modulation::view(const Tensor& buffer, int num_blocks, int rows, int used) {
  S3D_CHECK(buffer.defined() && buffer.ndim() == 2 && buffer.size(0) == int64_t{num_blocks} * rows &&
                used >= 1 && used <= rows,
            "modulation view: expected a buffer of ", num_blocks, " x ", rows,
            " rows with 1..", rows, " used, got ", buffer.describe(), " with ", used, " used");
  Modulation m;
  for (int i = 0; i < num_blocks; ++i)
    m.blocks.push_back(buffer.rows(int64_t{i} * rows, int64_t{i} * rows + used));
  return m;
}

Tensor ModulationTable::step_buffer(int k) const {
  S3D_CHECK(k >= 0 && k < steps(), "modulation table: step ", k, " of ", steps());
  return storage.rows(k, k + 1).reshape({int64_t{num_blocks} * rows, width});
}

}  // namespace s3d::model
