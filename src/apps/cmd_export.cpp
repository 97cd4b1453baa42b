// export-glb and make-glb-input: TRELLIS.2's to_glb + GLB export natively
// (include/sparse3d/glb.h), and decoder-like inputs for it made from textured meshes.
#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdio>
#include <memory>
#include <string>

#include "apps/commands.h"
#include "core/error.h"
#include "io/atomic_file.h"
#include "io/safetensors.h"
#include "sparse3d/glb.h"

namespace s3d::apps {

namespace {
// --texture-format's value (checked by CLI11).
sparse3d::TextureFormat format_named(const std::string& name) {
  if (name == "png") return sparse3d::TextureFormat::PNG;
  return name == "webp-lossless" ? sparse3d::TextureFormat::WebPLossless
                                 : sparse3d::TextureFormat::WebP;
}

// --atlas's value (checked by CLI11 to be one of the three).
sparse3d::UvAtlas atlas_named(const std::string& name) {
  if (name == "xatlas") return sparse3d::UvAtlas::Xatlas;
  return name == "conformal" ? sparse3d::UvAtlas::Conformal : sparse3d::UvAtlas::Planar;
}
// What export-glb prints: the file, its size, each stage's seconds and every fallback.
void print_export_report(const sparse3d::TexturedMesh& mesh, const std::string& out,
                         const std::string& format, double write_s) {
  std::printf("wrote %s: %lld faces, %lld vertices, %dx%d %s textures\n", out.c_str(),
              static_cast<long long>(mesh.num_faces()), static_cast<long long>(mesh.num_vertices()),
              mesh.texture_size(), mesh.texture_size(), format.c_str());
  double total = write_s;
  for (const auto& s : mesh.stage_seconds()) {
    std::printf("  %-22s %8.3f s\n", s.stage.c_str(), s.seconds);
    total += s.seconds;
  }
  std::printf("  %-22s %8.3f s\n  %-22s %8.3f s\n", "encode and write", write_s, "total", total);
  for (const std::string& f : mesh.fallbacks()) std::printf("fallback: %s\n", f.c_str());
}

}  // namespace

Command add_export_glb(CLI::App& app) {
  struct Args {
    std::string input, out, format = "webp", atlas = "planar", simplifier = "shaped";
    int64_t decimation_target = 1000000;
    int texture_size = 2048;
    bool remesh = false, progress = false, cpu = false, keep_alpha = false;
    bool drop_cavities = false;
    float remesh_band = 1, remesh_project = 0.9f;
  };
  auto a = std::make_shared<Args>();
  auto* sub = app.add_subcommand(
      "export-glb", "Turn a decoded asset (mesh + PBR attribute volume) into a textured GLB, as "
                    "TRELLIS.2's to_glb + export");
  sub->add_option("--input", a->input, "GLB input file (docs/FORMATS.md, 'GLB input files')")
      ->required()
      ->check(kNonEmptyPath);
  sub->add_option("--out", a->out, "Output .glb")->required()->check(kNonEmptyPath);
  sub->add_option("--decimation-target", a->decimation_target, "Faces at most")
      ->transform(integer_in(1, int64_t{1} << 30))
      ->capture_default_str();
  sub->add_option("--texture-size", a->texture_size, "Texels per side")
      ->transform(integer_in(1, 16384))
      ->capture_default_str();
  sub->add_flag("--remesh,!--no-remesh", a->remesh,
                "Narrow-band dual-contouring remesh (TRELLIS.2's app and example use it)")
      ->capture_default_str();
  sub->add_option("--remesh-band", a->remesh_band, "Band, in voxels")
      ->transform(number_in(1e-3, 64))
      ->capture_default_str();
  sub->add_option("--remesh-project", a->remesh_project, "Pull-back onto the surface, 0..1")
      ->transform(number_in(0, 1))
      ->capture_default_str();
  sub->add_flag("--remesh-drop-cavities", a->drop_cavities,
                "Drop the surfaces the remesh puts around enclosed space (inside solids and "
                "closed walls: never visible), so faces and texels go to the visible surface; "
                "by default they are kept, as the original keeps them");
  sub->add_option("--texture-format", a->format,
                  "webp (EXT_texture_webp, lossy), webp-lossless (the same, lossless) or png")
      ->check(CLI::IsMember({"webp", "webp-lossless", "png"}))
      ->capture_default_str();
  sub->add_flag("--keep-alpha", a->keep_alpha,
                "Base-colour texture as RGBA, alpha included, as the original writes it (the "
                "material is OPAQUE, so viewers ignore alpha; without this flag it is RGB)");
  sub->add_flag("--progress", a->progress, "A line per stage on stderr");
  sub->add_option("--atlas", a->atlas,
                  "UV atlas: planar (our charts, packed at exactly the texture size), conformal "
                  "(also conformal charts: fewer charts and seams) or xatlas (the original's)")
      ->check(CLI::IsMember({"planar", "conformal", "xatlas"}))
      ->capture_default_str();
  sub->add_option("--simplifier", a->simplifier,
                  "Edge collapse to the face budget: shaped (sparse3d's: even triangles, few "
                  "folds, larger charts) or meshoptimizer (the reference: faster on the CPU)")
      ->check(CLI::IsMember({"shaped", "meshoptimizer"}))
      ->capture_default_str();
  sub->add_flag("--cpu", a->cpu, "Keep the closest-point queries on the CPU (same bits)");
  return [a]() {
    io::check_output_file(a->out, "--out " + a->out);  // before the work, not after it
    if (!a->cpu) sparse3d::start_gpu_context();  // made while the input is read
    const sparse3d::GlbAsset asset = sparse3d::load_glb_input(a->input);
    sparse3d::GlbOptions o;
    o.decimation_target = a->decimation_target;
    o.texture_size = a->texture_size;
    o.remesh = a->remesh;
    o.remesh_band = a->remesh_band;
    o.remesh_project = a->remesh_project;
    o.remesh_drop_cavities = a->drop_cavities;
    o.use_gpu = !a->cpu;
    o.atlas = atlas_named(a->atlas);
    o.simplifier = a->simplifier == "meshoptimizer" ? sparse3d::Simplifier::Meshoptimizer
                                                     : sparse3d::Simplifier::Shaped;
    if (a->progress)
      o.progress = [](const std::string& stage, int i, int n) {
        std::fprintf(stderr, "[%d/%d] %s\n", i + 1, n, stage.c_str());
      };
    const sparse3d::TexturedMesh mesh = sparse3d::to_glb(asset.view(), o);
    const double write_s = mesh.export_glb(a->out, format_named(a->format), a->keep_alpha);
    print_export_report(mesh, a->out, a->format, write_s);
    return 0;
  };
}

namespace {

// --procedural torus: a torus (major radius 0.3, minor 0.12, 181 x 67 quads) with the
// documented procedural PBR field: base colour in smooth bands of position, metallic 0/1 in
// 0.1-unit cells, roughness a gradient along z, alpha 1.
void procedural_torus(std::vector<float>& v, std::vector<int32_t>& f, std::vector<float>& pbr) {
  const int nu = 181, nv = 67;
  const float R = 0.3f, r = 0.12f, two_pi = 6.2831853f;
  for (int i = 0; i < nu; ++i)
    for (int j = 0; j < nv; ++j) {
      const float u = two_pi * i / nu, w = two_pi * j / nv;
      const float x = (R + r * std::cos(w)) * std::cos(u), y = (R + r * std::cos(w)) * std::sin(u),
                  z = r * std::sin(w);
      v.insert(v.end(), {x, y, z});
      const int cell = static_cast<int>(std::floor(x * 10)) + static_cast<int>(std::floor(y * 10)) +
                       static_cast<int>(std::floor(z * 10));
      pbr.insert(pbr.end(), {0.5f + 0.5f * std::sin(9 * x), 0.5f + 0.5f * std::sin(9 * y + 1),
                             0.5f + 0.5f * std::sin(9 * z + 2), (cell & 1) ? 1.0f : 0.0f,
                             0.2f + 0.6f * (z + 0.5f), 1.0f});
    }
  for (int i = 0; i < nu; ++i)
    for (int j = 0; j < nv; ++j) {
      const int a = i * nv + j, b = ((i + 1) % nu) * nv + j, c = i * nv + (j + 1) % nv,
                d = ((i + 1) % nu) * nv + (j + 1) % nv;
      f.insert(f.end(), {a, b, d, a, d, c});
    }
}

}  // namespace

Command add_make_glb_input(CLI::App& app) {
  struct Args {
    std::string source, procedural, out;
    int resolution = 256;
  };
  auto a = std::make_shared<Args>();
  auto* sub = app.add_subcommand(
      "make-glb-input", "Voxelize a textured source mesh into what TRELLIS.2's decoders hand to "
                        "to_glb (docs/FORMATS.md)");
  sub->add_option("--source", a->source,
                  "Source mesh: safetensors with vertices F32 [V,3] in [-0.5,0.5], faces I32 "
                  "[F,3], pbr F32 [V,6]")
      ->check(kNonEmptyPath);
  auto* proc = sub->add_option("--procedural", a->procedural,
                               "Instead of --source: a built-in textured surface")
                   ->check(CLI::IsMember({"torus"}));
  sub->get_option("--source")->excludes(proc);
  sub->add_option("--resolution", a->resolution, "Voxels per side (TRELLIS.2: 512, 1024, 1536)")
      ->transform(integer_in(2, 4096))
      ->capture_default_str();
  sub->add_option("--out", a->out, "Output GLB input file")->required()->check(kNonEmptyPath);
  return [a]() {
    io::check_output_file(a->out, "--out " + a->out);
    S3D_CHECK(!a->source.empty() || !a->procedural.empty(),
              "make-glb-input: give --source FILE or --procedural torus");
    sparse3d::GlbAsset asset;
    if (!a->procedural.empty()) {
      std::vector<float> v, pbr;
      std::vector<int32_t> f;
      procedural_torus(v, f, pbr);
      asset = sparse3d::voxelize_textured_mesh(
          v, f, pbr, 6, a->resolution, "procedural torus at " + std::to_string(a->resolution));
    } else {
      const std::string what = "source mesh " + a->source;
      const auto f = io::SafetensorsFile::open(a->source, what);
      f.check_tensor_bytes(uint64_t{4} << 30, "a source mesh");
      const Tensor v = f.load("vertices", DType::F32), t = f.load("faces", DType::I32),
                   p = f.load("pbr", DType::F32);
      S3D_CHECK(v.ndim() == 2 && v.size(1) == 3 && t.ndim() == 2 && t.size(1) == 3 &&
                    p.ndim() == 2 && p.size(0) == v.size(0) && p.size(1) == 6,
                what, ": needs vertices [V, 3], faces [F, 3] and pbr [V, 6] (got ",
                v.describe(), ", ", t.describe(), ", ", p.describe(), ")");
      const auto src = f.metadata().find("name");
      const std::string source = (src == f.metadata().end() ? a->source : src->second) +
                                 " at " + std::to_string(a->resolution);
      asset = sparse3d::voxelize_textured_mesh(
          {v.data_as<float>(), v.data_as<float>() + v.numel()},
          {t.data_as<int32_t>(), t.data_as<int32_t>() + t.numel()},
          {p.data_as<float>(), p.data_as<float>() + p.numel()}, 6, a->resolution, source);
    }
    sparse3d::save_glb_input(asset, a->out);
    std::printf("wrote %s: %zu vertices, %zu faces, %zu voxels at %d^3\n", a->out.c_str(),
                asset.vertices.size() / 3, asset.faces.size() / 3, asset.coords.size() / 3,
                a->resolution);
    return 0;
  };
}

}  // namespace s3d::apps
