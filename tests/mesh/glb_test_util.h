// Reading a GLB back in tests, as a reader would, checking the container on the way (the
// writer's own tests and the export's).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace s3d::mesh::glb_test {

using Json = nlohmann::json;

inline uint32_t u32_at(const std::string& s, size_t at) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(s[at + i]);
  return v;
}

struct Glb {
  Json json;
  std::string bin;
};

// Parses a GLB as a reader would, checking the container on the way.
inline Glb parse_glb(const std::string& bytes) {
  Glb g;
  EXPECT_GE(bytes.size(), 28u);
  if (bytes.size() < 28) return g;
  EXPECT_EQ(bytes.compare(0, 4, "glTF"), 0);
  EXPECT_EQ(u32_at(bytes, 4), 2u);
  EXPECT_EQ(u32_at(bytes, 8), bytes.size());
  const uint32_t json_len = u32_at(bytes, 12);
  EXPECT_EQ(bytes.compare(16, 4, "JSON"), 0);
  EXPECT_EQ(json_len % 4, 0u);
  EXPECT_LE(20 + json_len + 8, bytes.size());
  const std::string json = bytes.substr(20, json_len);
  g.json = Json::parse(json);  // trailing padding must be whitespace to parse
  const size_t last = json.find_last_of('}');
  for (size_t i = last + 1; i < json.size(); ++i) EXPECT_EQ(json[i], ' ') << "JSON padding";
  const size_t bin_at = 20 + json_len;
  const uint32_t bin_len = u32_at(bytes, bin_at);
  EXPECT_EQ(bytes.compare(bin_at + 4, 4, std::string("BIN\0", 4)), 0);
  EXPECT_EQ(bin_len % 4, 0u);
  EXPECT_EQ(bin_at + 8 + bin_len, bytes.size()) << "the BIN chunk must end the file";
  g.bin = bytes.substr(bin_at + 8, bin_len);
  return g;
}

// The bytes of bufferView `v`, after checking that it lies inside the buffer, aligned.
inline std::string view_bytes(const Glb& g, int v) {
  const Json& view = g.json.at("bufferViews").at(v);
  const size_t off = view.value("byteOffset", 0), len = view.at("byteLength");
  const size_t buffer_len = g.json.at("buffers").at(0).at("byteLength");
  EXPECT_EQ(view.at("buffer"), 0);
  EXPECT_EQ(off % 4, 0u) << "bufferView " << v;
  EXPECT_LE(off + len, buffer_len) << "bufferView " << v;
  EXPECT_LE(buffer_len, g.bin.size());
  if (off + len > g.bin.size()) return {};
  return g.bin.substr(off, len);
}

}  // namespace s3d::mesh::glb_test
