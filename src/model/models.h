// The model families by checkpoint config: one entry point that builds the right class.
#pragma once

#include <memory>

#include "model/checkpoint.h"
#include "model/slat_flow.h"

namespace s3d::model {

// SLatFlowModel or SparseStructureFlowModel (model/dense/), by checkpoint.config.family.
std::unique_ptr<SLatFlowModel> make_model(Checkpoint checkpoint);

}  // namespace s3d::model
