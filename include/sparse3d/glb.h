// The GLB export: what TRELLIS.2's o_voxel.postprocess.to_glb and the GLB export after it do
// with a decoded asset (hole filling, remeshing or cleaning, simplification, UV atlas, texture
// baking from the sparse PBR attribute volume, seam filling, encoding, the .glb file), natively.
// docs/EXPORT.md gives every stage, its method, its contract and what it is measured against.
//
//   sparse3d::GlbInput in;            // the decoder's mesh and attribute volume, as views
//   in.vertices = verts; in.num_vertices = V; in.faces = faces; in.num_faces = F;
//   in.coords = coords; in.attrs = attrs; in.num_voxels = L; in.channels = 6;
//   in.grid_size = {1024, 1024, 1024};
//   sparse3d::GlbOptions opt;         // to_glb's arguments, same names, same defaults
//   opt.decimation_target = 500000; opt.texture_size = 2048; opt.remesh = true;
//   sparse3d::TexturedMesh mesh = sparse3d::to_glb(in, opt);
//   mesh.export_glb("asset.glb", sparse3d::TextureFormat::WebP);
//
// Errors (an empty mesh, a non-finite vertex, an index out of range, a voxel outside the grid
// or repeated, a layout channel past the attributes, a texture size of 0 or over 16384, a
// decimation target of 0, an output path that cannot be written) are one sparse3d::Error
// naming what is wrong; no partial file is ever left.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "sparse3d/types.h"

namespace sparse3d {

// Where each PBR quantity starts among the attribute channels (TRELLIS.2's pbr_attr_layout:
// base_color 0:3, metallic 3:4, roughness 4:5, alpha 5:6).
struct AttributeLayout {
  int32_t base_color = 0;  // three channels
  int32_t metallic = 3;
  int32_t roughness = 4;
  int32_t alpha = 5;
};

// Borrowed host arrays; they must outlive the to_glb call.
struct GlbInput {
  const float* vertices = nullptr;  // [num_vertices, 3]
  int64_t num_vertices = 0;
  const int32_t* faces = nullptr;   // [num_faces, 3]
  int64_t num_faces = 0;
  const int32_t* coords = nullptr;  // [num_voxels, 3], x y z in [0, grid_size)
  const float* attrs = nullptr;     // [num_voxels, channels], values in [0, 1]
  int64_t num_voxels = 0;
  int32_t channels = 6;
  AttributeLayout layout;
  std::array<float, 6> aabb{-0.5f, -0.5f, -0.5f, 0.5f, 0.5f, 0.5f};  // lo xyz, hi xyz
  std::array<int32_t, 3> grid_size{0, 0, 0};  // voxels per axis (TRELLIS.2: the resolution)
};

// How the UV atlas is made (docs/EXPORT.md, "The atlas"): our own planar charts packed at
// exactly texture_size (the default), the same with conformal charts wherever a conformal map
// keeps the texel density even (fewer charts and seams, a little slower), or xatlas over the
// whole mesh (the reference: the original's library, slower, and packed into an atlas it
// sizes itself).
enum class UvAtlas : uint8_t { Planar, Xatlas, Conformal };

// Which edge collapse simplifies to decimation_target (docs/EXPORT.md, "Simplification"):
// sparse3d's shaped collapse (the default: even triangles and few faces folded over their
// neighbours, so the atlas's charts grow larger) or meshoptimizer's quadric collapse (the
// reference: faster on the CPU, more slivers and folds).
enum class Simplifier : uint8_t { Shaped, Meshoptimizer };

struct GlbOptions {
  int64_t decimation_target = 1000000;  // faces at most in the result
  int32_t texture_size = 2048;          // texels per side, 1..16384
  bool remesh = false;
  float remesh_band = 1;
  float remesh_project = 0.9f;
  // The remesh wraps the surface in a band; the space the band encloses (inside a solid
  // thicker than the band, between the two sheets of a closed wall) gets surfaces of its own,
  // wound inward, never visible from outside. false (the default) keeps them, as the
  // original does; true drops them before the simplification, so that the face budget and
  // the texels go to the visible surface (docs/EXPORT.md, "Cavities").
  bool remesh_drop_cavities = false;
  float mesh_cluster_threshold_cone_half_angle_rad = 1.5707964f;
  int32_t mesh_cluster_refine_iterations = 0;
  int32_t mesh_cluster_global_iterations = 1;
  float mesh_cluster_smooth_strength = 1;
  // Where a CUDA device is usable, the closest-point queries (the remesh's distance field, the
  // bake's projection) run on it, with the CPU's bits; false keeps everything on the CPU. A
  // GPU that cannot be used is a fallback, listed in TexturedMesh::fallbacks().
  bool use_gpu = true;
  UvAtlas atlas = UvAtlas::Planar;
  Simplifier simplifier = Simplifier::Shaped;
  // Called at the start of each stage with its name, its index and the number of stages (the
  // original's use_tqdm bar); may be empty.
  std::function<void(const std::string& stage, int index, int total)> progress;
};

// WebP: lossy (quality 90; EXT_texture_webp), as the original's export. WebPLossless: the same
// extension, lossless: the baked texels exactly (lossy WebP's chroma subsampling and block
// quantization are most of a texture's error against the attribute volume), about 3-5x the
// bytes.
// PNG: lossless, the core glTF format.
enum class TextureFormat : uint8_t { WebP, PNG, WebPLossless };

struct StageSeconds {
  std::string stage;
  double seconds = 0;
};

// The result of to_glb: the output mesh in glTF axes, its textures, and what each stage cost.
class TexturedMesh {
 public:
  TexturedMesh();
  ~TexturedMesh();
  TexturedMesh(TexturedMesh&&) noexcept;
  TexturedMesh& operator=(TexturedMesh&&) noexcept;

  int64_t num_vertices() const;
  int64_t num_faces() const;
  const std::vector<float>& positions() const;   // [V, 3], glTF axes (x, z, -y of the input)
  const std::vector<float>& normals() const;     // [V, 3]
  const std::vector<float>& uvs() const;         // [V, 2], glTF convention
  const std::vector<uint32_t>& faces() const;    // [F, 3]
  int32_t texture_size() const;
  const std::vector<uint8_t>& base_color_rgba() const;          // [S, S, 4]
  const std::vector<uint8_t>& metallic_roughness_rgb() const;   // [S, S, 3]: 0, rough, metal
  bool double_sided() const;
  const std::vector<StageSeconds>& stage_seconds() const;
  // What ran on the reference path instead of its fast path, and why (empty when nothing did).
  const std::vector<std::string>& fallbacks() const;

  // The .glb file, written atomically; returns the seconds it took (encoding included). The
  // material's alphaMode is OPAQUE (the original's), under which glTF viewers ignore alpha, so
  // the base-colour image is written as RGB; keep_alpha writes it as RGBA, alpha included, as
  // the original does (a 4096^2 WebP then takes about twice as long and is larger).
  double export_glb(const std::string& path, TextureFormat format = TextureFormat::WebP,
                    bool keep_alpha = false) const;
  // The same bytes, in memory.
  std::string glb_bytes(TextureFormat format = TextureFormat::WebP, bool keep_alpha = false) const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
  friend TexturedMesh to_glb(const GlbInput&, const GlbOptions&);
};

TexturedMesh to_glb(const GlbInput& input, const GlbOptions& options);

// Starts making the process's CUDA context (a few hundred ms on first use) on a thread of its
// own and returns at once, so that a program can overlap it with reading its input; a later
// to_glb on the GPU waits for it instead of making it. Optional (to_glb makes the context
// itself otherwise, overlapped with hole filling only); nothing happens without a GPU, and a
// second call does nothing. A program that already holds a context (PyTorch) gains nothing.
void start_gpu_context();

// Every check to_glb makes of its input, without the work: the mesh (faces, finite vertices,
// indices in range), the layout against the channels, aabb and grid_size, and the voxels (each
// inside the grid, none twice, finite attributes). One sparse3d::Error naming the first problem.
void check_glb_input(const GlbInput& input);

// A decoded asset that owns its arrays: what `sparse3d export-glb` reads and `sparse3d
// make-glb-input` writes (docs/FORMATS.md, "GLB input files": one safetensors file with the
// tensors vertices F32 [V, 3], faces I32 [F, 3], coords I32 [L, 3], attrs F32 [L, C] and the
// metadata format, aabb, grid_size, attr_layout, source).
struct GlbAsset {
  std::vector<float> vertices;
  std::vector<int32_t> faces;
  std::vector<int32_t> coords;
  std::vector<float> attrs;
  int32_t channels = 6;
  AttributeLayout layout;
  std::array<float, 6> aabb{-0.5f, -0.5f, -0.5f, 0.5f, 0.5f, 0.5f};
  std::array<int32_t, 3> grid_size{0, 0, 0};
  std::string source;  // where it came from, free text
  GlbInput view() const;  // borrows this asset's arrays
};

// Reads and validates a GLB input file (check_glb_input, plus the format's own: names the
// file and the problem). Refuses files over 16 GiB of tensor data.
GlbAsset load_glb_input(const std::string& path);
// Writes one atomically.
void save_glb_input(const GlbAsset& asset, const std::string& path);

// What TRELLIS.2's decoders would hand to to_glb for a textured surface, at `resolution`:
// the surface voxelized into TRELLIS.2's flexible dual grid over the box [-0.5, 0.5]^3, its
// mesh extracted as the shape decoder does (then its small holes filled, as decode_latent
// does), and the attribute volume on the same voxels, each voxel taking the per-vertex
// attributes interpolated at the surface point closest to its centre. For the export's judge
// and tests: real meshes become decoder-like inputs without the model.
GlbAsset voxelize_textured_mesh(const std::vector<float>& vertices,
                                const std::vector<int32_t>& faces,
                                const std::vector<float>& vertex_attrs, int32_t channels,
                                int32_t resolution, const std::string& source);

}  // namespace sparse3d
