// Payloads: what one asset's denoise needs besides the model. A manifest (JSON) lists the
// assets; each asset is one safetensors file holding its voxel coordinates and condition
// tokens. Every field is validated on read, with errors that name the file and the row.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace s3d::payload {

// The most bytes an asset file may hold (make-payloads writes no more) and so the most one
// of its tensors may: a released asset holds some 9 MB. read_asset refuses a larger tensor
// from the header, before it allocates or reads anything.
inline constexpr uint64_t kMaxAssetBytes = uint64_t{1} << 30;  // 1 GiB

struct ManifestEntry {
  std::string name;      // unique within the manifest
  std::string file;      // relative to the manifest's folder
  int64_t tokens = 0;    // must equal the file's coords rows
  uint64_t noise_seed = 0;
  std::string set = "default";  // "default" or "long-tail"
};

struct Manifest {
  std::string dir;       // folder the manifest was read from
  int grid = 64;         // coordinates lie in [0, grid)
  int cond_tokens = 0;   // L
  int cond_channels = 0;
  int concat_channels = 0;  // texture models: per-token shape latent channels, else 0
  std::vector<ManifestEntry> assets;
};

struct Asset {
  std::string name;
  Tensor coords;        // i32 [T, 4], host; column 0 (batch index) is 0
  Tensor cond;          // bf16 or f32 [L, cond_channels], host
  Tensor concat_cond;   // f32 [T, concat_channels] or undefined
  uint64_t noise_seed = 0;
};

Manifest read_manifest(const std::string& path);
void write_manifest(const std::string& path, const Manifest& m);

// Reads and validates one asset: no tensor of more than kMaxAssetBytes, T >= 1, T == entry.tokens, coords batch column all 0,
// x, y, z in [0, grid), rows strictly increasing in (x, y, z) (sorted, no duplicates);
// cond [L, C] matching the manifest and finite; concat_cond [T, Cc] finite when expected.
Asset read_asset(const Manifest& m, const ManifestEntry& entry);
void write_asset(const std::string& path, const Asset& a);

// The batch-coordinate checks on a packed multi-asset coords tensor (i32 [T, 4], host):
// batch indices non-decreasing, each of 0..B-1 present (no gaps), coordinates in range.
// `what` names the source in errors.
void validate_packed_coords(const Tensor& coords, int batch, int grid, const std::string& what);

}  // namespace s3d::payload
