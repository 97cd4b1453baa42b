#include "io/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "core/error.h"

namespace s3d::io {
namespace {

// Removes the temporary file unless the rename consumed it.
struct TempFile {
  std::string path;
  int fd = -1;
  bool keep = false;
  ~TempFile() {
    if (fd >= 0) ::close(fd);
    if (!keep) std::remove(path.c_str());
  }
};

}  // namespace

void write_file_atomic(const std::string& path, const std::string& bytes) {
  const std::filesystem::path target(path);
  const std::filesystem::path dir =
      target.has_parent_path() ? target.parent_path() : std::filesystem::path(".");
  std::string pattern = (dir / ("." + target.filename().string() + ".XXXXXX")).string();
  TempFile tmp;
  tmp.fd = ::mkstemp(pattern.data());
  S3D_CHECK(tmp.fd >= 0, "cannot write ", path, ": creating a temporary file in ", dir.string(),
            " failed (", std::strerror(errno), ")");
  tmp.path = pattern;
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(tmp.fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    S3D_CHECK(n > 0, "cannot write ", path, ": writing ", bytes.size(), " bytes failed after ",
              done, " (", std::strerror(errno), ")");
    done += static_cast<size_t>(n);
  }
  S3D_CHECK(::fsync(tmp.fd) == 0, "cannot write ", path, ": fsync failed (",
            std::strerror(errno), ")");
  const int fd = tmp.fd;
  tmp.fd = -1;
  S3D_CHECK(::close(fd) == 0, "cannot write ", path, ": close failed (", std::strerror(errno),
            ")");
  S3D_CHECK(std::rename(tmp.path.c_str(), path.c_str()) == 0, "cannot write ", path,
            ": renaming the temporary file failed (", std::strerror(errno), ")");
  tmp.keep = true;
}

}  // namespace s3d::io
