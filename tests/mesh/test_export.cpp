// The whole export (sparse3d::to_glb and export_glb) on the CPU: a small decoder-like asset
// made by voxelize_textured_mesh from a procedural sphere, both branches, checked for the
// contract of each step the user sees (face budget, texture read back through the UVs, the
// GLB's bytes, the errors), and the GLB input file round trip.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include <webp/decode.h>

#include "core/cuda_util.h"
#include "mesh/glb_test_util.h"
#include "sparse3d/glb.h"

namespace {

namespace fs = std::filesystem;

struct Source {
  std::vector<float> vertices, pbr;
  std::vector<int32_t> faces;
};

// A sphere of radius 0.3 (odd ring and segment counts) with a smooth colour field.
Source sphere_source() {
  Source s;
  const int rings = 27, segs = 41;
  for (int r = 0; r <= rings; ++r) {
    const float th = 3.14159265f * r / rings;
    for (int k = 0; k < segs; ++k) {
      const float ph = 6.2831853f * k / segs;
      const float x = 0.3f * std::sin(th) * std::cos(ph), y = 0.3f * std::sin(th) * std::sin(ph),
                  z = 0.3f * std::cos(th);
      s.vertices.insert(s.vertices.end(), {x, y, z});
      s.pbr.insert(s.pbr.end(), {0.5f + x, 0.5f + y, 0.5f + z, 0.25f, 0.75f, 1.0f});
    }
  }
  for (int r = 0; r < rings; ++r)
    for (int k = 0; k < segs; ++k) {
      const int a = r * segs + k, b = r * segs + (k + 1) % segs, c = a + segs, d = b + segs;
      s.faces.insert(s.faces.end(), {a, c, b, b, c, d});
    }
  return s;
}

const sparse3d::GlbAsset& asset() {
  static const sparse3d::GlbAsset a = [] {
    const Source s = sphere_source();
    return sparse3d::voxelize_textured_mesh(s.vertices, s.faces, s.pbr, 6, 48, "test sphere");
  }();
  return a;
}

// The base colour the texture holds at a vertex's UV (nearest texel).
std::array<int, 3> texel_at(const sparse3d::TexturedMesh& m, int64_t v) {
  const int S = m.texture_size();
  const int c = std::clamp(static_cast<int>(m.uvs()[2 * v] * S), 0, S - 1);
  const int r = std::clamp(static_cast<int>(m.uvs()[2 * v + 1] * S), 0, S - 1);
  const uint8_t* p = &m.base_color_rgba()[4 * (int64_t{r} * S + c)];
  return {p[0], p[1], p[2]};
}

void expect_result_contract(const sparse3d::TexturedMesh& m, int64_t target, bool remesh) {
  ASSERT_GT(m.num_faces(), 0);
  EXPECT_LE(m.num_faces(), target);
  EXPECT_EQ(m.double_sided(), !remesh);
  ASSERT_EQ(m.positions().size(), 3 * static_cast<size_t>(m.num_vertices()));
  ASSERT_EQ(m.uvs().size(), 2 * static_cast<size_t>(m.num_vertices()));
  for (float u : m.uvs()) {
    EXPECT_GE(u, 0.0f);
    EXPECT_LE(u, 1.0f);
  }
  for (uint32_t i : m.faces()) EXPECT_LT(i, static_cast<uint32_t>(m.num_vertices()));
  // Colour read back at each vertex's UV agrees with the field at its position (mapped back
  // from glTF axes: input (x, y, z) = output (x, -z, y)); tolerance: a voxel's colour change
  // plus texel rounding.
  double err = 0;
  for (int64_t v = 0; v < m.num_vertices(); ++v) {
    const float x = m.positions()[3 * v], y = -m.positions()[3 * v + 2],
                z = m.positions()[3 * v + 1];
    const auto t = texel_at(m, v);
    err += std::abs(t[0] / 255.0 - (0.5 + x)) + std::abs(t[1] / 255.0 - (0.5 + y)) +
           std::abs(t[2] / 255.0 - (0.5 + z));
  }
  EXPECT_LT(err / (3 * m.num_vertices()), 0.03);
  // Metallic 0.25 and roughness 0.75 everywhere: the packed texture says so in every texel,
  // the filled ones included.
  const auto& mr = m.metallic_roughness_rgb();
  for (size_t i = 0; i < mr.size(); i += 3) {
    ASSERT_EQ(mr[i], 0);
    ASSERT_NEAR(mr[i + 1], 191, 1);
    ASSERT_NEAR(mr[i + 2], 63, 1);
  }
}

TEST(MeshExport, PlainBranchMeetsItsContract) {
  sparse3d::GlbOptions o;
  o.decimation_target = 1501;
  o.texture_size = 129;
  std::vector<std::string> stages;
  o.progress = [&](const std::string& s, int, int) { stages.push_back(s); };
  const sparse3d::TexturedMesh m = sparse3d::to_glb(asset().view(), o);
  expect_result_contract(m, 1501, false);
  EXPECT_EQ(stages.size(), m.stage_seconds().size());
  // use_gpu (the default) without a usable GPU is a fallback, said; with one, nothing is.
  if (s3d::cuda_available()) {
    EXPECT_TRUE(m.fallbacks().empty());
  } else {
    ASSERT_EQ(m.fallbacks().size(), 1u);
    EXPECT_NE(m.fallbacks()[0].find("no usable CUDA device"), std::string::npos);
  }
  o.use_gpu = false;
  EXPECT_TRUE(sparse3d::to_glb(asset().view(), o).fallbacks().empty());
}

// The remesh branch at a small budget and texture, no pull-back (the app's settings).
sparse3d::GlbOptions remesh_options(int64_t target, int32_t texture_size) {
  sparse3d::GlbOptions o;
  o.decimation_target = target;
  o.texture_size = texture_size;
  o.remesh = true;
  o.remesh_project = 0;
  return o;
}

TEST(MeshExport, RemeshBranchMeetsItsContract) {
  expect_result_contract(sparse3d::to_glb(asset().view(), remesh_options(2001, 97)), 2001, true);
}

// The test sphere is a solid: its remesh has a shell inside (wound inward) as well as the one
// outside. remesh_drop_cavities drops the inside one before the simplification, so every
// vertex lies outside every vertex of the shell it dropped, and the budget goes to the outside.
TEST(MeshExport, DroppedCavitiesLeaveOnlyTheOuterShell) {
  sparse3d::GlbOptions o = remesh_options(1501, 61);
  const sparse3d::TexturedMesh kept = sparse3d::to_glb(asset().view(), o);
  o.remesh_drop_cavities = true;
  const sparse3d::TexturedMesh dropped = sparse3d::to_glb(asset().view(), o);
  expect_result_contract(dropped, 1501, true);
  auto radii = [](const sparse3d::TexturedMesh& m) {
    const std::vector<float>& p = m.positions();
    double lo[3] = {1e30, 1e30, 1e30}, hi[3] = {-1e30, -1e30, -1e30};
    for (size_t i = 0; i < p.size(); ++i) {
      lo[i % 3] = std::min(lo[i % 3], double(p[i]));
      hi[i % 3] = std::max(hi[i % 3], double(p[i]));
    }
    std::vector<double> r(p.size() / 3);
    for (size_t v = 0; v < r.size(); ++v) {
      double d2 = 0;
      for (int k = 0; k < 3; ++k) d2 += std::pow(p[3 * v + k] - 0.5 * (lo[k] + hi[k]), 2);
      r[v] = std::sqrt(d2);
    }
    return r;
  };
  const std::vector<double> rk = radii(kept), rd = radii(dropped);
  const double inner_edge = *std::min_element(rd.begin(), rd.end());
  const auto inside = std::count_if(rk.begin(), rk.end(), [&](double r) { return r < inner_edge; });
  EXPECT_GT(inside, int64_t(rk.size() / 4)) << "the kept result has its inner shell";
  EXPECT_GT(inner_edge, 0.8 * *std::max_element(rd.begin(), rd.end()));
  // The outer shell gets the whole budget: more of its vertices than when both shared it.
  EXPECT_GT(int64_t(rd.size()), int64_t(rk.size()) - inside + int64_t(rk.size() / 8));
}

// start_gpu_context() only moves when the CUDA context is made (none without a GPU): twice,
// then an export, gives the same file as an export without it.
TEST(MeshExport, EarlyGpuContextChangesNoBit) {
  const sparse3d::GlbOptions o = remesh_options(1201, 67);
  const std::string before = sparse3d::to_glb(asset().view(), o).glb_bytes();
  sparse3d::start_gpu_context();
  sparse3d::start_gpu_context();
  EXPECT_EQ(sparse3d::to_glb(asset().view(), o).glb_bytes(), before);
}

TEST(MeshExport, WritesAGlbAndLeavesNothingOnFailure) {
  sparse3d::GlbOptions o;
  o.decimation_target = 800;
  o.texture_size = 64;
  const sparse3d::TexturedMesh m = sparse3d::to_glb(asset().view(), o);
  const fs::path dir = fs::temp_directory_path() / ("s3d_export_" + std::to_string(getpid()));
  fs::create_directories(dir);
  for (auto fmt : {sparse3d::TextureFormat::WebP, sparse3d::TextureFormat::PNG,
                   sparse3d::TextureFormat::WebPLossless}) {
    const fs::path out = dir / "a.glb";
    m.export_glb(out.string(), fmt);
    std::ifstream f(out, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(f)), {});
    ASSERT_GE(bytes.size(), 20u);
    EXPECT_EQ(bytes.substr(0, 4), "glTF");
    EXPECT_EQ(bytes, m.glb_bytes(fmt));
    const bool webp = bytes.find("EXT_texture_webp") != std::string::npos;
    EXPECT_EQ(webp, fmt != sparse3d::TextureFormat::PNG);
  }
  // A folder where the file should go: one error, and nothing new in the folder.
  fs::create_directories(dir / "taken.glb");
  EXPECT_THROW(m.export_glb((dir / "taken.glb").string()), sparse3d::Error);
  size_t entries = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir)) ++entries;
  EXPECT_EQ(entries, 2u);  // a.glb and taken.glb
  fs::remove_all(dir);
}

// The bytes of a GLB's image `index`, the container checked on the way.
std::string glb_image(const std::string& glb, int index) {
  const s3d::mesh::glb_test::Glb g = s3d::mesh::glb_test::parse_glb(glb);
  return s3d::mesh::glb_test::view_bytes(g, g.json.at("images").at(index).at("bufferView"));
}

TEST(MeshExport, BaseColourIsRgbUnlessAlphaIsKept) {
  sparse3d::GlbOptions o;
  o.decimation_target = 700;
  o.texture_size = 61;
  const sparse3d::TexturedMesh m = sparse3d::to_glb(asset().view(), o);
  for (bool keep : {false, true}) {
    // PNG: the colour type in IHDR (2 RGB, 6 RGBA).
    const std::string png = glb_image(m.glb_bytes(sparse3d::TextureFormat::PNG, keep), 0);
    ASSERT_GT(png.size(), 26u);
    EXPECT_EQ(static_cast<int>(png[25]), keep ? 6 : 2);
    // WebP: the alpha flag, and the decoded colours are the texture's (lossy at 61^2 with
    // chroma subsampling; channels out of order would be tens of levels off).
    const std::string webp = glb_image(m.glb_bytes(sparse3d::TextureFormat::WebP, keep), 0);
    const auto* data = reinterpret_cast<const uint8_t*>(webp.data());
    WebPBitstreamFeatures f;
    ASSERT_EQ(WebPGetFeatures(data, webp.size(), &f), VP8_STATUS_OK);
    EXPECT_EQ(f.has_alpha != 0, keep);
    int w = 0, h = 0;
    uint8_t* rgb = WebPDecodeRGB(data, webp.size(), &w, &h);
    ASSERT_NE(rgb, nullptr);
    ASSERT_EQ(w, 61);
    ASSERT_EQ(h, 61);
    double diff = 0;
    for (int i = 0; i < w * h; ++i)
      for (int c = 0; c < 3; ++c) diff += std::abs(rgb[3 * i + c] - m.base_color_rgba()[4 * i + c]);
    WebPFree(rgb);
    EXPECT_LT(diff / (3.0 * w * h), 12.0);  // 5.3 measured, RGB and RGBA alike
  }
  // The metallic-roughness image is RGB either way.
  const std::string mr = glb_image(m.glb_bytes(sparse3d::TextureFormat::PNG), 1);
  EXPECT_EQ(static_cast<int>(mr[25]), 2);
}

// Lossless WebP: both images decode to the baked texels exactly (61^2, odd), under the same
// EXT_texture_webp declaration as the lossy default.
TEST(MeshExport, LosslessWebpKeepsEveryTexel) {
  sparse3d::GlbOptions o;
  o.decimation_target = 700;
  o.texture_size = 61;
  const sparse3d::TexturedMesh m = sparse3d::to_glb(asset().view(), o);
  const std::string glb = m.glb_bytes(sparse3d::TextureFormat::WebPLossless);
  EXPECT_NE(glb.find("EXT_texture_webp"), std::string::npos);
  const int n = 61 * 61;
  for (int image = 0; image < 2; ++image) {
    const std::string webp = glb_image(glb, image);
    const auto* data = reinterpret_cast<const uint8_t*>(webp.data());
    WebPBitstreamFeatures f;
    ASSERT_EQ(WebPGetFeatures(data, webp.size(), &f), VP8_STATUS_OK);
    EXPECT_EQ(f.format, 2);  // lossless
    int w = 0, h = 0;
    uint8_t* rgb = WebPDecodeRGB(data, webp.size(), &w, &h);
    ASSERT_NE(rgb, nullptr);
    ASSERT_EQ(w * h, n);
    int64_t differ = 0;
    for (int i = 0; i < n; ++i)
      for (int c = 0; c < 3; ++c) {
        const uint8_t want = image == 0 ? m.base_color_rgba()[4 * i + c]
                                        : m.metallic_roughness_rgb()[3 * i + c];
        differ += rgb[3 * i + c] != want;
      }
    WebPFree(rgb);
    EXPECT_EQ(differ, 0) << "image " << image;
  }
  // The lossy default does not keep them all (so the test above can fail).
  const std::string lossy = glb_image(m.glb_bytes(sparse3d::TextureFormat::WebP), 1);
  int w = 0, h = 0;
  const auto* bytes = reinterpret_cast<const uint8_t*>(lossy.data());
  uint8_t* rgb = WebPDecodeRGB(bytes, lossy.size(), &w, &h);
  ASSERT_NE(rgb, nullptr);
  int64_t differ = 0;
  for (int i = 0; i < 3 * n; ++i) differ += rgb[i] != m.metallic_roughness_rgb()[i];
  WebPFree(rgb);
  EXPECT_GT(differ, 0);
}

TEST(MeshExport, RefusesBadInputNamingIt) {
  const sparse3d::GlbAsset& a = asset();
  auto refuses = [](sparse3d::GlbInput in, sparse3d::GlbOptions o, const char* needle) {
    try {
      sparse3d::to_glb(in, o);
      ADD_FAILURE() << "accepted; expected an error with '" << needle << "'";
    } catch (const sparse3d::Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  sparse3d::GlbOptions o;
  o.decimation_target = 500;
  o.texture_size = 32;
  sparse3d::GlbInput in = a.view();
  in.num_faces = 0;
  refuses(in, o, "no faces");
  std::vector<float> v = a.vertices;
  v[4] = std::nanf("");
  in = a.view();
  in.vertices = v.data();
  refuses(in, o, "non-finite");
  std::vector<int32_t> f = a.faces;
  f[7] = static_cast<int32_t>(a.vertices.size() / 3);
  in = a.view();
  in.faces = f.data();
  refuses(in, o, "outside");
  std::vector<int32_t> c = a.coords;
  c[3] = 48;
  in = a.view();
  in.coords = c.data();
  refuses(in, o, "voxel");
  c = a.coords;
  c[3] = c[0], c[4] = c[1], c[5] = c[2];
  in.coords = c.data();
  refuses(in, o, "voxel");
  in = a.view();
  in.layout.alpha = 6;
  refuses(in, o, "alpha");
  in = a.view();
  sparse3d::GlbOptions bad = o;
  bad.texture_size = 0;
  refuses(in, bad, "texture_size");
  bad = o;
  bad.texture_size = 16385;
  refuses(in, bad, "texture_size");
  bad = o;
  bad.decimation_target = 0;
  refuses(in, bad, "decimation_target");
}

TEST(MeshExport, InputFileRoundTripsAndRefusesAWrongFormat) {
  const fs::path dir = fs::temp_directory_path() / ("s3d_input_" + std::to_string(getpid()));
  fs::create_directories(dir);
  const std::string path = (dir / "new" / "folders" / "case.safetensors").string();
  sparse3d::save_glb_input(asset(), path);  // makes the missing folders
  const sparse3d::GlbAsset b = sparse3d::load_glb_input(path);
  EXPECT_EQ(b.vertices, asset().vertices);
  EXPECT_EQ(b.faces, asset().faces);
  EXPECT_EQ(b.coords, asset().coords);
  EXPECT_EQ(b.attrs, asset().attrs);
  EXPECT_EQ(b.grid_size, asset().grid_size);
  EXPECT_EQ(b.source, "test sphere");
  // Not a GLB input: a truncated copy.
  {
    std::ifstream in(path, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), {});
    std::ofstream out(dir / "cut.safetensors", std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size() / 2));
  }
  EXPECT_THROW(sparse3d::load_glb_input((dir / "cut.safetensors").string()), sparse3d::Error);
  fs::remove_all(dir);
}

}  // namespace
