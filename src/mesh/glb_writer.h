// Writing a textured mesh as a binary glTF 2.0 file (.glb): one mesh, one primitive with
// POSITION, NORMAL, TEXCOORD_0 and indices, one metallic-roughness material with a base
// colour texture and a metallic-roughness texture, the images embedded as PNG or WebP (then
// EXT_texture_webp is declared used and required). The file is written atomically
// (io/atomic_file.h): a failure leaves no partial file.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mesh/image_codec.h"

namespace s3d::mesh {

struct GlbMesh {
  std::vector<float> positions;  // 3 per vertex, already in glTF axes (+Y up)
  std::vector<float> normals;    // 3 per vertex, unit
  std::vector<float> uvs;        // 2 per vertex, glTF convention (v = 0 at the image's top row)
  std::vector<uint32_t> indices; // 3 per face
  std::string base_color_image;  // encoded bytes
  std::string metallic_roughness_image;
  ImageCodec codec = ImageCodec::webp;
  bool double_sided = false;
  std::string alpha_mode = "OPAQUE";
};

// The whole .glb as bytes (for tests and Python), and the atomic write of it.
std::string glb_bytes(const GlbMesh& mesh);
void write_glb(const GlbMesh& mesh, const std::string& path);

}  // namespace s3d::mesh
