// Synthetic payloads: voxelised procedural surfaces at an exact token count, layer-normalised
// Gaussian condition tokens, one noise seed per asset (docs/BENCHMARK.md, payloads).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "payload/payload.h"

namespace s3d::payload {

struct GenerateOptions {
  std::vector<int64_t> default_tokens;    // the "default" set
  std::vector<int64_t> long_tail_tokens;  // the "long-tail" set
  int grid = 64;
  int cond_tokens = 4101;
  int cond_channels = 1024;
  int concat_channels = 0;
  uint64_t seed = 2026;
  // Dense-model payloads: every asset is the whole grid^3 grid in raster order (the token
  // layout of SparseStructureFlowModel), so every token count must be grid^3.
  bool dense = false;

  // The benchmark's 10 assets from 3,664 to 30,227 tokens (log-spread, both ends) plus a
  // long tail up to 49,152, with DINOv3-shaped conditions.
  static GenerateOptions benchmark();
  // Two small assets and a small condition, for the CPU backend and the tiny preset.
  static GenerateOptions small();
  // The sparse-structure stage as TRELLIS.2's pipeline runs it: four structures on the
  // 16^3 grid (4,096 tokens each), 512-pixel DINOv3-shaped conditions (L = 1,029).
  static GenerateOptions dense_structure();
  // Two structures on an 8^3 grid with a small condition, for the tiny-ss preset.
  static GenerateOptions dense_small();
};

// What generate_payloads refuses from its options alone, before it allocates or writes
// anything (a condition of 2e9 tokens would otherwise end in an allocation failure, or in
// gigabytes written first): more than kMaxAssets assets; an asset file (coords, cond,
// concat_cond) of more than kMaxAssetBytes; all files together more than kMaxPayloadBytes.
// The benchmark set's largest asset file is some 9 MB, the whole set some 110 MB.
// (kMaxAssetBytes is payload.h's: what read_asset takes.)
inline constexpr size_t kMaxAssets = 1000;
inline constexpr uint64_t kMaxPayloadBytes = uint64_t{16} << 30;  // 16 GiB

// Throws s3d::Error naming what is out of range: the limits above, a token count that does
// not fit the grid (or is not the whole grid for dense payloads), a condition beyond what
// read_manifest accepts.
void check_options(const GenerateOptions& options);

// The whole grid^3 grid in raster order, i32 [grid^3, 4] with batch column 0: row
// n = (0, n / grid^2, (n / grid) mod grid, n mod grid).
Tensor full_grid(int grid);

// n values from lo to hi, spread evenly in log space, rounded, both ends exact.
std::vector<int64_t> log_spread(int64_t lo, int64_t hi, int n);

// Sorted, unique (x, y, z) voxels of a shell around a procedural surface (shape chosen by
// `shape_index`: sphere, torus, box, blob), exactly `tokens` of them. i32 [tokens, 4] with
// batch column 0. Throws if the grid cannot hold that many.
Tensor voxelize_surface(int shape_index, int64_t tokens, int grid, uint64_t seed);
const char* shape_name(int shape_index);

// Asset `index` of `tokens` tokens, its values drawn from `asset_seed`: the voxels of
// procedural shape `index` on o.grid (the whole grid when o.dense), a layer-normalised
// Gaussian condition [o.cond_tokens, o.cond_channels], a normal concat_cond [tokens,
// o.concat_channels] when o.concat_channels > 0, and a noise seed below 2^53. The manifest's
// assets are made with it, and so is the request of `sparse3d run --tokens`.
Asset make_asset(int index, int64_t tokens, uint64_t asset_seed, const GenerateOptions& o);

// Writes DIR/manifest.json and one asset file per entry; returns the manifest. The files are
// made in a hidden folder inside DIR and moved into place once all of them are written (the
// manifest last); a failure, or an interruption by a signal (io::remove_on_fatal_signals),
// removes what this call made, DIR too when it made it.
Manifest generate_payloads(const std::string& dir, const GenerateOptions& options);

}  // namespace s3d::payload
