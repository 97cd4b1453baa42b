#include "model/models.h"

#include "model/dense/sparse_structure_flow.h"

namespace s3d::model {

std::unique_ptr<SLatFlowModel> make_model(Checkpoint checkpoint) {
  if (checkpoint.config.dense())
    return std::make_unique<SparseStructureFlowModel>(std::move(checkpoint));
  return std::make_unique<SLatFlowModel>(std::move(checkpoint));
}

}  // namespace s3d::model
