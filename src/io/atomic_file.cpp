#include "io/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>

#include "core/error.h"
#include "core/fault.h"
#include "core/rng.h"

namespace s3d::io {
namespace {

// One step of a write: counted, and failed with ENOSPC when fault injection picks it.
bool injected_fault() {
  if (!fault::hit(fault::Point::FileWrite)) return false;
  errno = ENOSPC;
  return true;
}

// ---- The signal-removal registry ------------------------------------------------------------
// A fixed table, so that the signal handler touches no allocator and no lock: a slot is
// claimed by a compare-and-swap on its state, its path copied in, and only then marked
// live; the handler reads live slots only. Lock-free atomics are async-signal-safe.
constexpr int kSlots = 2048;
enum SlotState : int { kFree = 0, kBusy = 1, kFile = 2, kFolder = 3 };
static_assert(std::atomic<int>::is_always_lock_free);
std::atomic<int> g_state[kSlots];
char g_path[kSlots][PATH_MAX];

int claim_slot(const std::string& path, RemoveOnSignal::Kind kind) {
  if (path.empty() || path.size() >= PATH_MAX) return -1;
  for (int i = 0; i < kSlots; ++i) {
    int expected = kFree;
    if (!g_state[i].compare_exchange_strong(expected, kBusy, std::memory_order_acquire))
      continue;
    std::memcpy(g_path[i], path.c_str(), path.size() + 1);
    g_state[i].store(kind == RemoveOnSignal::Kind::File ? kFile : kFolder,
                     std::memory_order_release);
    return i;
  }
  return -1;
}

void free_slot(int slot) {
  if (slot >= 0) g_state[slot].store(kFree, std::memory_order_release);
}

// Async-signal-safe: unlink() and rmdir() only. Files first, then folders, in passes until
// none more goes (a folder goes once what was in it has; only empty ones ever do).
void remove_registered() {
  for (int i = 0; i < kSlots; ++i)
    if (g_state[i].load(std::memory_order_acquire) == kFile) ::unlink(g_path[i]);
  for (int pass = 0; pass < 64; ++pass) {
    bool removed = false;
    for (int i = 0; i < kSlots; ++i)
      if (g_state[i].load(std::memory_order_acquire) == kFolder && ::rmdir(g_path[i]) == 0) {
        g_state[i].store(kFree, std::memory_order_release);
        removed = true;
      }
    if (!removed) break;
  }
}

constexpr int kFatalSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE};

extern "C" void remove_and_reraise(int sig) {
  const int saved = errno;
  remove_registered();
  // SA_RESETHAND put back the default action on entry; the signal is blocked while the
  // handler runs, so this one is delivered on return and ends the process as the original
  // would have (a shell sees "killed by SIGINT", not an exit code).
  ::raise(sig);
  errno = saved;
}

// 6 characters of [A-Za-z0-9] for a temporary name, different per call and per process.
std::string random_suffix() {
  static std::atomic<uint64_t> counter{0};
  static const uint64_t seed = [] {
    std::random_device rd;
    return (uint64_t{rd()} << 32) ^ rd() ^ static_cast<uint64_t>(::getpid()) ^
           static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  }();
  static const char kChars[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  uint64_t x = splitmix64(seed + counter.fetch_add(1));
  std::string s(6, 'X');
  for (char& c : s) {
    c = kChars[x % 62];
    x /= 62;
  }
  return s;
}

// The longest file name the file system holding `folder` takes (255 where it cannot say).
size_t name_max(const std::string& folder) {
  const long n = ::pathconf(folder.empty() ? "." : folder.c_str(), _PC_NAME_MAX);
  return n > 0 ? static_cast<size_t>(n) : 255;
}

// The folder part of `path` ("." for a bare name).
std::filesystem::path folder_of(const std::filesystem::path& p) {
  return p.has_parent_path() ? p.parent_path() : std::filesystem::path(".");
}

// `path` without trailing separators ("out/" is the folder "out"; "/" stays).
std::filesystem::path without_trailing_slash(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path;
}

// Walks up from `folder` to the nearest folder that exists and returns it, having checked
// that it is a folder this process may write in and that every missing name below it fits
// the file system. A file where a folder should be is named as such.
std::filesystem::path check_creatable_folder(const std::string& folder, const std::string& what) {
  std::vector<std::string> missing;  // names to be made below the existing folder
  std::filesystem::path probe = without_trailing_slash(folder);
  for (;;) {
    struct stat st {};
    if (::stat(probe.c_str(), &st) == 0) {
      S3D_CHECK(S_ISDIR(st.st_mode), what, ": ", probe.string(), " is not a folder");
      break;
    }
    const int err = errno;
    // ENOTDIR: a file further up is in the way; walking on finds and names it.
    // ENAMETOOLONG: a name below is too long; it is named by length below.
    S3D_CHECK(err == ENOENT || err == ENOTDIR || err == ENAMETOOLONG, what, ": ",
              probe.string(), ": ", std::strerror(err));
    const std::filesystem::path up = folder_of(probe);
    missing.push_back(probe.filename().string());
    if (up == probe) break;
    probe = up;
  }
  const size_t limit = name_max(probe.string());
  for (const auto& name : missing)
    S3D_CHECK(name.size() <= limit, what, ": the folder name '", name.substr(0, 40), "...' is ",
              name.size(), " bytes, longer than the ", limit, " the file system allows");
  S3D_CHECK(::access(probe.c_str(), W_OK | X_OK) == 0, what, ": cannot write in ",
            probe.string(), " (", std::strerror(errno), ")");
  return probe;
}

}  // namespace

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
  const std::filesystem::path target(path_);
  const std::filesystem::path dir = folder_of(target);
  const std::string name = target.filename().string();
  S3D_CHECK(!name.empty() && name != "." && name != "..", "cannot write ", path_,
            ": the path names a folder, not a file");
  const size_t limit = name_max(dir.string());
  S3D_CHECK(name.size() <= limit, "cannot write ", path_, ": the file name is ", name.size(),
            " bytes, longer than the ", limit, " the file system allows");
  // ".NAME.XXXXXX", with NAME shortened where the whole would be too long for the folder.
  const std::string stem = name.substr(0, std::min(name.size(), limit > 9 ? limit - 8 : 1));
  for (int attempt = 0;; ++attempt) {
    tmp_ = (dir / ("." + stem + "." + random_suffix())).string();
    // Registered before it exists, so that no signal can fall between the file's creation
    // and its registration (removing a name that does not exist yet is harmless).
    slot_ = claim_slot(tmp_, RemoveOnSignal::Kind::File);
    // 0666: the umask (and a default ACL) then decide the mode, as for any created file.
    fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd_ >= 0) break;
    const int err = errno;
    free_slot(slot_);
    slot_ = -1;
    if (err == EEXIST && attempt < 100) continue;
    fail("cannot write ", path_, ": creating a temporary file in ", dir.string(), " failed (",
         std::strerror(err), ")");
  }
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(tmp_.c_str());
  free_slot(slot_);
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
  free_slot(slot_);
  slot_ = -1;
}

void write_file_atomic(const std::string& path, const std::string& bytes) {
  AtomicFile f(path);
  f.write(bytes.data(), bytes.size());
  f.commit();
}

void check_output_file(const std::string& path, const std::string& what) {
  S3D_CHECK(!path.empty(), what, ": the path is empty");
  const std::filesystem::path p(path);
  const std::string name = p.filename().string();
  S3D_CHECK(!name.empty() && name != "." && name != "..", what, ": ", path,
            " names a folder, not a file");
  const std::filesystem::path existing = check_creatable_folder(folder_of(p).string(), what);
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0)
    S3D_CHECK(!S_ISDIR(st.st_mode), what, ": ", path, " is a folder");
  const size_t limit = name_max(existing.string());
  S3D_CHECK(name.size() <= limit, what, ": the file name '", name.substr(0, 40), "...' is ",
            name.size(), " bytes, longer than the ", limit, " the file system allows");
}

void check_output_folder(const std::string& folder, const std::string& what) {
  S3D_CHECK(!folder.empty(), what, ": the path is empty");
  check_creatable_folder(folder, what);
}

RemoveOnSignal::RemoveOnSignal(const std::string& path, Kind kind)
    : slot_(claim_slot(path, kind)) {}

RemoveOnSignal& RemoveOnSignal::operator=(RemoveOnSignal&& other) noexcept {
  if (this != &other) {
    release();
    slot_ = other.slot_;
    other.slot_ = -1;
  }
  return *this;
}

void RemoveOnSignal::release() {
  free_slot(slot_);
  slot_ = -1;
}

NewFolders::~NewFolders() {
  if (keep_) return;
  for (auto it = made_.rbegin(); it != made_.rend(); ++it) ::rmdir(it->c_str());  // if empty
}

void NewFolders::make(const std::string& folder, const std::string& what) {
  S3D_CHECK(!folder.empty(), what, ": the folder path is empty");
  // The missing folders, outermost first.
  std::vector<std::filesystem::path> missing;
  for (std::filesystem::path p = without_trailing_slash(folder);;) {
    struct stat st {};
    if (::stat(p.c_str(), &st) == 0) {
      S3D_CHECK(S_ISDIR(st.st_mode), what, ": ", p.string(), " is not a folder");
      break;
    }
    const int err = errno;
    S3D_CHECK(err == ENOENT || err == ENOTDIR, what, ": ", p.string(), ": ", std::strerror(err));
    missing.insert(missing.begin(), p);
    const std::filesystem::path up = folder_of(p);
    if (up == p) break;
    p = up;
  }
  for (const auto& p : missing) {
    // Registered first, as temporary files are: an interruption removes it again (if empty).
    guards_.emplace_back(p.string(), RemoveOnSignal::Kind::Folder);
    if (::mkdir(p.c_str(), 0777) == 0) {
      made_.push_back(p.string());
      continue;
    }
    const int err = errno;
    guards_.pop_back();
    struct stat st {};
    if (err == EEXIST && ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) continue;  // a race
    fail(what, ": cannot make the folder ", p.string(), " (", std::strerror(err), ")");
  }
}

void NewFolders::keep() {
  keep_ = true;
  for (auto& g : guards_) g.release();
}

void remove_on_fatal_signals() {
  struct sigaction sa {};
  sa.sa_handler = remove_and_reraise;
  sa.sa_flags = SA_RESETHAND;
  sigemptyset(&sa.sa_mask);
  for (int sig : kFatalSignals) sigaddset(&sa.sa_mask, sig);  // one handler at a time
  for (int sig : kFatalSignals) {
    struct sigaction old {};
    if (::sigaction(sig, nullptr, &old) == 0 && old.sa_handler == SIG_IGN) continue;
    ::sigaction(sig, &sa, nullptr);
  }
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  ::sigaction(SIGXFSZ, &ignore, nullptr);
}

FatalSignalScope::FatalSignalScope() {
  struct sigaction none {};
  for (int sig : kFatalSignals) saved_.emplace_back(sig, none);
  saved_.emplace_back(SIGXFSZ, none);
  for (auto& [sig, old] : saved_) ::sigaction(sig, nullptr, &old);
  remove_on_fatal_signals();
}

FatalSignalScope::~FatalSignalScope() {
  for (const auto& [sig, old] : saved_) ::sigaction(sig, &old, nullptr);
}

}  // namespace s3d::io
