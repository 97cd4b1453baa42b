// Model families: what differs between the transformers the engine runs, behind one interface,
// and the registry that maps a checkpoint config's "name" to its family.
//
// Every family of TRELLIS.2 is the same trunk (model/trunk/: adaLN-modulated blocks of
// self-attention, cross-attention to the condition tokens and an MLP, with the same weight
// names). A family says only what the trunk cannot know: its presets, its config rules, how
// its assets appear at the public API (the voxels a caller names, or a whole grid), its
// position tables, and the sampler rules that depend on it. The engine, the sampler, the CLI
// and the Python package read a family through this interface (and ModelInfo), never by name.
//
// Adding a family: a folder model/NAME/ with a class implementing Family, and one row in the
// registry table (family.cpp). A family defined outside the library (a test, a plug-in)
// registers itself with register_family() instead.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "model/config.h"
#include "model/trunk/request.h"

namespace s3d::model {

// How a family's assets appear at the public API.
//   Tokens: the caller names the active voxels (coords i32 [T, 4]); latents are [T, C].
//   Grid:   an asset is every voxel of the R^3 grid in raster order n = i R^2 + j R + k; coords
//           may be omitted, and then latents are volumes [B, C, R, R, R] (kernels/volume_layout.h).
enum class AssetLayout { Tokens, Grid };
const char* layout_name(AssetLayout l);  // "tokens", "grid"

// A model's position tables for its requests: made once per model (a family may precompute
// tables there), applied once per request.
class Positions {
 public:
  virtual ~Positions() = default;
  // Fills the request's position fields from r.coords and r.batch (on the model's device):
  // RoPE cos/sin (pe_mode "rope"), or an fp32 table added before the input layer's bf16
  // rounding (Request::position_f32). Leaving both empty in "ape" mode means the trunk's APE
  // of the coordinates, added after the rounding.
  virtual void apply(Request& r) const = 0;
};

class Family {
 public:
  virtual ~Family() = default;

  // The checkpoint config's "name", e.g. "SLatFlowModel".
  virtual std::string name() const = 0;
  // The built-in presets of this family (the CLI's and Python's make-checkpoint presets).
  virtual std::vector<std::pair<std::string, ModelConfig>> presets() const { return {}; }
  virtual AssetLayout layout() const { return AssetLayout::Tokens; }
  // The sampler preset a request of this family gets when it names none ("released", ...).
  virtual std::string sampler_preset() const { return "released"; }
  // Guidance rescale's per-asset standard deviation: unbiased (N - 1) or population (N).
  virtual bool unbiased_rescale_std() const { return false; }
  // Whether the config's rope_freq is used; when not, it is type-checked, then set to the
  // defaults [1, 10000] and not written back.
  virtual bool reads_rope_freq() const { return true; }
  // Throws unless the config (already valid for the trunk) is valid for this family.
  virtual void check_config(const ModelConfig&) const {}
  // Throws unless host coords i32 [T, 4] of `batch` assets are ones this family takes; runs
  // after the trunk's checks of the coordinates' shape and range, allocates nothing.
  virtual void check_coords(const ModelConfig&, const Tensor& /*coords*/, int /*batch*/) const {}
  // The model's position tables, built once when the model is made.
  virtual std::unique_ptr<Positions> positions(const ModelConfig& c, Device device) const = 0;
};

// The family whose name() is `name`; throws naming the known families.
const Family& find_family(const std::string& name);
// Every registered family, the built-in ones first, in registry order.
std::vector<const Family*> families();
// Adds a family defined outside the registry table; throws if its name is taken. Families are
// never removed: references returned by find_family stay valid.
void register_family(std::unique_ptr<Family> family);

// Grid layout: i32 [B R^3, 4] on the host, rows (b, n / R^2, (n / R) mod R, n mod R).
Tensor grid_coords(int batch, int resolution);
// Grid layout: throws unless `coords` are exactly grid_coords(batch, resolution), naming the
// first row that differs.
void check_grid_coords(const Tensor& coords, int batch, int resolution, const std::string& who);

// The RoPE tables of coordinates i32 [T, 4] on `device` (the kernel's rope_phases), f32
// [T, head_dim / 2] each.
struct RopeTables {
  Tensor cos, sin;
};
RopeTables rope_tables(const Tensor& coords, int head_dim, float freq0, float theta);

}  // namespace s3d::model
