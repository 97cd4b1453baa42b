// safetensors reading and writing. The header is validated completely before any tensor
// memory is allocated (docs/RELIABILITY.md lists every check); an invalid file gives one
// s3d::Error that names the file and the problem.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace s3d::io {

struct TensorEntry {
  std::string name;
  std::string dtype;      // as in the header: "BF16", "F16", "F32", "I32", ...
  Shape shape;
  uint64_t begin = 0;     // byte offsets relative to the start of the data section
  uint64_t end = 0;
};

class SafetensorsFile {
 public:
  // Reads and validates the header; keeps the path for later reads. Throws s3d::Error.
  // Errors start with "safetensors file PATH"; the second form names the file as `what`
  // instead ("checkpoint foo.safetensors", "payload a03.safetensors").
  static SafetensorsFile open(const std::string& path);
  static SafetensorsFile open(const std::string& path, const std::string& what);
  // The same, refusing a header longer than `max_header_bytes` (what a reader that knows
  // which tensors to expect allows) before it is read; the message names `expected`, what
  // the limit follows from.
  static SafetensorsFile open(const std::string& path, const std::string& what,
                              uint64_t max_header_bytes, const std::string& expected);

  const std::string& path() const { return path_; }
  const std::vector<TensorEntry>& entries() const { return entries_; }  // in offset order
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // Refuses (one s3d::Error naming the tensor, its size and `expected`, what the limit
  // follows from) any tensor of more than `max_bytes`: what a reader that knows what to
  // expect calls before it loads anything. open() has checked the sizes against the file,
  // but a sparse file can be of any size at no cost to its maker.
  void check_tensor_bytes(uint64_t max_bytes, const std::string& expected) const;
  // nullptr when absent. By an index: a file may name up to millions of tensors, and a
  // loader looks each one up.
  const TensorEntry* find(const std::string& name) const;

  // Reads one tensor into host memory converted to `as`: BF16/F16/F32 files load as bf16 or
  // f32 (bf16 -> f32 exact, f32 -> bf16 rounds to nearest even); I32 loads only as i32.
  Tensor load(const std::string& name, DType as) const;
  // Copies `bytes` raw bytes of tensor `name`'s data, from byte `begin` of it, to dst
  // (a range of a large tensor, to validate it piece by piece before allocating it whole).
  void read_bytes(const std::string& name, uint64_t begin, uint64_t bytes, void* dst) const;

 private:
  std::string path_;
  std::string what_;  // how errors name the file
  uint64_t data_start_ = 0;
  std::vector<TensorEntry> entries_;
  std::unordered_map<std::string, size_t> index_;  // name -> position in entries_
  std::map<std::string, std::string> metadata_;
};

// A run-time dtype's name in safetensors headers ("BF16", "F32", "I32").
const char* file_dtype(DType d);

// Converts n elements stored as `from` ("BF16", "F16" or "F32", the file dtypes) at src to
// bf16 or f32 at dst (what SafetensorsFile::load does; also used for in-memory checkpoints).
void convert_floats(const void* src, const std::string& from, void* dst, DType to, size_t n);

// Writes tensors (any device; copied to the host) contiguously, with optional string
// metadata. The header is padded with spaces so the data section starts 8-byte aligned; the
// data keeps the given order except that 4-byte dtypes come before 2-byte ones, so every
// tensor is aligned to its dtype size (which the reader requires).
void write_safetensors(const std::string& path,
                       const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace s3d::io
