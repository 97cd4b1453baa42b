// The GLB export's pipeline (include/sparse3d/glb.h): the stages of TRELLIS.2's to_glb in its
// order, each timed, each a function of its own file. docs/EXPORT.md gives the stage table.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <future>
#include <mutex>
#include <limits>
#include <memory>
#include <thread>
#include <utility>

#include <cuda_runtime.h>

#include "core/cuda_util.h"
#include "core/error.h"
#include "io/atomic_file.h"
#include "mesh/atlas.h"
#include "mesh/bake.h"
#include "mesh/bake_cuda.h"
#include "mesh/bvh.h"
#include "mesh/clean.h"
#include "mesh/glb_writer.h"
#include "mesh/image_codec.h"
#include "mesh/remesh.h"
#include "mesh/simplify.h"
#include "mesh/timing.h"
#include "mesh/volume.h"
#include "sparse3d/glb.h"

namespace sparse3d {

struct TexturedMesh::Impl {
  std::vector<float> positions, normals, uvs;
  std::vector<uint32_t> faces;
  int32_t texture_size = 0;
  std::vector<uint8_t> base_color_rgba, metallic_roughness_rgb;
  bool double_sided = false;
  std::vector<StageSeconds> stages;
  std::vector<std::string> fallbacks;
};

TexturedMesh::TexturedMesh() : impl_(std::make_unique<Impl>()) {}
TexturedMesh::~TexturedMesh() = default;
TexturedMesh::TexturedMesh(TexturedMesh&&) noexcept = default;
TexturedMesh& TexturedMesh::operator=(TexturedMesh&&) noexcept = default;
int64_t TexturedMesh::num_vertices() const { return impl_->positions.size() / 3; }
int64_t TexturedMesh::num_faces() const { return impl_->faces.size() / 3; }
const std::vector<float>& TexturedMesh::positions() const { return impl_->positions; }
const std::vector<float>& TexturedMesh::normals() const { return impl_->normals; }
const std::vector<float>& TexturedMesh::uvs() const { return impl_->uvs; }
const std::vector<uint32_t>& TexturedMesh::faces() const { return impl_->faces; }
int32_t TexturedMesh::texture_size() const { return impl_->texture_size; }
const std::vector<uint8_t>& TexturedMesh::base_color_rgba() const {
  return impl_->base_color_rgba;
}
const std::vector<uint8_t>& TexturedMesh::metallic_roughness_rgb() const {
  return impl_->metallic_roughness_rgb;
}
bool TexturedMesh::double_sided() const { return impl_->double_sided; }
const std::vector<StageSeconds>& TexturedMesh::stage_seconds() const { return impl_->stages; }
const std::vector<std::string>& TexturedMesh::fallbacks() const { return impl_->fallbacks; }

namespace {

using s3d::mesh::TriMesh;
using Clock = std::chrono::steady_clock;

constexpr int32_t kMaxTextureSize = 16384;
constexpr double kHolePerimeter = 3e-2;     // to_glb's fill_holes(max_hole_perimeter=3e-2)
constexpr double kSmallComponent = 1e-5;    // remove_small_connected_components(1e-5)
constexpr int kStages = 6;  // 7 with the remesh: remesh and simplify are two
// Texels past a chart's edge baked from the surface itself (bake.h, dilate_raster): bilinear
// filtering reads one, the first mip level two.
constexpr int32_t kDilateTexels = 2;

void check_options(const GlbOptions& o) {
  S3D_CHECK(o.decimation_target >= 1, "to_glb: decimation_target must be at least 1 (got ",
            o.decimation_target, ")");
  S3D_CHECK(o.texture_size >= 1 && o.texture_size <= kMaxTextureSize,
            "to_glb: texture_size must be in [1, ", kMaxTextureSize, "] (got ", o.texture_size,
            ")");
  S3D_CHECK(std::isfinite(o.remesh_band) && o.remesh_band > 0,
            "to_glb: remesh_band must be a positive number (got ", o.remesh_band, ")");
  S3D_CHECK(std::isfinite(o.remesh_project) && o.remesh_project >= 0 && o.remesh_project <= 1,
            "to_glb: remesh_project must be in [0, 1] (got ", o.remesh_project, ")");
  S3D_CHECK(std::isfinite(o.mesh_cluster_threshold_cone_half_angle_rad) &&
                o.mesh_cluster_threshold_cone_half_angle_rad > 0,
            "to_glb: mesh_cluster_threshold_cone_half_angle_rad must be positive");
  S3D_CHECK(o.mesh_cluster_refine_iterations >= 0 && o.mesh_cluster_global_iterations >= 0,
            "to_glb: the mesh_cluster iteration counts must not be negative");
}

// Every check of the input, before any work: one error naming the first problem.
void check_input(const GlbInput& in) {
  S3D_CHECK(in.num_vertices > 0 && in.vertices, "to_glb: the mesh has no vertices");
  S3D_CHECK(in.num_faces > 0 && in.faces, "to_glb: the mesh has no faces");
  S3D_CHECK(in.num_vertices < (int64_t{1} << 31) && in.num_faces < (int64_t{1} << 31),
            "to_glb: more than 2^31 vertices or faces");
  S3D_CHECK(in.num_voxels > 0 && in.coords && in.attrs,
            "to_glb: the attribute volume has no voxels");
  S3D_CHECK(in.channels >= 1 && in.channels <= 4096, "to_glb: attrs must have 1..4096 channels "
            "(got ", in.channels, ")");
  const AttributeLayout& l = in.layout;
  const struct {
    const char* name;
    int32_t first, count;
  } need[] = {{"base_color", l.base_color, 3},
              {"metallic", l.metallic, 1},
              {"roughness", l.roughness, 1},
              {"alpha", l.alpha, 1}};
  for (const auto& q : need)
    S3D_CHECK(q.first >= 0 && q.first + q.count <= in.channels, "to_glb: attr_layout's ",
              q.name, " takes channels ", q.first, "..", q.first + q.count - 1, " but attrs has ",
              in.channels, " channels");
  for (int k = 0; k < 3; ++k) {
    S3D_CHECK(in.grid_size[k] >= 1 && in.grid_size[k] <= 1 << 16, "to_glb: grid_size[", k,
              "] must be in [1, 65536] (got ", in.grid_size[k], ")");
    S3D_CHECK(std::isfinite(in.aabb[k]) && std::isfinite(in.aabb[k + 3]) &&
                  in.aabb[k + 3] > in.aabb[k],
              "to_glb: aabb must be finite with max > min on every axis (axis ", k, ")");
  }
  for (int64_t i = 0; i < 3 * in.num_vertices; ++i)
    S3D_CHECK(std::isfinite(in.vertices[i]), "to_glb: vertex ", i / 3,
              " has a non-finite coordinate");
  for (int64_t i = 0; i < 3 * in.num_faces; ++i)
    S3D_CHECK(in.faces[i] >= 0 && in.faces[i] < in.num_vertices, "to_glb: face ", i / 3,
              " names vertex ", in.faces[i], ", outside [0, ", in.num_vertices, ")");
}

class StageClock {
 public:
  StageClock(const GlbOptions& o, std::vector<StageSeconds>& out)
      : o_(o), out_(out), total_(o.remesh ? kStages + 1 : kStages) {}
  void start(const char* name) {
    stop();
    if (o_.progress) o_.progress(name, index_, total_);
    name_ = name;
    t0_ = Clock::now();
    ++index_;
  }
  void stop() {
    if (name_.empty()) return;
    out_.push_back({name_, std::chrono::duration<double>(Clock::now() - t0_).count()});
    name_.clear();
  }

 private:
  const GlbOptions& o_;
  std::vector<StageSeconds>& out_;
  int total_;
  std::string name_;
  Clock::time_point t0_;
  int index_ = 0;
};

// The remesh branch's first half: narrow-band dual contouring around the filled surface (the
// budget is simplify's, a stage of its own).
// On the GPU when the BVH is there; should that fail (device memory), on the CPU, counted.
TriMesh remesh_branch(s3d::mesh::Bvh& bvh, const GlbInput& in, const GlbOptions& o,
                      std::vector<std::string>& fallbacks) {
  s3d::mesh::RemeshOptions r;
  float scale = 0;
  for (int k = 0; k < 3; ++k) {
    r.center[k] = 0.5f * (in.aabb[k] + in.aabb[k + 3]);
    scale = std::max(scale, in.aabb[k + 3] - in.aabb[k]);
  }
  const int32_t res = *std::max_element(in.grid_size.begin(), in.grid_size.end());
  r.resolution = res;
  r.scale = (res + 3 * o.remesh_band) / res * scale;
  r.band = o.remesh_band;
  r.project_back = o.remesh_project;
  r.drop_cavities = o.remesh_drop_cavities;
  s3d::mesh::RemeshStats stats;
  const auto run = [&] {
    TriMesh m = s3d::mesh::remesh_narrow_band_dc(bvh, r, &stats);
    if (stats.cavities_kept_all)
      fallbacks.push_back(
          "remesh_drop_cavities: no surface faces space joined to the grid's border; "
          "every surface kept");
    return m;
  };
  if (bvh.on_device() && r.use_device) {
    try {
      return run();
    } catch (const s3d::Error& e) {
      fallbacks.push_back(std::string("use_gpu: remesh: ") + e.what() + "; remeshed on the CPU");
      r.use_device = false;
      bvh.build_host_tree();
    }
  }
  return run();
}

s3d::mesh::SimplifyOptions simplify_options(const GlbOptions& o) {
  s3d::mesh::SimplifyOptions so;
  so.method = o.simplifier == Simplifier::Meshoptimizer ? s3d::mesh::SimplifyMethod::meshoptimizer
                                                        : s3d::mesh::SimplifyMethod::shaped;
  return so;
}

// The plain branch: simplify to 3x, clean, simplify to the target, clean, orient.
TriMesh plain_branch(TriMesh m, const GlbOptions& o) {
  namespace sm = s3d::mesh;
  const sm::SimplifyOptions so = simplify_options(o);
  sm::simplify(m, o.decimation_target * 3, so);
  for (int pass = 0; pass < 2; ++pass) {
    sm::remove_duplicate_faces(m);
    sm::repair_non_manifold_edges(m);
    sm::remove_small_components(m, kSmallComponent);
    sm::fill_holes(m, kHolePerimeter);
    if (pass == 0) sm::simplify(m, o.decimation_target, so);
  }
  sm::unify_orientation(m);
  return m;
}

uint8_t to_byte(float x) {
  // np.clip(x * 255, 0, 255).astype(np.uint8): clamp, then truncate toward zero.
  const float y = std::clamp(x * 255.0f, 0.0f, 255.0f);
  return static_cast<uint8_t>(y);
}

// Texel channels to the two glTF images (RGBA base colour + alpha; 0, roughness, metallic),
// the uncovered texels filled from the charts around them.
void finalize_textures(const s3d::mesh::BakedTexture& t, const AttributeLayout& l,
                       TexturedMesh::Impl& out) {
  const int64_t n = int64_t{t.size} * t.size;
  out.base_color_rgba.assign(4 * n, 0);
  out.metallic_roughness_rgb.assign(3 * n, 0);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float* a = &t.attrs[i * t.channels];
    for (int c = 0; c < 3; ++c) out.base_color_rgba[4 * i + c] = to_byte(a[l.base_color + c]);
    out.base_color_rgba[4 * i + 3] = to_byte(a[l.alpha]);
    out.metallic_roughness_rgb[3 * i + 1] = to_byte(a[l.roughness]);
    out.metallic_roughness_rgb[3 * i + 2] = to_byte(a[l.metallic]);
  }
  s3d::mesh::fill_uncovered(out.base_color_rgba, t.mask, t.size, t.size, 4);
  s3d::mesh::fill_uncovered(out.metallic_roughness_rgb, t.mask, t.size, t.size, 3);
}

// glTF axes: (x, y, z) -> (x, z, -y), as to_glb swaps before export.
void to_gltf_axes(std::vector<float>& xyz) {
  for (size_t i = 0; i + 2 < xyz.size(); i += 3) {
    const float y = xyz[i + 1];
    xyz[i + 1] = xyz[i + 2];
    xyz[i + 2] = -y;
  }
}

// The attribute volume; its constructor makes the voxels' checks (volume.h).
s3d::mesh::SparseVolume volume_of(const GlbInput& in) {
  return s3d::mesh::SparseVolume(
      std::vector<int32_t>(in.coords, in.coords + 3 * in.num_voxels),
      std::vector<float>(in.attrs, in.attrs + in.num_voxels * in.channels), in.channels,
      in.grid_size);
}

// The CUDA context (a few hundred ms on first use) made on a thread of its own while the CPU
// fills holes and builds the BVH; wait() before the first device call. An error here is
// dropped: the device call meets it again and reports the fallback.
void make_cuda_context() {
  if (s3d::cuda_available()) cudaFree(nullptr);
  cudaGetLastError();
}

class CudaWarmUp {
 public:
  explicit CudaWarmUp(bool on) {
    if (on) thread_ = std::thread(make_cuda_context);
  }
  ~CudaWarmUp() { wait(); }
  CudaWarmUp(const CudaWarmUp&) = delete;
  CudaWarmUp& operator=(const CudaWarmUp&) = delete;
  void wait() {
    if (thread_.joinable()) thread_.join();
  }

 private:
  std::thread thread_;
};

// start_gpu_context()'s thread, joined when the program ends.
struct EarlyContext {
  std::once_flag once;
  std::thread thread;
  ~EarlyContext() {
    if (thread.joinable()) thread.join();
  }
};
EarlyContext& early_context() {
  static EarlyContext e;
  return e;
}

// The decoded surface's BVH: built on the GPU when the closest-point queries run there (the
// remesh's and the bake's), else on the host; a device that is missing or fails is a counted
// fallback to the host.
s3d::mesh::Bvh surface_bvh(const TriMesh& m, bool use_gpu, std::vector<std::string>& fallbacks) {
  if (use_gpu && !s3d::cuda_available()) {
    fallbacks.push_back("use_gpu: no usable CUDA device; closest points on the CPU");
  } else if (use_gpu) {
    try {
      return s3d::mesh::Bvh(m, s3d::mesh::BvhBuild::device);
    } catch (const s3d::Error& e) {
      fallbacks.push_back(std::string("use_gpu: ") + e.what() + "; closest points on the CPU");
    }
  }
  return s3d::mesh::Bvh(m);
}

// The attribute volume's device copy, where the BVH is on the device (so the bake's samples run
// there too); a failed upload is a counted fallback to the CPU's samples.
std::unique_ptr<const s3d::mesh::DeviceVolume> volume_on_device(
    const s3d::mesh::Bvh& bvh, const s3d::mesh::SparseVolume& volume,
    std::vector<std::string>& fallbacks) {
  if (!bvh.on_device()) return nullptr;
  try {
    return std::make_unique<const s3d::mesh::DeviceVolume>(volume);
  } catch (const s3d::Error& e) {
    fallbacks.push_back(std::string("use_gpu: attribute volume: ") + e.what() +
                        "; volume samples on the CPU");
    return nullptr;
  }
}

// The chart options of the UV atlas, as GlbOptions gives them.
s3d::mesh::ChartOptions chart_options(const GlbOptions& o) {
  namespace sm = s3d::mesh;
  sm::ChartOptions charts;
  charts.cone_half_angle_rad = o.mesh_cluster_threshold_cone_half_angle_rad;
  charts.refine_iterations = o.mesh_cluster_refine_iterations;
  charts.global_iterations = o.mesh_cluster_global_iterations;
  charts.smooth_strength = o.mesh_cluster_smooth_strength;
  charts.texture_size = o.texture_size;
  charts.method = o.atlas == UvAtlas::Xatlas      ? sm::AtlasMethod::xatlas
                  : o.atlas == UvAtlas::Conformal ? sm::AtlasMethod::conformal
                                                  : sm::AtlasMethod::planar;
  return charts;
}

// The UV atlas stage: the simplified mesh cleaned and unwrapped, and its vertex normals carried
// over to the atlas's vertices (a vertex split at a seam keeps its normal).
s3d::mesh::UvMesh unwrap_with_normals(TriMesh& simplified, const GlbOptions& o,
                                      std::vector<float>& normals) {
  namespace sm = s3d::mesh;
  sm::SubTimer clean_timer("UV atlas");
  sm::remove_degenerate_faces(simplified);
  sm::remove_unreferenced_vertices(simplified);
  clean_timer.mark("clean");
  sm::UvMesh uv = sm::uv_unwrap(simplified, chart_options(o));
  sm::SubTimer normals_timer("UV atlas");
  const std::vector<float> vn = sm::vertex_normals(simplified);
  normals.resize(3 * uv.vertex_of.size());
  for (size_t v = 0; v < uv.vertex_of.size(); ++v)
    for (int k = 0; k < 3; ++k) normals[3 * v + k] = vn[3 * uv.vertex_of[v] + k];
  normals_timer.mark("vertex normals");
  return uv;
}

// What the bake samples: the atlas, the decoded surface, the attribute volume (and its device
// copy, if any), and the voxel grid's placement in the aabb.
s3d::mesh::BakeInputs bake_inputs(const s3d::mesh::UvMesh& uv, const s3d::mesh::Bvh& bvh,
                                  const s3d::mesh::SparseVolume& volume,
                                  const s3d::mesh::DeviceVolume* device_volume,
                                  const GlbInput& in) {
  s3d::mesh::BakeInputs bake_in;
  bake_in.uv_mesh = &uv;
  bake_in.surface = &bvh;
  bake_in.volume = &volume;
  bake_in.device_volume = device_volume;
  for (int k = 0; k < 3; ++k) {
    bake_in.grid_origin[k] = in.aabb[k];
    bake_in.voxel_size[k] = (in.aabb[k + 3] - in.aabb[k]) / in.grid_size[k];
  }
  return bake_in;
}

// The finalize stage: the two images, and the mesh in glTF's axes.
void finalize_mesh(const s3d::mesh::BakedTexture& baked, const s3d::mesh::UvMesh& uv,
                   const GlbInput& in, const GlbOptions& o, TexturedMesh::Impl& out) {
  out.texture_size = o.texture_size;
  finalize_textures(baked, in.layout, out);
  out.positions = uv.positions;
  to_gltf_axes(out.positions);
  to_gltf_axes(out.normals);
  out.uvs = uv.uvs;  // raster rows are image rows: glTF's v = 0 at the top is the raster's row 0
  out.faces.assign(uv.faces.begin(), uv.faces.end());
  out.double_sided = !o.remesh;
}

}  // namespace

void check_glb_input(const GlbInput& in) {
  check_input(in);
  volume_of(in);  // the checks; the copy is dropped
}

void start_gpu_context() {
  EarlyContext& e = early_context();
  std::call_once(e.once, [&e] { e.thread = std::thread(make_cuda_context); });
}

TexturedMesh to_glb(const GlbInput& in, const GlbOptions& o) {
  namespace sm = s3d::mesh;
  check_options(o);
  check_input(in);
  TexturedMesh result;
  TexturedMesh::Impl& out = *result.impl_;
  StageClock clock(o, out.stages);

  CudaWarmUp cuda_warm_up(o.use_gpu);

  clock.start("fill holes");
  sm::SubTimer fill_timer("fill holes");
  TriMesh decoded;
  decoded.positions.assign(in.vertices, in.vertices + 3 * in.num_vertices);
  decoded.faces.assign(in.faces, in.faces + 3 * in.num_faces);
  fill_timer.mark("copy the mesh");
  // The attribute volume (its checks and its hash table, one thread) is built beside the hole
  // filling and the BVH, and waited for before the remesh: a bad volume still stops the
  // export before its long stages.
  std::future<sm::SparseVolume> volume_job =
      std::async(std::launch::async, [&in] { return volume_of(in); });
  sm::fill_holes(decoded, kHolePerimeter);
  fill_timer.mark("fill");

  clock.start("build BVH");
  sm::SubTimer bvh_timer("build BVH");
  cuda_warm_up.wait();
  bvh_timer.mark("wait for the CUDA context");
  sm::Bvh bvh = surface_bvh(decoded, o.use_gpu, out.fallbacks);
  bvh_timer.mark(bvh.has_host_tree() ? "tree on the host" : "tree on the device");
  const sm::SparseVolume volume = volume_job.get();
  bvh_timer.mark("wait for the attribute volume");

  TriMesh simplified;
  if (o.remesh) {
    clock.start("remesh");
    simplified = remesh_branch(bvh, in, o, out.fallbacks);
    clock.start("simplify");
    sm::simplify(simplified, o.decimation_target, simplify_options(o));
  } else {
    clock.start("clean and simplify");
    simplified = plain_branch(decoded, o);
  }
  S3D_CHECK(simplified.num_faces() > 0, "to_glb: no faces are left after ",
            o.remesh ? "remeshing" : "cleaning", " (is the mesh inside its aabb?)");

  clock.start("UV atlas");
  const sm::UvMesh uv = unwrap_with_normals(simplified, o, out.normals);

  clock.start("bake textures");
  sm::SubTimer timer("bake textures");
  sm::UvRaster raster = sm::rasterize_uv(uv, o.texture_size);
  timer.mark("rasterize");
  sm::dilate_raster(raster, uv, kDilateTexels);
  timer.mark("dilate");
  const std::unique_ptr<const sm::DeviceVolume> device_volume =
      volume_on_device(bvh, volume, out.fallbacks);
  timer.mark("attribute volume to the device");
  const sm::BakedTexture baked =
      sm::bake(raster, bake_inputs(uv, bvh, volume, device_volume.get(), in));

  clock.start("finalize");
  finalize_mesh(baked, uv, in, o, out);
  clock.stop();
  return result;
}

namespace {

// The output mesh and its two images encoded, ready for the GLB writer.
s3d::mesh::GlbMesh encoded_glb(const TexturedMesh& m, TextureFormat format, bool keep_alpha) {
  namespace sm = s3d::mesh;
  S3D_CHECK(m.num_faces() > 0, "export: the mesh is empty (was it made by to_glb?)");
  sm::EncodeOptions e;
  e.codec = format == TextureFormat::PNG ? sm::ImageCodec::png : sm::ImageCodec::webp;
  if (format == TextureFormat::WebPLossless) {
    // libwebp's fastest lossless setting (cwebp -z 0): effort 0, method 0.
    e.webp_lossless = true;
    e.webp_quality = 0;
    e.webp_method = 0;
  }
  const int32_t s = m.texture_size();
  sm::GlbMesh g;
  g.positions = m.positions();
  g.normals = m.normals();
  g.uvs = m.uvs();
  g.indices = m.faces();
  g.codec = e.codec;
  g.double_sided = m.double_sided();
  // Without keep_alpha, the base colour's RGB only (alphaMode OPAQUE: glTF ignores alpha).
  std::vector<uint8_t> base_rgb;
  if (!keep_alpha) {
    const std::vector<uint8_t>& rgba = m.base_color_rgba();
    const int64_t n = int64_t{s} * s;
    base_rgb.resize(3 * n);
#pragma omp parallel for schedule(static) if (n >= (int64_t{1} << 16))
    for (int64_t i = 0; i < n; ++i)
      for (int c = 0; c < 3; ++c) base_rgb[3 * i + c] = rgba[4 * i + c];
  }
  // The two images are independent and each encoder is mostly serial: one thread each. An
  // exception leaves its thread as a message, rethrown here.
  std::string error[2];
#pragma omp parallel for schedule(static, 1) num_threads(2)
  for (int image = 0; image < 2; ++image) {
    try {
      if (image == 0)
        g.base_color_image = keep_alpha
                                 ? sm::encode_image(m.base_color_rgba().data(), s, s, 4, e)
                                 : sm::encode_image(base_rgb.data(), s, s, 3, e);
      else
        g.metallic_roughness_image =
            sm::encode_image(m.metallic_roughness_rgb().data(), s, s, 3, e);
    } catch (const std::exception& ex) {
      error[image] = ex.what();
    }
  }
  for (const std::string& what : error)
    if (!what.empty()) s3d::fail(what);
  return g;
}

}  // namespace

std::string TexturedMesh::glb_bytes(TextureFormat format, bool keep_alpha) const {
  return s3d::mesh::glb_bytes(encoded_glb(*this, format, keep_alpha));
}

double TexturedMesh::export_glb(const std::string& path, TextureFormat format,
                                bool keep_alpha) const {
  const auto t0 = Clock::now();
  s3d::io::check_output_file(path, "export_glb: " + path);
  s3d::mesh::SubTimer timer("export");
  s3d::mesh::GlbMesh glb = encoded_glb(*this, format, keep_alpha);
  timer.mark("encode images");
  s3d::mesh::write_glb(glb, path);
  timer.mark("write");
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

GlbInput GlbAsset::view() const {
  GlbInput in;
  in.vertices = vertices.data();
  in.num_vertices = static_cast<int64_t>(vertices.size() / 3);
  in.faces = faces.data();
  in.num_faces = static_cast<int64_t>(faces.size() / 3);
  in.coords = coords.data();
  in.attrs = attrs.data();
  in.num_voxels = static_cast<int64_t>(coords.size() / 3);
  in.channels = channels;
  in.layout = layout;
  in.aabb = aabb;
  in.grid_size = grid_size;
  return in;
}

}  // namespace sparse3d
