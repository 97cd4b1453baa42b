// Writing a file so that a failure leaves nothing behind: the bytes go to a temporary file
// in the same folder, which is flushed, checked, fsynced and then renamed over the target.
// A reader sees the old file or the new one, never a partial one.
//
// The temporary file is created with mode 0666 less the umask, as open(O_CREAT) would create
// the target itself (not mkstemp's 0600: a checkpoint written for others must be readable by
// them), and its path is registered for removal on a fatal signal (RemoveOnSignal below), so
// that an interrupted command leaves no hidden .NAME.XXXXXX file.
//
// Fault injection (core/fault.h): each write() and each commit() is one FileWrite step
// (SPARSE3D_FAULT_WRITE=N fails the N-th as a full disk would, with ENOSPC).
#pragma once

#include <signal.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

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
  int slot_ = -1;  // the temporary file's entry in the signal-removal registry
  bool committed_ = false;
};

// Throws s3d::Error naming `path` and the failing step; on failure the target is unchanged
// and the temporary file is removed.
void write_file_atomic(const std::string& path, const std::string& bytes);

// Before any work: can `path` be created (or replaced) as a file? Refused, each with one
// s3d::Error starting with `what`: an empty path or one that names a folder ("", "dir/",
// "x/.."), a name longer than the file system allows (a file's or a missing folder's), a
// folder in the way where the file goes, a file in the way where a folder goes, and a
// nearest existing folder that this process may not write in (permissions, a read-only
// mount). Missing folders are fine (the caller makes them).
void check_output_file(const std::string& path, const std::string& what);
// The same for a folder that files will be written into: it exists as a writable folder,
// or it can be made.
void check_output_folder(const std::string& folder, const std::string& what);

// A path removed if the process is killed by one of the signals that
// remove_on_fatal_signals() handles; forgotten (not removed) when the object goes. A file is
// unlinked; a folder is removed only if it is empty (after the files). Registration never
// fails loudly: past the registry's 2,048 entries, or for a path of PATH_MAX bytes or more,
// the path is simply not removed on a signal.
class RemoveOnSignal {
 public:
  enum class Kind { File, Folder };
  RemoveOnSignal() = default;
  RemoveOnSignal(const std::string& path, Kind kind);
  ~RemoveOnSignal() { release(); }
  RemoveOnSignal(RemoveOnSignal&& other) noexcept : slot_(other.slot_) { other.slot_ = -1; }
  RemoveOnSignal& operator=(RemoveOnSignal&& other) noexcept;
  RemoveOnSignal(const RemoveOnSignal&) = delete;
  RemoveOnSignal& operator=(const RemoveOnSignal&) = delete;
  // Forgets the path now (it stays).
  void release();

 private:
  int slot_ = -1;
};

// Folders a command makes, removed again, deepest first and each only if empty, unless
// keep() is called: by the destructor (a failure) and by the signal handler (an
// interruption).
class NewFolders {
 public:
  NewFolders() = default;
  ~NewFolders();
  NewFolders(const NewFolders&) = delete;
  NewFolders& operator=(const NewFolders&) = delete;
  // Makes `folder` and every missing folder above it (mode 0777 less the umask). An existing
  // folder is fine; a file in the way or a failed mkdir is one s3d::Error starting with
  // `what`.
  void make(const std::string& folder, const std::string& what);
  // Success: the folders stay.
  void keep();
  const std::vector<std::string>& made() const { return made_; }

 private:
  std::vector<std::string> made_;
  std::vector<RemoveOnSignal> guards_;
  bool keep_ = false;
};

// For a command-line program, once at start: SIGINT, SIGTERM, SIGHUP, SIGQUIT and SIGPIPE
// get a handler that removes every registered path (AtomicFile's temporary files,
// RemoveOnSignal's paths) and then ends the process by the same signal with its default
// action (the exit status stays the signal's). A signal the process was started ignoring
// (nohup, a background job's SIGINT) stays ignored. SIGXFSZ is ignored, so that a write past
// `ulimit -f` fails with EFBIG and takes the ordinary failure path (one error, the temporary
// file removed) instead of killing the process mid-write.
void remove_on_fatal_signals();

// remove_on_fatal_signals() for a scope: the dispositions of those signals before it are put
// back when it ends (a command line run inside a host process, such as Python's, leaves the
// host's handlers as it found them).
class FatalSignalScope {
 public:
  FatalSignalScope();
  ~FatalSignalScope();
  FatalSignalScope(const FatalSignalScope&) = delete;
  FatalSignalScope& operator=(const FatalSignalScope&) = delete;

 private:
  std::vector<std::pair<int, struct sigaction>> saved_;  // each signal and its disposition
};

}  // namespace s3d::io
