// mesh/glb_writer: the bytes are parsed back here, independently of the writer (header,
// chunks, alignment, every JSON field the file must carry), the attributes, indices and
// images read back bit-exact, for PNG and WebP; bad meshes are one error naming the problem;
// and no failure leaves a file or a folder behind.
#include "mesh/glb_writer.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/fault.h"
#include "cpu/io_test_util.h"
#include "mesh/glb_test_util.h"

namespace s3d::mesh {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;
using test::TempDir;
using glb_test::Glb;
using glb_test::parse_glb;
using glb_test::u32_at;
using glb_test::view_bytes;

// 7 vertices, 5 faces (one vertex unused, one face degenerate), random values with mixed
// signs, and two images of odd sizes encoded with `codec`.
GlbMesh make_mesh(ImageCodec codec) {
  std::mt19937 rng(42);
  std::uniform_real_distribution<float> u(-3.f, 3.f);
  GlbMesh m;
  const int V = 7;
  for (int i = 0; i < 3 * V; ++i) m.positions.push_back(u(rng));
  for (int v = 0; v < V; ++v) {
    float n[3] = {u(rng), u(rng), u(rng)};
    const float len = std::sqrt(n[0] * n[0] + n[1] * n[1] + n[2] * n[2]);
    for (float x : n) m.normals.push_back(x / len);
  }
  for (int i = 0; i < 2 * V; ++i) m.uvs.push_back(0.5f + u(rng) / 6);
  m.indices = {0, 1, 2, 2, 1, 3, 3, 4, 5, 5, 4, 0, 6, 6, 1};
  EncodeOptions o;
  o.codec = codec;
  std::vector<uint8_t> base(37 * 19 * 4), mr(23 * 11 * 3);
  for (auto& b : base) b = static_cast<uint8_t>(rng());
  for (auto& b : mr) b = static_cast<uint8_t>(rng());
  m.base_color_image = encode_image(base.data(), 37, 19, 4, o);
  m.metallic_roughness_image = encode_image(mr.data(), 23, 11, 3, o);
  m.codec = codec;
  return m;
}

// Accessor `a`'s data, copied into a NaN/0xAB-poisoned vector of the expected size.
template <class T>
std::vector<T> accessor_data(const Glb& g, int a, int component_type, const char* type,
                             size_t count, size_t width) {
  const Json& acc = g.json.at("accessors").at(a);
  EXPECT_EQ(acc.at("componentType"), component_type) << "accessor " << a;
  EXPECT_EQ(acc.at("type"), type) << "accessor " << a;
  EXPECT_EQ(acc.at("count"), count) << "accessor " << a;
  EXPECT_EQ(acc.value("byteOffset", 0), 0);
  std::vector<T> out(count * width);
  std::memset(out.data(), 0xAB, out.size() * sizeof(T));
  const std::string bytes = view_bytes(g, acc.at("bufferView"));
  EXPECT_EQ(bytes.size(), out.size() * sizeof(T)) << "accessor " << a << "'s view length";
  std::memcpy(out.data(), bytes.data(), std::min(bytes.size(), out.size() * sizeof(T)));
  return out;
}

template <class T>
bool bit_equal(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

void check_glb(const std::string& bytes, const GlbMesh& m) {
  const Glb g = parse_glb(bytes);
  const Json& j = g.json;
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j.at("asset").at("version"), "2.0");
  EXPECT_EQ(j.at("asset").at("generator"), "sparse3d");
  EXPECT_EQ(j.at("scene"), 0);
  EXPECT_EQ(j.at("scenes"), Json::parse(R"([{"nodes":[0]}])"));
  EXPECT_EQ(j.at("nodes"), Json::parse(R"([{"mesh":0}])"));
  ASSERT_EQ(j.at("meshes").size(), 1u);
  ASSERT_EQ(j.at("meshes")[0].at("primitives").size(), 1u);
  const Json& prim = j.at("meshes")[0].at("primitives")[0];
  EXPECT_EQ(prim.at("mode"), 4);
  EXPECT_EQ(prim.at("material"), 0);
  const size_t V = m.positions.size() / 3;
  const Json& attr = prim.at("attributes");
  ASSERT_EQ(attr.size(), 3u);

  // Attributes and indices, bit-exact, with each view's target.
  const int pos = attr.at("POSITION"), nrm = attr.at("NORMAL"), uv = attr.at("TEXCOORD_0");
  const int idx = prim.at("indices");
  EXPECT_TRUE(bit_equal(accessor_data<float>(g, pos, 5126, "VEC3", V, 3), m.positions));
  EXPECT_TRUE(bit_equal(accessor_data<float>(g, nrm, 5126, "VEC3", V, 3), m.normals));
  EXPECT_TRUE(bit_equal(accessor_data<float>(g, uv, 5126, "VEC2", V, 2), m.uvs));
  EXPECT_TRUE(
      bit_equal(accessor_data<uint32_t>(g, idx, 5125, "SCALAR", m.indices.size(), 1), m.indices));
  const Json& acc = j.at("accessors");
  for (int a : {pos, nrm, uv})
    EXPECT_EQ(j.at("bufferViews").at(acc.at(a).at("bufferView").get<int>()).at("target"), 34962);
  EXPECT_EQ(j.at("bufferViews").at(acc.at(idx).at("bufferView").get<int>()).at("target"), 34963);

  // POSITION's bounds, exactly the floats computed here.
  for (int k = 0; k < 3; ++k) {
    float lo = std::numeric_limits<float>::infinity(), hi = -lo;
    for (size_t v = 0; v < V; ++v) {
      lo = std::min(lo, m.positions[3 * v + k]);
      hi = std::max(hi, m.positions[3 * v + k]);
    }
    EXPECT_EQ(acc.at(pos).at("min").at(k).get<float>(), lo) << "axis " << k;
    EXPECT_EQ(acc.at(pos).at("max").at(k).get<float>(), hi) << "axis " << k;
  }

  // Material, sampler, textures and the images' bytes.
  const Json& mat = j.at("materials").at(0);
  EXPECT_EQ(mat.at("alphaMode"), m.alpha_mode);
  EXPECT_EQ(mat.at("doubleSided"), m.double_sided);
  const Json& pbr = mat.at("pbrMetallicRoughness");
  EXPECT_EQ(pbr.at("baseColorTexture").at("index"), 0);
  EXPECT_EQ(pbr.at("metallicRoughnessTexture").at("index"), 1);
  EXPECT_EQ(pbr.at("baseColorFactor"), Json::parse("[1,1,1,1]"));
  EXPECT_EQ(pbr.at("metallicFactor"), 1.0);
  EXPECT_EQ(pbr.at("roughnessFactor"), 1.0);
  EXPECT_EQ(j.at("samplers"),
            Json::parse(R"([{"magFilter":9729,"minFilter":9987,"wrapS":10497,"wrapT":10497}])"));
  const bool webp = m.codec == ImageCodec::webp;
  const std::string* want[2] = {&m.base_color_image, &m.metallic_roughness_image};
  ASSERT_EQ(j.at("textures").size(), 2u);
  ASSERT_EQ(j.at("images").size(), 2u);
  for (int t = 0; t < 2; ++t) {
    const Json& tex = j.at("textures")[t];
    EXPECT_EQ(tex.at("sampler"), 0);
    EXPECT_EQ(tex.contains("source"), !webp) << "texture " << t;
    const int image = webp ? tex.at("extensions").at("EXT_texture_webp").at("source").get<int>()
                           : tex.at("source").get<int>();
    EXPECT_EQ(image, t);
    const Json& img = j.at("images").at(image);
    EXPECT_EQ(img.at("mimeType"), webp ? "image/webp" : "image/png");
    EXPECT_FALSE(j.at("bufferViews").at(img.at("bufferView").get<int>()).contains("target"));
    EXPECT_TRUE(view_bytes(g, img.at("bufferView")) == *want[t]) << "image " << t;
  }
  if (webp) {
    EXPECT_EQ(j.at("extensionsUsed"), Json::parse(R"(["EXT_texture_webp"])"));
    EXPECT_EQ(j.at("extensionsRequired"), Json::parse(R"(["EXT_texture_webp"])"));
  } else {
    EXPECT_FALSE(j.contains("extensionsUsed"));
    EXPECT_FALSE(j.contains("extensionsRequired"));
  }
  ASSERT_EQ(j.at("buffers").size(), 1u);
  EXPECT_FALSE(j.at("buffers")[0].contains("uri"));
  // The buffer is the BIN chunk, less at most 3 bytes of padding, which are zeros.
  const size_t buffer_len = j.at("buffers")[0].at("byteLength");
  EXPECT_LE(g.bin.size() - buffer_len, 3u);
  for (size_t i = buffer_len; i < g.bin.size(); ++i) EXPECT_EQ(g.bin[i], '\0');
}

TEST(GlbWriter, PngGlbParsesBackExactly) {
  const GlbMesh m = make_mesh(ImageCodec::png);
  check_glb(glb_bytes(m), m);
}

TEST(GlbWriter, WebpGlbParsesBackExactly) {
  GlbMesh m = make_mesh(ImageCodec::webp);
  m.double_sided = true;
  m.alpha_mode = "BLEND";
  check_glb(glb_bytes(m), m);
}

// Image lengths of every residue mod 4, so that padding between and after views is walked.
TEST(GlbWriter, EveryImageLengthPadsCorrectly) {
  GlbMesh m = make_mesh(ImageCodec::png);
  const std::string base = m.base_color_image, mr = m.metallic_roughness_image;
  for (int a = 0; a < 4; ++a)
    for (int b = 0; b < 4; ++b) {
      SCOPED_TRACE(testing::Message() << "extra bytes " << a << ", " << b);
      // Trailing bytes after IEND are ignored by readers; here they only change the lengths.
      m.base_color_image = base + std::string(a, 'x');
      m.metallic_roughness_image = mr + std::string(b, 'y');
      check_glb(glb_bytes(m), m);
    }
}

TEST(GlbWriter, WriteGlbWritesTheSameBytesAndMakesFolders) {
  TempDir dir;
  const GlbMesh m = make_mesh(ImageCodec::webp);
  const std::string path = dir.file("a/b/asset.glb");
  write_glb(m, path);
  EXPECT_TRUE(test::read_bytes(path) == glb_bytes(m));
  write_glb(m, path);  // replacing is fine
  EXPECT_TRUE(test::read_bytes(path) == glb_bytes(m));
}

TEST(GlbWriter, BadMeshIsOneErrorNamingIt) {
  const GlbMesh good = make_mesh(ImageCodec::png);
  GlbMesh m = good;
  m.positions.push_back(1);
  EXPECT_ERROR(glb_bytes(m), "positions", "triples", "22");
  m = good;
  m.positions.clear();
  EXPECT_ERROR(glb_bytes(m), "no vertices");
  m = good;
  m.normals.pop_back();
  EXPECT_ERROR(glb_bytes(m), "normals", "20", "21");
  m = good;
  m.uvs.push_back(0);
  EXPECT_ERROR(glb_bytes(m), "uvs", "15", "14");
  m = good;
  m.indices.push_back(0);
  EXPECT_ERROR(glb_bytes(m), "indices", "triangles", "16");
  m = good;
  m.indices.clear();
  EXPECT_ERROR(glb_bytes(m), "no faces");
  m = good;
  m.indices[10] = 7;
  EXPECT_ERROR(glb_bytes(m), "face 3", "vertex 7", "[0, 7)");
  m = good;
  m.positions[3 * 5 + 1] = std::nanf("");
  EXPECT_ERROR(glb_bytes(m), "position", "vertex 5", "not finite");
  m = good;
  m.normals[2] = std::numeric_limits<float>::infinity();
  EXPECT_ERROR(glb_bytes(m), "normal", "vertex 0", "not finite");
  m = good;
  m.uvs[13] = -std::numeric_limits<float>::infinity();
  EXPECT_ERROR(glb_bytes(m), "uv", "vertex 6", "not finite");
  m = good;
  m.alpha_mode = "opaque";
  EXPECT_ERROR(glb_bytes(m), "alpha_mode", "\"opaque\"");
  m = good;
  m.codec = ImageCodec::webp;  // PNG bytes labelled WebP
  EXPECT_ERROR(glb_bytes(m), "base colour image", "image/webp");
  m = good;
  m.metallic_roughness_image.clear();
  EXPECT_ERROR(glb_bytes(m), "metallic-roughness image", "0 bytes", "image/png");
}

std::vector<std::string> entries_of(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

TEST(GlbWriter, FailuresLeaveNoFile) {
  TempDir dir;
  const GlbMesh good = make_mesh(ImageCodec::webp);
  // A bad mesh: nothing is written, no folder made.
  GlbMesh bad = good;
  bad.indices[0] = 100;
  EXPECT_ERROR(write_glb(bad, dir.file("new/asset.glb")), "vertex 100");
  EXPECT_TRUE(entries_of(dir.dir()).empty());
  // The path is a folder; a file sits where a folder must go.
  fs::create_directories(dir.file("folder"));
  EXPECT_ERROR(write_glb(good, dir.file("folder")), "write_glb", "folder");
  test::write_bytes(dir.file("blocker"), "old");
  EXPECT_ERROR(write_glb(good, dir.file("blocker/asset.glb")), "write_glb", "blocker");
  const std::vector<std::string> before = entries_of(dir.dir());
  EXPECT_EQ(before.size(), 2u);
  EXPECT_TRUE(fs::is_empty(dir.file("folder")));
  EXPECT_EQ(test::read_bytes(dir.file("blocker")), "old");
}

// A disk that fills at each write step in turn (n = 1, 2, ... until the write passes): every
// failure is one error naming the file and leaves the folder as it was (the old file intact,
// no temporary file, no new folder).
void fail_each_step(const GlbMesh& m, const std::string& path, const TempDir& dir) {
  const std::vector<std::string> before = entries_of(dir.dir());
  const std::string old_bytes = test::read_bytes(dir.file("asset.glb"));
  uint64_t failures = 0;
  for (uint64_t n = 1; n <= 16; ++n) {
    SCOPED_TRACE(testing::Message() << path << ", failing write step " << n);
    fault::arm(fault::Point::FileWrite, n);
    bool written = false;
    try {
      write_glb(m, path);
      written = true;
    } catch (const Error& e) {
      ++failures;
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
      EXPECT_EQ(entries_of(dir.dir()), before);
      EXPECT_EQ(test::read_bytes(dir.file("asset.glb")), old_bytes);
    }
    fault::arm(fault::Point::FileWrite, 0);
    if (written) break;
  }
  EXPECT_GE(failures, 2u) << "a write and a commit step at least";
  EXPECT_TRUE(test::read_bytes(path) == glb_bytes(m));
}

TEST(GlbWriter, AFullDiskAtAnyStepLeavesTheOldFile) {
  TempDir dir;
  const GlbMesh m = make_mesh(ImageCodec::png);
  test::write_bytes(dir.file("asset.glb"), "old bytes");
  fail_each_step(m, dir.file("new/deeper/other.glb"), dir);
  fs::remove_all(dir.file("new"));
  fail_each_step(m, dir.file("asset.glb"), dir);
}

// Permissions do not bind root (this machine's test user); elsewhere, an unwritable folder is
// refused before any work.
TEST(GlbWriter, UnwritableFolderIsRefused) {
  if (::geteuid() == 0) GTEST_SKIP() << "root writes in a 0555 folder";
  TempDir dir;
  fs::create_directories(dir.file("ro"));
  ::chmod(dir.file("ro").c_str(), 0555);
  EXPECT_ERROR(write_glb(make_mesh(ImageCodec::png), dir.file("ro/asset.glb")), "write_glb");
  ::chmod(dir.file("ro").c_str(), 0755);
  EXPECT_TRUE(fs::is_empty(dir.file("ro")));
}

}  // namespace
}  // namespace s3d::mesh
