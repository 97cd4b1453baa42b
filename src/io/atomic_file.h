// Writing a file so that a failure leaves nothing behind: the bytes go to a temporary file
// in the same folder, which is flushed, checked, fsynced and then renamed over the target.
// A reader sees the old file or the new one, never a partial one.
//
// Fault injection (docs/RELIABILITY.md): with SPARSE3D_FAULT_WRITE=N in the environment, the
// N-th file-write step of the process (each write() and each commit() counts one) fails as a
// full disk would, so that tests can check every writer's failure path.
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

// File-write steps taken so far in this process (the fault-injection counter).
uint64_t file_write_steps();

}  // namespace s3d::io
