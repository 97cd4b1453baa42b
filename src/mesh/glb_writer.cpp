#include "mesh/glb_writer.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/atomic_file.h"

namespace s3d::mesh {
namespace {

using Json = nlohmann::ordered_json;  // keys in the order written: a readable JSON chunk

// glTF 2.0 constants (the spec's enums, which are OpenGL's).
constexpr int kFloat = 5126;
constexpr int kUnsignedInt = 5125;
constexpr int kArrayBuffer = 34962;
constexpr int kElementArrayBuffer = 34963;
constexpr int kTriangles = 4;
constexpr int kLinear = 9729;
constexpr int kLinearMipmapLinear = 9987;
constexpr int kRepeat = 10497;
constexpr uint32_t kGlbMagic = 0x46546C67;  // "glTF"
constexpr uint32_t kChunkJson = 0x4E4F534A;  // "JSON"
constexpr uint32_t kChunkBin = 0x004E4942;   // "BIN\0"
constexpr const char* kWebpExtension = "EXT_texture_webp";

// The binary chunk is little-endian; the arrays are copied into it as they lie in memory.
static_assert(std::endian::native == std::endian::little, "the GLB writer assumes little-endian");

size_t align4(size_t n) { return (n + 3) & ~static_cast<size_t>(3); }

// The first non-finite value of `values` (whose items have `width` components) is an error
// naming the attribute and the vertex.
void check_finite(const std::vector<float>& values, int width, const char* attribute) {
  for (size_t i = 0; i < values.size(); ++i)
    S3D_CHECK(std::isfinite(values[i]), "glb_bytes: ", attribute, " of vertex ", i / width,
              " is not finite (", values[i], ")");
}

// Does `bytes` start as a file of `codec` does? A mislabelled image would make a GLB that
// viewers reject, far from the cause.
bool has_signature(const std::string& bytes, ImageCodec codec) {
  if (codec == ImageCodec::png)
    return bytes.size() >= 8 && bytes.compare(0, 8, "\x89PNG\r\n\x1a\n") == 0;
  return bytes.size() >= 12 && bytes.compare(0, 4, "RIFF") == 0 &&
         bytes.compare(8, 4, "WEBP") == 0;
}

void check_glb_mesh(const GlbMesh& m) {
  S3D_CHECK(m.positions.size() % 3 == 0, "glb_bytes: positions must be whole xyz triples (",
            m.positions.size(), " values)");
  const size_t V = m.positions.size() / 3;
  S3D_CHECK(V > 0, "glb_bytes: the mesh has no vertices");
  // Indices are uint32: a vertex past that could not be named.
  S3D_CHECK(V <= std::numeric_limits<uint32_t>::max(), "glb_bytes: ", V,
            " vertices are more than 32-bit indices can name");
  S3D_CHECK(m.normals.size() == 3 * V, "glb_bytes: normals hold ", m.normals.size(),
            " values; ", V, " vertices need ", 3 * V);
  S3D_CHECK(m.uvs.size() == 2 * V, "glb_bytes: uvs hold ", m.uvs.size(), " values; ", V,
            " vertices need ", 2 * V);
  S3D_CHECK(m.indices.size() % 3 == 0, "glb_bytes: indices must be whole triangles (",
            m.indices.size(), " values)");
  S3D_CHECK(!m.indices.empty(), "glb_bytes: the mesh has no faces");
  check_finite(m.positions, 3, "the position");
  check_finite(m.normals, 3, "the normal");
  check_finite(m.uvs, 2, "the uv");
  for (size_t i = 0; i < m.indices.size(); ++i)
    S3D_CHECK(m.indices[i] < V, "glb_bytes: face ", i / 3, " names vertex ", m.indices[i],
              ", outside [0, ", V, ")");
  S3D_CHECK(m.alpha_mode == "OPAQUE" || m.alpha_mode == "MASK" || m.alpha_mode == "BLEND",
            "glb_bytes: alpha_mode must be OPAQUE, MASK or BLEND (got \"", m.alpha_mode, "\")");
  const char* codec = mime_type(m.codec);
  S3D_CHECK(has_signature(m.base_color_image, m.codec), "glb_bytes: the base colour image (",
            m.base_color_image.size(), " bytes) is not a ", codec, " file");
  S3D_CHECK(has_signature(m.metallic_roughness_image, m.codec),
            "glb_bytes: the metallic-roughness image (", m.metallic_roughness_image.size(),
            " bytes) is not a ", codec, " file");
}

// The binary chunk being built, and the bufferViews that describe it. Each view starts on a
// 4-byte boundary (the spec asks that of accessor data; images get it too for uniformity).
struct BinBuilder {
  std::string bin;
  Json views = Json::array();

  int add(const void* data, size_t bytes, int target) {
    bin.resize(align4(bin.size()), '\0');
    Json view = {{"buffer", 0}, {"byteOffset", bin.size()}, {"byteLength", bytes}};
    if (target != 0) view["target"] = target;
    bin.append(static_cast<const char*>(data), bytes);
    views.push_back(std::move(view));
    return static_cast<int>(views.size()) - 1;
  }
};

Json accessor(int view, size_t count, const char* type) {
  return {{"bufferView", view}, {"componentType", kFloat}, {"count", count}, {"type", type}};
}

// POSITION's min and max (required by the spec), per axis, as floats: JSON numbers written
// from them read back as the same floats.
std::array<Json, 2> position_bounds(const std::vector<float>& p) {
  std::array<float, 3> lo{p[0], p[1], p[2]}, hi = lo;
  for (size_t i = 0; i < p.size(); i += 3)
    for (int k = 0; k < 3; ++k) {
      lo[k] = std::min(lo[k], p[i + k]);
      hi[k] = std::max(hi[k], p[i + k]);
    }
  return {Json(std::vector<double>(lo.begin(), lo.end())),
          Json(std::vector<double>(hi.begin(), hi.end()))};
}

Json material_json(const GlbMesh& m) {
  Json pbr = {{"baseColorTexture", {{"index", 0}}},
              {"baseColorFactor", {1.0, 1.0, 1.0, 1.0}},
              {"metallicRoughnessTexture", {{"index", 1}}},
              {"metallicFactor", 1.0},
              {"roughnessFactor", 1.0}};
  return {{"pbrMetallicRoughness", std::move(pbr)},
          {"alphaMode", m.alpha_mode},
          {"doubleSided", m.double_sided}};
}

// A texture names its image in the core "source", or, for WebP, only in EXT_texture_webp
// (no PNG fallback: the extension is then required).
Json texture_json(int image, ImageCodec codec) {
  if (codec == ImageCodec::webp)
    return {{"sampler", 0}, {"extensions", {{kWebpExtension, {{"source", image}}}}}};
  return {{"sampler", 0}, {"source", image}};
}

Json gltf_json(const GlbMesh& m, BinBuilder& b) {
  const size_t V = m.positions.size() / 3;
  const int pos_view = b.add(m.positions.data(), m.positions.size() * sizeof(float), kArrayBuffer);
  const int nrm_view = b.add(m.normals.data(), m.normals.size() * sizeof(float), kArrayBuffer);
  const int uv_view = b.add(m.uvs.data(), m.uvs.size() * sizeof(float), kArrayBuffer);
  const int idx_view =
      b.add(m.indices.data(), m.indices.size() * sizeof(uint32_t), kElementArrayBuffer);
  const int base_view = b.add(m.base_color_image.data(), m.base_color_image.size(), 0);
  const int mr_view =
      b.add(m.metallic_roughness_image.data(), m.metallic_roughness_image.size(), 0);
  b.bin.resize(align4(b.bin.size()), '\0');  // the chunk's padding, counted in the buffer

  Json position = accessor(pos_view, V, "VEC3");
  auto [lo, hi] = position_bounds(m.positions);
  position["min"] = std::move(lo);
  position["max"] = std::move(hi);
  Json indices = {{"bufferView", idx_view}, {"componentType", kUnsignedInt},
                  {"count", m.indices.size()}, {"type", "SCALAR"}};
  Json primitive = {{"attributes", {{"POSITION", 0}, {"NORMAL", 1}, {"TEXCOORD_0", 2}}},
                    {"indices", 3}, {"material", 0}, {"mode", kTriangles}};
  const char* mime = mime_type(m.codec);

  Json j;
  j["asset"] = {{"version", "2.0"}, {"generator", "sparse3d"}};
  if (m.codec == ImageCodec::webp) {
    j["extensionsUsed"] = {kWebpExtension};
    j["extensionsRequired"] = {kWebpExtension};
  }
  j["scene"] = 0;
  j["scenes"] = {{{"nodes", {0}}}};
  j["nodes"] = {{{"mesh", 0}}};
  j["meshes"] = {{{"primitives", {std::move(primitive)}}}};
  j["materials"] = {material_json(m)};
  j["textures"] = {texture_json(0, m.codec), texture_json(1, m.codec)};
  j["samplers"] = {{{"magFilter", kLinear}, {"minFilter", kLinearMipmapLinear},
                    {"wrapS", kRepeat}, {"wrapT", kRepeat}}};
  j["images"] = {{{"bufferView", base_view}, {"mimeType", mime}},
                 {{"bufferView", mr_view}, {"mimeType", mime}}};
  j["accessors"] = {std::move(position), accessor(nrm_view, V, "VEC3"),
                    accessor(uv_view, V, "VEC2"), std::move(indices)};
  j["bufferViews"] = std::move(b.views);
  j["buffers"] = {{{"byteLength", b.bin.size()}}};
  return j;
}

void append_u32(std::string& out, uint32_t v) {
  const char bytes[4] = {static_cast<char>(v), static_cast<char>(v >> 8),
                         static_cast<char>(v >> 16), static_cast<char>(v >> 24)};
  out.append(bytes, 4);
}

}  // namespace

std::string glb_bytes(const GlbMesh& mesh) {
  check_glb_mesh(mesh);
  BinBuilder b;
  std::string json = gltf_json(mesh, b).dump();
  json.resize(align4(json.size()), ' ');  // the JSON chunk is padded with spaces
  const size_t total = 12 + 8 + json.size() + 8 + b.bin.size();
  S3D_CHECK(total <= std::numeric_limits<uint32_t>::max(), "glb_bytes: the file would be ",
            total, " bytes; a GLB holds at most 4 GiB");
  std::string out;
  out.reserve(total);
  append_u32(out, kGlbMagic);
  append_u32(out, 2);
  append_u32(out, static_cast<uint32_t>(total));
  append_u32(out, static_cast<uint32_t>(json.size()));
  append_u32(out, kChunkJson);
  out += json;
  append_u32(out, static_cast<uint32_t>(b.bin.size()));
  append_u32(out, kChunkBin);
  out += b.bin;
  return out;
}

void write_glb(const GlbMesh& mesh, const std::string& path) {
  const std::string what = "write_glb: " + path;
  io::check_output_file(path, what);
  const std::string bytes = glb_bytes(mesh);
  // Missing folders are made, and removed again if the write fails.
  io::NewFolders folders;
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) folders.make(parent.string(), what);
  io::write_file_atomic(path, bytes);
  folders.keep();
}

}  // namespace s3d::mesh
