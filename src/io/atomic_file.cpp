#include "io/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "core/fault.h"

namespace s3d::io {
namespace {

// One step of a write: counted, and failed with ENOSPC when fault injection picks it.
bool injected_fault() {
  if (!fault::hit(fault::Point::FileWrite)) return false;
  errno = ENOSPC;
  return true;
}

}  // namespace

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
  const std::filesystem::path target(path_);
  const std::filesystem::path dir =
      target.has_parent_path() ? target.parent_path() : std::filesystem::path(".");
  std::string pattern = (dir / ("." + target.filename().string() + ".XXXXXX")).string();
  fd_ = ::mkstemp(pattern.data());
  S3D_CHECK(fd_ >= 0, "cannot write ", path_, ": creating a temporary file in ", dir.string(),
            " failed (", std::strerror(errno), ")");
  tmp_ = pattern;
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) std::remove(tmp_.c_str());
}

void AtomicFile::write(const void* data, size_t bytes) {
  S3D_CHECK(!injected_fault(), "cannot write ", path_, ": writing ", bytes, " bytes failed (",
            std::strerror(errno), ")");
  const auto* p = static_cast<const char*>(data);
  size_t done = 0;
  while (done < bytes) {
    const ssize_t n = ::write(fd_, p + done, bytes - done);
    if (n < 0 && errno == EINTR) continue;
    S3D_CHECK(n > 0, "cannot write ", path_, ": writing ", bytes, " bytes failed after ", done,
              " (", std::strerror(errno), ")");
    done += static_cast<size_t>(n);
  }
}

void AtomicFile::commit() {
  S3D_CHECK(!injected_fault() && ::fsync(fd_) == 0, "cannot write ", path_, ": fsync failed (",
            std::strerror(errno), ")");
  const int fd = fd_;
  fd_ = -1;
  S3D_CHECK(::close(fd) == 0, "cannot write ", path_, ": close failed (", std::strerror(errno),
            ")");
  S3D_CHECK(std::rename(tmp_.c_str(), path_.c_str()) == 0, "cannot write ", path_,
            ": renaming the temporary file failed (", std::strerror(errno), ")");
  committed_ = true;
}

void write_file_atomic(const std::string& path, const std::string& bytes) {
  AtomicFile f(path);
  f.write(bytes.data(), bytes.size());
  f.commit();
}

}  // namespace s3d::io
