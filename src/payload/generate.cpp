#include "payload/generate.h"

#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <numeric>

#include "core/error.h"
#include "core/rng.h"
#include "io/atomic_file.h"

namespace s3d::payload {
namespace {

constexpr int kShapes = 4;

// Signed distance (in voxels) from the centre of voxel (x, y, z) to the shape's surface.
double surface_distance(int shape, double x, double y, double z, int grid, double phase) {
  const double c = 0.5 * (grid - 1);
  const double px = x - c, py = y - c, pz = z - c, g = grid;
  switch (shape) {
    case 0:  // sphere
      return std::sqrt(px * px + py * py + pz * pz) - 0.36 * g;
    case 1: {  // torus around z
      double q = std::sqrt(px * px + py * py) - 0.28 * g;
      return std::sqrt(q * q + pz * pz) - 0.11 * g;
    }
    case 2: {  // box
      double h = 0.3 * g;
      double qx = std::abs(px) - h, qy = std::abs(py) - h, qz = std::abs(pz) - h;
      double outside = std::sqrt(std::pow(std::max(qx, 0.0), 2) + std::pow(std::max(qy, 0.0), 2) +
                                 std::pow(std::max(qz, 0.0), 2));
      return outside + std::min(std::max(qx, std::max(qy, qz)), 0.0);
    }
    default: {  // blob: a sphere whose radius ripples with direction
      double r = std::sqrt(px * px + py * py + pz * pz);
      double ripple = 0.06 * g * std::sin(3.0 * std::atan2(py, px) + phase) *
                      std::cos(2.0 * std::acos(r > 0 ? pz / r : 1.0));
      return r - (0.32 * g + ripple);
    }
  }
}

}  // namespace

const char* shape_name(int shape_index) {
  static const std::array<const char*, kShapes> names = {"sphere", "torus", "box", "blob"};
  return names[static_cast<size_t>(shape_index % kShapes)];
}

std::vector<int64_t> log_spread(int64_t lo, int64_t hi, int n) {
  S3D_CHECK(n >= 1 && lo >= 1 && hi >= lo, "log_spread: bad range [", lo, ", ", hi, "] x ", n);
  std::vector<int64_t> v;
  for (int i = 0; i < n; ++i) {
    if (n == 1) return {lo};
    double f = static_cast<double>(i) / (n - 1);
    v.push_back(i == 0 ? lo : i == n - 1 ? hi
                                          : std::llround(lo * std::pow(double(hi) / lo, f)));
  }
  return v;
}

Tensor voxelize_surface(int shape_index, int64_t tokens, int grid, uint64_t seed) {
  const int64_t cells = static_cast<int64_t>(grid) * grid * grid;
  S3D_CHECK(tokens >= 1 && tokens <= cells, "voxelize: ", tokens, " tokens do not fit a ", grid,
            "^3 grid (", cells, " cells)");
  const int shape = shape_index % kShapes;
  const double phase = uniform_at(seed, 0) * 6.283185307179586;
  // |distance| per cell; the `tokens` cells nearest the surface form a shell whose
  // thickness grows with the count. Ties break by cell index, so the result is exact.
  std::vector<double> dist(static_cast<size_t>(cells));
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < cells; ++i) {
    int x = static_cast<int>(i / (int64_t(grid) * grid)), y = static_cast<int>((i / grid) % grid),
        z = static_cast<int>(i % grid);
    dist[i] = std::abs(surface_distance(shape, x, y, z, grid, phase));
  }
  std::vector<int64_t> order(static_cast<size_t>(cells));
  std::iota(order.begin(), order.end(), 0);
  std::nth_element(order.begin(), order.begin() + (tokens - 1), order.end(),
                   [&](int64_t a, int64_t b) { return dist[a] != dist[b] ? dist[a] < dist[b] : a < b; });
  order.resize(static_cast<size_t>(tokens));
  std::sort(order.begin(), order.end());  // cell index order = sorted (x, y, z)

  Tensor coords = Tensor::empty({tokens, 4}, DType::I32, Device::CPU);
  int32_t* p = coords.data_as<int32_t>();
  for (int64_t t = 0; t < tokens; ++t) {
    int64_t i = order[t];
    p[4 * t + 0] = 0;
    p[4 * t + 1] = static_cast<int32_t>(i / (int64_t(grid) * grid));
    p[4 * t + 2] = static_cast<int32_t>((i / grid) % grid);
    p[4 * t + 3] = static_cast<int32_t>(i % grid);
  }
  return coords;
}

GenerateOptions GenerateOptions::benchmark() {
  GenerateOptions o;
  o.default_tokens = log_spread(3664, 30227, 10);
  o.long_tail_tokens = {35000, 41500, 49152};
  return o;
}

GenerateOptions GenerateOptions::small() {
  GenerateOptions o;
  o.default_tokens = {97, 310};
  o.long_tail_tokens = {};
  o.cond_tokens = 37;
  o.cond_channels = 64;
  return o;
}

GenerateOptions GenerateOptions::dense_structure() {
  GenerateOptions o;
  o.dense = true;
  o.grid = 16;
  o.default_tokens = {4096, 4096, 4096, 4096};
  o.long_tail_tokens = {};
  o.cond_tokens = 1029;
  return o;
}

GenerateOptions GenerateOptions::dense_small() {
  GenerateOptions o = small();
  o.dense = true;
  o.grid = 8;
  o.default_tokens = {512, 512};
  return o;
}

Tensor full_grid(int grid) {
  const int64_t g = grid, n = g * g * g;
  Tensor c = Tensor::empty({n, 4}, DType::I32, Device::CPU);
  int32_t* p = c.data_as<int32_t>();
  for (int64_t t = 0; t < n; ++t) {
    p[4 * t] = 0;
    p[4 * t + 1] = static_cast<int32_t>(t / (g * g));
    p[4 * t + 2] = static_cast<int32_t>((t / g) % g);
    p[4 * t + 3] = static_cast<int32_t>(t % g);
  }
  return c;
}

void check_options(const GenerateOptions& o) {
  const char* what = "make-payloads";
  S3D_CHECK(o.grid >= 1 && o.grid <= (1 << 16), what, ": grid ", o.grid, " is outside [1, 65536]");
  // read_manifest's bounds, so that what is written reads back.
  S3D_CHECK(o.cond_tokens >= 1 && o.cond_tokens <= (1 << 30), what, ": --cond-tokens ",
            o.cond_tokens, " is outside [1, 1073741824]");
  S3D_CHECK(o.cond_channels >= 1 && o.cond_channels <= (1 << 20), what, ": --cond-channels ",
            o.cond_channels, " is outside [1, 1048576]");
  S3D_CHECK(o.concat_channels >= 0 && o.concat_channels <= (1 << 20), what,
            ": --concat-channels ", o.concat_channels, " is outside [0, 1048576]");
  const size_t assets = o.default_tokens.size() + o.long_tail_tokens.size();
  S3D_CHECK(assets >= 1, what, ": no assets to make (no token counts)");
  S3D_CHECK(assets <= kMaxAssets, what, ": ", assets, " assets, more than the limit of ",
            kMaxAssets);
  const int64_t cells = int64_t(o.grid) * o.grid * o.grid;
  if (o.dense) {
    S3D_CHECK(o.concat_channels == 0, what, ": dense payloads take no concat_cond");
    for (int64_t t : o.default_tokens)
      S3D_CHECK(t == cells, what, ": a dense payload is the whole ", o.grid, "^3 grid, ", cells,
                " tokens; ", t, " was asked for");
    S3D_CHECK(o.long_tail_tokens.empty(), what, ": dense payloads have no long tail");
  }
  // The bytes each asset file holds; the generator's host memory is a small multiple of it
  // (the condition is made in f32, then stored as bf16). In double: exact enough for a
  // limit, and no product can wrap.
  const double cond_bytes = 2.0 * o.cond_tokens * o.cond_channels;
  double total = 0;
  for (const auto* counts : {&o.default_tokens, &o.long_tail_tokens})
    for (int64_t t : *counts) {
      S3D_CHECK(t >= 1 && t <= cells, what, ": ", t, " tokens do not fit the ", o.grid,
                "^3 grid (1 to ", cells, " voxels)");
      const double bytes = 16.0 * t + cond_bytes + 4.0 * t * o.concat_channels;
      S3D_CHECK(bytes <= double(kMaxAssetBytes), what, ": an asset of ", t, " tokens with a ",
                o.cond_tokens, " x ", o.cond_channels, " condition",
                o.concat_channels > 0 ? cat(" and ", o.concat_channels, " concat channels") : "",
                " would be ", static_cast<uint64_t>(bytes), " bytes, more than the limit of ",
                kMaxAssetBytes, " (1 GiB) for one asset file");
      total += bytes;
    }
  S3D_CHECK(total <= double(kMaxPayloadBytes), what, ": the ", assets, " assets would be ",
            static_cast<uint64_t>(total), " bytes, more than the limit of ", kMaxPayloadBytes,
            " (16 GiB) for one payload set");
}

namespace {

// Asset `index`'s name: sNN-gridG-T for dense payloads, aNN-SHAPE-T for the others.
std::string asset_name(int index, int64_t tokens, const GenerateOptions& o) {
  char name[64];
  if (o.dense) {
    std::snprintf(name, sizeof name, "s%02d-grid%d-%lld", index, o.grid,
                  static_cast<long long>(tokens));
  } else {
    std::snprintf(name, sizeof name, "a%02d-%s-%lld", index, shape_name(index),
                  static_cast<long long>(tokens));
  }
  return name;
}

// Layer-normalised Gaussian tokens (DINOv3 output is LayerNorm without affine), bf16
// [cond_tokens, cond_channels], drawn from `seed`.
Tensor normalised_condition(uint64_t seed, const GenerateOptions& o) {
  std::vector<float> cond(static_cast<size_t>(o.cond_tokens) * o.cond_channels);
  normal_fill(seed, 0, cond.size(), cond.data());
  for (int l = 0; l < o.cond_tokens; ++l) {
    float* row = cond.data() + static_cast<size_t>(l) * o.cond_channels;
    double mean = 0, var = 0;
    for (int c = 0; c < o.cond_channels; ++c) mean += row[c];
    mean /= o.cond_channels;
    for (int c = 0; c < o.cond_channels; ++c) var += (row[c] - mean) * (row[c] - mean);
    double inv = 1.0 / std::sqrt(var / o.cond_channels + 1e-6);
    for (int c = 0; c < o.cond_channels; ++c) row[c] = static_cast<float>((row[c] - mean) * inv);
  }
  return Tensor::from_floats(cond, {o.cond_tokens, o.cond_channels}, DType::BF16);
}

}  // namespace

Asset make_asset(int index, int64_t tokens, uint64_t asset_seed, const GenerateOptions& o) {
  Asset a;
  a.name = asset_name(index, tokens, o);
  a.coords = o.dense ? full_grid(o.grid) : voxelize_surface(index, tokens, o.grid, asset_seed);
  a.cond = normalised_condition(splitmix64(asset_seed ^ 0xC0DDull), o);
  if (o.concat_channels > 0) {
    std::vector<float> cc(static_cast<size_t>(tokens) * o.concat_channels);
    normal_fill(splitmix64(asset_seed ^ 0x5AA7Eull), 0, cc.size(), cc.data());
    a.concat_cond = Tensor::from_floats(cc, {tokens, o.concat_channels}, DType::F32);
  }
  a.noise_seed = asset_seed & ((1ull << 53) - 1);
  return a;
}

namespace {

// Moves the staged `files` from `staging` into `dir`, in order. A file this call adds to
// DIR is registered in `guards` (an interruption removes it) and in `created`.
void move_into_place(const std::vector<std::string>& files, const std::string& staging,
                     const std::string& dir, const std::string& what,
                     std::vector<io::RemoveOnSignal>& guards, std::vector<std::string>& created) {
  namespace fs = std::filesystem;
  for (const auto& file : files) {
    const std::string from = (fs::path(staging) / file).string();
    const std::string to = (fs::path(dir) / file).string();
    std::error_code ec;
    if (!fs::exists(fs::symlink_status(to, ec))) {
      guards.emplace_back(to, io::RemoveOnSignal::Kind::File);
      created.push_back(to);
    }
    S3D_CHECK(std::rename(from.c_str(), to.c_str()) == 0, what, ": cannot move ", from, " to ",
              to, " (", std::strerror(errno), ")");
  }
}

}  // namespace

Manifest generate_payloads(const std::string& dir, const GenerateOptions& o) {
  namespace fs = std::filesystem;
  check_options(o);
  const std::string what = "make-payloads: --out " + dir;
  io::check_output_file((fs::path(dir) / "manifest.json").string(), what);
  Manifest m;
  m.dir = dir;
  m.grid = o.grid;
  m.cond_tokens = o.cond_tokens;
  m.cond_channels = o.cond_channels;
  m.concat_channels = o.concat_channels;

  // Every file is written into a hidden folder inside DIR (same file system: the moves are
  // renames) and moved into place at the end: a failure part-way leaves DIR as it was.
  io::NewFolders folders;
  folders.make(dir, what);
  std::string staging = (fs::path(dir) / ".make-payloads.XXXXXX").string();
  S3D_CHECK(::mkdtemp(staging.data()) != nullptr, what, ": cannot make a folder in ", dir, " (",
            std::strerror(errno), ")");
  io::RemoveOnSignal staging_guard(staging, io::RemoveOnSignal::Kind::Folder);
  std::vector<io::RemoveOnSignal> guards;  // staged files, then the files moved into place
  std::vector<std::string> files;          // file names, the manifest last
  std::vector<std::string> created;        // paths in DIR that did not exist before

  int index = 0;
  auto add_set = [&](const std::vector<int64_t>& counts, const char* set) {
    for (int64_t tokens : counts) {
      const uint64_t asset_seed = splitmix64(o.seed * 1000003ull + static_cast<uint64_t>(index));
      const Asset a = make_asset(index, tokens, asset_seed, o);
      ManifestEntry e;
      e.name = a.name;
      e.file = a.name + ".safetensors";
      e.tokens = tokens;
      e.noise_seed = a.noise_seed;
      e.set = set;
      const std::string path = (fs::path(staging) / e.file).string();
      guards.emplace_back(path, io::RemoveOnSignal::Kind::File);
      write_asset(path, a);
      files.push_back(e.file);
      m.assets.push_back(e);
      ++index;
    }
  };
  try {
    add_set(o.default_tokens, "default");
    add_set(o.long_tail_tokens, "long-tail");
    const std::string staged_manifest = (fs::path(staging) / "manifest.json").string();
    guards.emplace_back(staged_manifest, io::RemoveOnSignal::Kind::File);
    write_manifest(staged_manifest, m);
    files.push_back("manifest.json");
    // Into place: the assets, then the manifest, so that a manifest in DIR always finds its
    // assets. A file this call adds to DIR stays registered (an interruption removes it)
    // until the last one is in place.
    move_into_place(files, staging, dir, what, guards, created);
    S3D_CHECK(::rmdir(staging.c_str()) == 0, what, ": cannot remove the staging folder ",
              staging, " (", std::strerror(errno), ")");
  } catch (...) {
    std::error_code ec;
    fs::remove_all(staging, ec);
    for (const auto& path : created) fs::remove(path, ec);
    throw;  // `folders` removes DIR when this call made it and it is empty again
  }
  folders.keep();
  return m;
}

}  // namespace s3d::payload
