// sparse3d_engine._native's GLB export (include/sparse3d/glb.h): to_glb over host arrays and
// the TexturedMesh it returns. The package's trellis2.to_glb (python/sparse3d_engine/
// trellis2.py) takes o_voxel.postprocess.to_glb's arguments and calls this.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/array.h>
#include <nanobind/stl/function.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <array>
#include <string>

#include "sparse3d/glb.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace {

template <class T>
using HostRows = nb::ndarray<const T, nb::ndim<2>, nb::c_contig, nb::device::cpu>;

template <class T>
void check_cols(const HostRows<T>& a, size_t cols, const char* what) {
  if (cols && a.shape(1) != cols)
    throw sparse3d::Error(std::string(what) + ": must have " + std::to_string(cols) +
                          " columns, got " + std::to_string(a.shape(1)));
}

// The output arrays as NumPy arrays that copy the mesh's vectors (small next to the work).
template <class T>
nb::ndarray<nb::numpy, T> numpy_copy(const std::vector<T>& v, size_t cols) {
  auto* data = new std::vector<T>(v);
  nb::capsule owner(data, [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
  const size_t shape[2] = {v.size() / cols, cols};
  return nb::ndarray<nb::numpy, T>(data->data(), 2, shape, owner);
}

sparse3d::TexturedMesh run_to_glb(HostRows<float> vertices, HostRows<int32_t> faces,
                                  HostRows<float> attrs, HostRows<int32_t> coords,
                                  std::array<int32_t, 4> layout, std::array<float, 6> aabb,
                                  std::array<int32_t, 3> grid_size, int64_t decimation_target,
                                  int32_t texture_size, bool remesh, float remesh_band,
                                  float remesh_project, float cone, int32_t refine,
                                  int32_t global, float smooth, bool use_gpu, std::string atlas,
                                  bool drop_cavities, std::string simplifier,
                                  std::function<void(std::string, int, int)> progress) {
  check_cols(vertices, 3, "vertices");
  check_cols(faces, 3, "faces");
  check_cols(coords, 3, "coords");
  if (attrs.shape(0) != coords.shape(0))
    throw sparse3d::Error("attr_volume has " + std::to_string(attrs.shape(0)) +
                          " rows but coords has " + std::to_string(coords.shape(0)));
  sparse3d::GlbInput in;
  in.vertices = vertices.data();
  in.num_vertices = static_cast<int64_t>(vertices.shape(0));
  in.faces = faces.data();
  in.num_faces = static_cast<int64_t>(faces.shape(0));
  in.coords = coords.data();
  in.attrs = attrs.data();
  in.num_voxels = static_cast<int64_t>(coords.shape(0));
  in.channels = static_cast<int32_t>(attrs.shape(1));
  in.layout = {layout[0], layout[1], layout[2], layout[3]};
  in.aabb = aabb;
  in.grid_size = grid_size;
  sparse3d::GlbOptions o;
  o.decimation_target = decimation_target;
  o.texture_size = texture_size;
  o.remesh = remesh;
  o.remesh_band = remesh_band;
  o.remesh_project = remesh_project;
  o.mesh_cluster_threshold_cone_half_angle_rad = cone;
  o.mesh_cluster_refine_iterations = refine;
  o.mesh_cluster_global_iterations = global;
  o.mesh_cluster_smooth_strength = smooth;
  o.use_gpu = use_gpu;
  o.remesh_drop_cavities = drop_cavities;
  if (atlas != "planar" && atlas != "conformal" && atlas != "xatlas")
    throw sparse3d::Error("to_glb: atlas must be 'planar', 'conformal' or 'xatlas', got '" +
                          atlas + "'");
  o.atlas = atlas == "xatlas"      ? sparse3d::UvAtlas::Xatlas
            : atlas == "conformal" ? sparse3d::UvAtlas::Conformal
                                   : sparse3d::UvAtlas::Planar;
  if (simplifier != "shaped" && simplifier != "meshoptimizer")
    throw sparse3d::Error("to_glb: simplifier must be 'shaped' or 'meshoptimizer', got '" +
                          simplifier + "'");
  o.simplifier = simplifier == "meshoptimizer" ? sparse3d::Simplifier::Meshoptimizer
                                               : sparse3d::Simplifier::Shaped;
  if (progress)
    o.progress = [progress](const std::string& stage, int i, int n) {
      nb::gil_scoped_acquire gil;
      progress(stage, i, n);
    };
  nb::gil_scoped_release release;
  return sparse3d::to_glb(in, o);
}

// export's extension_webp and lossless as a TextureFormat (lossless PNG when not WebP).
sparse3d::TextureFormat texture_format(bool webp, bool lossless) {
  if (!webp) return sparse3d::TextureFormat::PNG;
  return lossless ? sparse3d::TextureFormat::WebPLossless : sparse3d::TextureFormat::WebP;
}

}  // namespace

void bind_glb(nb::module_& m) {
  using sparse3d::TexturedMesh;
  nb::class_<TexturedMesh>(m, "TexturedMesh")
      .def_prop_ro("num_vertices", &TexturedMesh::num_vertices)
      .def_prop_ro("num_faces", &TexturedMesh::num_faces)
      .def_prop_ro("texture_size", &TexturedMesh::texture_size)
      .def_prop_ro("double_sided", &TexturedMesh::double_sided)
      .def("vertices", [](const TexturedMesh& t) { return numpy_copy(t.positions(), 3); })
      .def("vertex_normals", [](const TexturedMesh& t) { return numpy_copy(t.normals(), 3); })
      .def("uvs", [](const TexturedMesh& t) { return numpy_copy(t.uvs(), 2); })
      .def("faces", [](const TexturedMesh& t) { return numpy_copy(t.faces(), 3); })
      .def("base_color_rgba", [](const TexturedMesh& t) {
        return numpy_copy(t.base_color_rgba(), 4);
      })
      .def("metallic_roughness_rgb", [](const TexturedMesh& t) {
        return numpy_copy(t.metallic_roughness_rgb(), 3);
      })
      .def("stage_seconds", [](const TexturedMesh& t) {
        nb::dict d;
        for (const auto& s : t.stage_seconds()) d[s.stage.c_str()] = s.seconds;
        return d;
      })
      .def("fallbacks", &TexturedMesh::fallbacks)
      .def("export_glb", [](const TexturedMesh& t, const std::string& path, bool webp,
                            bool keep_alpha, bool lossless) {
        nb::gil_scoped_release release;
        return t.export_glb(path, texture_format(webp, lossless), keep_alpha);
      }, "path"_a, "webp"_a, "keep_alpha"_a, "lossless"_a = false)
      .def("glb_bytes", [](const TexturedMesh& t, bool webp, bool keep_alpha, bool lossless) {
        std::string b;
        {
          nb::gil_scoped_release release;
          b = t.glb_bytes(texture_format(webp, lossless), keep_alpha);
        }
        return nb::bytes(b.data(), b.size());
      }, "webp"_a, "keep_alpha"_a, "lossless"_a = false);
  m.def("to_glb", &run_to_glb, "vertices"_a, "faces"_a, "attrs"_a, "coords"_a, "layout"_a,
        "aabb"_a, "grid_size"_a, "decimation_target"_a, "texture_size"_a, "remesh"_a,
        "remesh_band"_a, "remesh_project"_a, "cone_half_angle_rad"_a, "refine_iterations"_a,
        "global_iterations"_a, "smooth_strength"_a, "use_gpu"_a, "atlas"_a,
        "remesh_drop_cavities"_a, "simplifier"_a, "progress"_a.none(),
        "TRELLIS.2's to_glb natively on host arrays (sparse3d_engine.trellis2.to_glb takes the "
        "original's arguments).");
}
