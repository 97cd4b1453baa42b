// Writing a file so that a failure leaves nothing behind: the bytes go to a temporary file
// in the same folder, which is flushed, checked, fsynced and then renamed over the target.
// A reader sees the old file or the new one, never a partial one.
//
// Fault injection (core/fault.h): each write() and each commit() is one FileWrite step
// (SPARSE3D_FAULT_WRITE=N fails the N-th as a full disk would, with ENOSPC).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace s3d::io {

class AtomicFile {
 public:
  // Creates the temporary file beside `path`. Errors name `path`.
  explicit AtomicFile(std::string path);
  // Removes the temporary file unless commit() renamed it.
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t bytes);
  // fsync, close, rename over the target. Throws on any failure (the target is unchanged).
  void commit();

 private:
  std::string path_, tmp_;
  int fd_ = -1;
  bool committed_ = false;
};

// Throws s3d::Error naming `path` and the failing step; on failure the target is unchanged
// and the temporary file is removed.
void write_file_atomic(const std::string& path, const std::string& bytes);

}  // namespace s3d::io
