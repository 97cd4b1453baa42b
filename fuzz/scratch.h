// The readers the fuzz targets feed take paths: each input goes to a file in a per-process
// scratch folder under $TMPDIR (fuzz.sh points it at tmpfs).
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

namespace s3d::fuzz {

inline const std::string& scratch_dir() {
  static const std::string dir = [] {
    auto p = std::filesystem::temp_directory_path() / ("s3d_fuzz_" + std::to_string(::getpid()));
    std::filesystem::create_directories(p);
    return p.string();
  }();
  return dir;
}

// Writes `size` bytes to `name` in the scratch folder; returns its path.
inline std::string write_input(const std::string& name, const uint8_t* data, size_t size) {
  const std::string path = scratch_dir() + "/" + name;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  return path;
}

}  // namespace s3d::fuzz
