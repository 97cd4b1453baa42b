// sparse3d public API: synthetic checkpoints, for tests, benchmarks and trying the engine
// without the released weights (what `sparse3d make-checkpoint` and `python -m
// sparse3d_engine make-checkpoint` write).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sparse3d/types.h"

namespace sparse3d {

// The model presets, by name: "trellis2-shape-1024", "trellis2-tex-1024", "tiny"
// (SLatFlowModel); "trellis2-ss-16", "tiny-ss" (SparseStructureFlowModel). The trellis2-*
// presets have the released models' shapes (1.3B parameters); the tiny ones run on the CPU
// backend in a fraction of a second.
std::vector<std::string> synthetic_presets();

struct SyntheticCheckpoint {
  std::string json_path;         // OUT.json (the config, as the released files)
  std::string safetensors_path;  // OUT.safetensors
  std::string family;            // "SLatFlowModel" or "SparseStructureFlowModel"
  int64_t parameters = 0;
};

// Writes OUT.json and OUT.safetensors (creating OUT's folder) with deterministic weights
// from `seed` (the same files for the same preset, seed and dtype on every machine), stored
// as `dtype`: BF16 (as released) or F32. Both files or neither. Throws Error naming the
// known presets for an unknown one.
SyntheticCheckpoint make_synthetic_checkpoint(const std::string& preset, uint64_t seed,
                                              const std::string& out_prefix,
                                              DType dtype = DType::BF16);

// The parameter count of a preset's model (what make_synthetic_checkpoint writes).
int64_t synthetic_parameter_count(const std::string& preset);

}  // namespace sparse3d
