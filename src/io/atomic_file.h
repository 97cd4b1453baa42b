// Writing a file so that a failure leaves nothing behind: the bytes go to a temporary file
// in the same folder, which is flushed, checked, fsynced and then renamed over the target.
// A reader sees the old file or the new one, never a partial one.
#pragma once

#include <string>

namespace s3d::io {

// Throws s3d::Error naming `path` and the failing step; on failure the target is unchanged
// and the temporary file is removed.
void write_file_atomic(const std::string& path, const std::string& bytes);

}  // namespace s3d::io
