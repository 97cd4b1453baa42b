// GLB input files (glb.h's load_glb_input / save_glb_input; docs/FORMATS.md) and the
// decoder-like assets made from textured meshes (voxelize_textured_mesh).
#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <string>

#include "core/error.h"
#include "core/tensor.h"
#include "io/atomic_file.h"
#include "io/safetensors.h"
#include "mesh/bvh.h"
#include "mesh/clean.h"
#include "mesh/dual_grid.h"
#include "sparse3d/glb.h"

namespace sparse3d {
namespace {

constexpr const char* kFormat = "sparse3d-glb-input/1";
constexpr uint64_t kMaxTensorBytes = uint64_t{16} << 30;

// A metadata value parsed as JSON, or one error naming the key and the file.
nlohmann::json meta_json(const s3d::io::SafetensorsFile& f, const std::string& key,
                         const std::string& what) {
  const auto it = f.metadata().find(key);
  S3D_CHECK(it != f.metadata().end(), what, ": metadata has no '", key, "'");
  try {
    return nlohmann::json::parse(it->second);
  } catch (const nlohmann::json::exception&) {
    s3d::fail(what, ": metadata '", key, "' is not JSON: ", it->second.substr(0, 80));
  }
}

// Tensor `name`, checked to be [rows, cols] of the given dtype family.
s3d::Tensor load_2d(const s3d::io::SafetensorsFile& f, const std::string& name, DType as,
                    int64_t cols, const std::string& what) {
  const s3d::io::TensorEntry* e = f.find(name);
  S3D_CHECK(e != nullptr, what, ": has no tensor '", name, "'");
  S3D_CHECK(e->shape.size() == 2 && (cols < 0 || e->shape[1] == cols), what, ": tensor '", name,
            "' must be [N, ", cols < 0 ? std::string("C") : std::to_string(cols), "], not ",
            s3d::shape_str(e->shape));
  return f.load(name, as);
}

int32_t layout_first(const nlohmann::json& layout, const char* key, int32_t width,
                     const std::string& what) {
  S3D_CHECK(layout.contains(key), what, ": attr_layout has no '", key, "'");
  const auto& r = layout[key];
  S3D_CHECK(r.is_array() && r.size() == 2 && r[0].is_number_integer() &&
                r[1].is_number_integer() && r[1].get<int64_t>() - r[0].get<int64_t>() == width,
            what, ": attr_layout '", key, "' must be [first, first + ", width, "]");
  return r[0].get<int32_t>();
}

}  // namespace

GlbAsset load_glb_input(const std::string& path) {
  const std::string what = "GLB input " + path;
  const auto f = s3d::io::SafetensorsFile::open(path, what);
  f.check_tensor_bytes(kMaxTensorBytes, "a GLB input");
  const auto fmt = f.metadata().find("format");
  S3D_CHECK(fmt != f.metadata().end() && fmt->second == kFormat, what,
            ": metadata 'format' must be '", kFormat, "'");
  GlbAsset a;
  const s3d::Tensor v = load_2d(f, "vertices", DType::F32, 3, what);
  const s3d::Tensor t = load_2d(f, "faces", DType::I32, 3, what);
  const s3d::Tensor c = load_2d(f, "coords", DType::I32, 3, what);
  const s3d::Tensor x = load_2d(f, "attrs", DType::F32, -1, what);
  S3D_CHECK(x.size(0) == c.size(0), what, ": attrs has ", x.size(0), " rows but coords has ",
            c.size(0));
  a.vertices.assign(v.data_as<float>(), v.data_as<float>() + v.numel());
  a.faces.assign(t.data_as<int32_t>(), t.data_as<int32_t>() + t.numel());
  a.coords.assign(c.data_as<int32_t>(), c.data_as<int32_t>() + c.numel());
  a.attrs.assign(x.data_as<float>(), x.data_as<float>() + x.numel());
  S3D_CHECK(x.size(1) >= 1 && x.size(1) <= 4096, what, ": attrs must have 1..4096 channels");
  a.channels = static_cast<int32_t>(x.size(1));
  const nlohmann::json aabb = meta_json(f, "aabb", what);
  S3D_CHECK(aabb.is_array() && aabb.size() == 2 && aabb[0].size() == 3 && aabb[1].size() == 3,
            what, ": aabb must be [[x, y, z], [x, y, z]]");
  const nlohmann::json grid = meta_json(f, "grid_size", what);
  S3D_CHECK(grid.is_array() && grid.size() == 3, what, ": grid_size must be [X, Y, Z]");
  for (int k = 0; k < 3; ++k) {
    S3D_CHECK(aabb[0][k].is_number() && aabb[1][k].is_number() && grid[k].is_number_integer(),
              what, ": aabb and grid_size must hold numbers");
    a.aabb[k] = aabb[0][k].get<float>();
    a.aabb[k + 3] = aabb[1][k].get<float>();
    const int64_t g = grid[k].get<int64_t>();
    S3D_CHECK(g >= 1 && g <= 65536, what, ": grid_size[", k, "] must be in [1, 65536]");
    a.grid_size[k] = static_cast<int32_t>(g);
  }
  const nlohmann::json layout = meta_json(f, "attr_layout", what);
  S3D_CHECK(layout.is_object(), what, ": attr_layout must be an object");
  a.layout.base_color = layout_first(layout, "base_color", 3, what);
  a.layout.metallic = layout_first(layout, "metallic", 1, what);
  a.layout.roughness = layout_first(layout, "roughness", 1, what);
  a.layout.alpha = layout_first(layout, "alpha", 1, what);
  const auto src = f.metadata().find("source");
  if (src != f.metadata().end()) a.source = src->second;
  try {
    check_glb_input(a.view());
  } catch (const Error& e) {
    s3d::fail(what, ": ", e.what());
  }
  return a;
}

void save_glb_input(const GlbAsset& a, const std::string& path) {
  using s3d::Tensor;
  // Missing folders are made, and removed again when the write fails (as the GLB writer does).
  const std::string what = "GLB input " + path;
  s3d::io::check_output_file(path, what);
  s3d::io::NewFolders folders;
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) folders.make(parent.string(), what);
  const int64_t V = a.vertices.size() / 3, F = a.faces.size() / 3, L = a.coords.size() / 3;
  auto borrow_f = [](const std::vector<float>& v, s3d::Shape s) {
    return Tensor::borrow(const_cast<float*>(v.data()), s, DType::F32, Device::CPU);
  };
  auto borrow_i = [](const std::vector<int32_t>& v, s3d::Shape s) {
    return Tensor::borrow(const_cast<int32_t*>(v.data()), s, DType::I32, Device::CPU);
  };
  nlohmann::json aabb = {{a.aabb[0], a.aabb[1], a.aabb[2]}, {a.aabb[3], a.aabb[4], a.aabb[5]}};
  nlohmann::json layout = {{"base_color", {a.layout.base_color, a.layout.base_color + 3}},
                           {"metallic", {a.layout.metallic, a.layout.metallic + 1}},
                           {"roughness", {a.layout.roughness, a.layout.roughness + 1}},
                           {"alpha", {a.layout.alpha, a.layout.alpha + 1}}};
  s3d::io::write_safetensors(
      path,
      {{"vertices", borrow_f(a.vertices, {V, 3})},
       {"faces", borrow_i(a.faces, {F, 3})},
       {"coords", borrow_i(a.coords, {L, 3})},
       {"attrs", borrow_f(a.attrs, {L, a.channels})}},
      {{"format", kFormat},
       {"aabb", aabb.dump()},
       {"grid_size", nlohmann::json(a.grid_size).dump()},
       {"attr_layout", layout.dump()},
       {"source", a.source}});
  folders.keep();
}

GlbAsset voxelize_textured_mesh(const std::vector<float>& vertices,
                                const std::vector<int32_t>& faces,
                                const std::vector<float>& vertex_attrs, int32_t channels,
                                int32_t resolution, const std::string& source) {
  namespace sm = s3d::mesh;
  S3D_CHECK(resolution >= 2 && resolution <= 4096, "voxelize: resolution must be in [2, 4096] "
            "(got ", resolution, ")");
  sm::TriMesh src;
  src.positions = vertices;
  src.faces = faces;
  sm::check_mesh(src, "voxelize: source mesh");
  S3D_CHECK(channels >= 1 && vertex_attrs.size() == vertices.size() / 3 * channels,
            "voxelize: vertex_attrs must hold ", channels, " values per vertex");
  sm::GridBox box;
  box.size = {resolution, resolution, resolution};
  const sm::DualGrid grid = sm::voxelize_dual_grid(src, box);
  S3D_CHECK(grid.num_voxels() > 0, "voxelize: the source mesh lies outside [-0.5, 0.5]^3");
  sm::TriMesh decoded = sm::dual_grid_to_mesh(grid, box);
  sm::fill_holes(decoded, 3e-2);  // decode_latent fills small holes before to_glb

  GlbAsset a;
  a.vertices = std::move(decoded.positions);
  a.faces = std::move(decoded.faces);
  a.coords = grid.coords;
  a.channels = channels;
  a.grid_size = box.size;
  a.source = source;
  // Each voxel's attributes: the source's per-vertex values interpolated at the surface point
  // closest to the voxel centre.
  const int64_t L = grid.num_voxels();
  const sm::Vec3 vs = box.voxel_size();
  std::vector<float> centres(3 * L);
  for (int64_t i = 0; i < L; ++i)
    for (int k = 0; k < 3; ++k)
      centres[3 * i + k] = box.lo[k] + (grid.coords[3 * i + k] + 0.5f) * vs[k];
  const sm::Bvh bvh(src);
  std::vector<sm::ClosestHit> hits(L);
  bvh.closest_many(centres.data(), L, hits.data());
  a.attrs.assign(L * channels, 0.0f);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < L; ++i) {
    const int32_t* f = &src.faces[3 * hits[i].face];
    for (int c = 0; c < channels; ++c) {
      float acc = 0;
      for (int k = 0; k < 3; ++k) acc += hits[i].uvw[k] * vertex_attrs[f[k] * channels + c];
      a.attrs[i * channels + c] = acc;
    }
  }
  return a;
}

}  // namespace sparse3d
