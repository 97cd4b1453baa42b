// io::AtomicFile and the checks around it: the mode a written file gets (the umask's, not
// 0600), no temporary file left by a signal, names too long for the file system, and the
// up-front checks of an output path.
#include "io/atomic_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <string>
#include <vector>

#include "io_test_util.h"

namespace s3d::io {
namespace {

namespace fs = std::filesystem;
using test::TempDir;

std::vector<std::string> entries_of(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) out.push_back(e.path().string());
  return out;
}

mode_t mode_of(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
  return st.st_mode & 07777;
}

// Sets the umask for one scope.
struct Umask {
  explicit Umask(mode_t m) : old(::umask(m)) {}
  ~Umask() { ::umask(old); }
  mode_t old;
};

// A written file has the mode open(O_CREAT, 0666) would give it: readable by others under
// the usual umask 022, private under 077 (mkstemp made every file 0600).
TEST(AtomicFile, AWrittenFileFollowsTheUmask) {
  TempDir dir;
  {
    Umask u(022);
    write_file_atomic(dir.file("shared.txt"), "x");
    EXPECT_EQ(mode_of(dir.file("shared.txt")), 0644u);
    NewFolders folders;
    folders.make(dir.file("made/deeper"), "test");
    folders.keep();
    EXPECT_EQ(mode_of(dir.file("made/deeper")), 0755u);
  }
  {
    Umask u(077);
    write_file_atomic(dir.file("private.txt"), "x");
    EXPECT_EQ(mode_of(dir.file("private.txt")), 0600u);
  }
}

// A process killed by SIGTERM or SIGINT in the middle of a write, with the handlers of
// remove_on_fatal_signals(), leaves no temporary file and dies by the same signal; so does
// a folder it made (empty) and a finished file it registered.
TEST(AtomicFile, AFatalSignalRemovesTheTemporaryFile) {
  for (int sig : {SIGTERM, SIGINT, SIGHUP}) {
    TempDir dir;
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      for (int s : {SIGTERM, SIGINT, SIGHUP}) std::signal(s, SIG_DFL);  // whatever ctest left
      remove_on_fatal_signals();
      NewFolders folders;
      folders.make(dir.file("new/sub"), "child");
      write_file_atomic(dir.file("new/sub/done.txt"), "finished");
      RemoveOnSignal done(dir.file("new/sub/done.txt"), RemoveOnSignal::Kind::File);
      AtomicFile f(dir.file("new/sub/big.bin"));
      const std::string chunk(1 << 16, 'x');
      f.write(chunk.data(), chunk.size());
      ::raise(sig);
      ::_exit(0);  // not reached
    }
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(status)) << "signal " << sig << ": status " << status;
    EXPECT_EQ(WTERMSIG(status), sig);
    EXPECT_TRUE(entries_of(dir.dir()).empty())
        << "signal " << sig << " left " << entries_of(dir.dir()).front();
  }
}

// Without the handlers installed nothing changes (a library user's process keeps its own
// signal handling); and a path that is released is not removed.
TEST(AtomicFile, AReleasedPathStays) {
  TempDir dir;
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    remove_on_fatal_signals();
    write_file_atomic(dir.file("kept.txt"), "kept");
    RemoveOnSignal kept(dir.file("kept.txt"), RemoveOnSignal::Kind::File);
    kept.release();
    ::raise(SIGTERM);
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) << status;
  EXPECT_TRUE(fs::exists(dir.file("kept.txt")));
}

// A file name the file system cannot hold is refused by length before anything is created;
// one that fits, but not with the temporary name's 8 extra bytes, is still written.
TEST(AtomicFile, NamesNearTheFileSystemsLimit) {
  TempDir dir;
  EXPECT_ERROR(write_file_atomic(dir.file(std::string(256, 'n')), "x"),
               "the file name is 256 bytes, longer than the 255 the file system allows");
  write_file_atomic(dir.file(std::string(250, 'n')), "x");
  EXPECT_EQ(test::read_bytes(dir.file(std::string(250, 'n'))), "x");
  EXPECT_EQ(entries_of(dir.dir()).size(), 1u);
}

// The up-front checks: each refusal one s3d::Error naming the path and why.
TEST(AtomicFile, OutputPathChecks) {
  TempDir dir;
  test::write_bytes(dir.file("a_file"), "x");
  fs::create_directories(dir.file("a_folder"));
  EXPECT_ERROR(check_output_file("", "--out"), "--out: the path is empty");
  EXPECT_ERROR(check_output_file(dir.file("a_folder") + "/", "--out"), "names a folder");
  EXPECT_ERROR(check_output_file(dir.file("a_folder"), "--out"), "is a folder");
  EXPECT_ERROR(check_output_file(dir.file("a_file/x.json"), "--out"), "a_file is not a folder");
  EXPECT_ERROR(check_output_file(dir.file("a_file/deeper/x.json"), "--out"),
               "a_file is not a folder");
  EXPECT_ERROR(check_output_file(dir.file(std::string(251, 'n') + ".json"), "--out"),
               "is 256 bytes, longer than the 255");
  EXPECT_ERROR(check_output_file(dir.file(std::string(256, 'd') + "/x.json"), "--out"),
               "the folder name", "is 256 bytes");
  EXPECT_ERROR(check_output_folder(dir.file("a_file"), "--out"), "a_file is not a folder");
  EXPECT_ERROR(check_output_folder(dir.file("a_file/sub"), "--out"), "a_file is not a folder");
  check_output_file(dir.file("new/deeper/x.json"), "--out");  // missing folders are fine
  check_output_folder(dir.file("new/deeper"), "--out");
  EXPECT_FALSE(fs::exists(dir.file("new")));  // and are not made by a check
  NewFolders folders;
  EXPECT_ERROR(folders.make(dir.file("a_file/sub"), "--out"), "a_file is not a folder");
  // A folder without write permission (a read-only mount fails the same way, with EROFS;
  // root writes anywhere, so this part needs another user).
  if (::geteuid() != 0) {
    fs::create_directories(dir.file("locked"));
    fs::permissions(dir.file("locked"), fs::perms::owner_read | fs::perms::owner_exec);
    EXPECT_ERROR(check_output_file(dir.file("locked/x.json"), "--out"), "cannot write in",
                 "Permission denied");
    EXPECT_ERROR(check_output_folder(dir.file("locked/sub"), "--out"), "cannot write in");
    fs::permissions(dir.file("locked"), fs::perms::owner_all);
  }
}

// Folders made by a failed step go again (each only if empty); kept ones stay.
TEST(AtomicFile, NewFoldersAreRemovedUnlessKept) {
  TempDir dir;
  {
    NewFolders folders;
    folders.make(dir.file("a/b/c"), "test");
    EXPECT_EQ(folders.made().size(), 3u);
    EXPECT_TRUE(fs::is_directory(dir.file("a/b/c")));
  }
  EXPECT_FALSE(fs::exists(dir.file("a")));
  {
    NewFolders folders;
    folders.make(dir.file("a/b"), "test");
    test::write_bytes(dir.file("a/b/result"), "x");  // not empty: it stays
  }
  EXPECT_TRUE(fs::exists(dir.file("a/b/result")));
}

}  // namespace
}  // namespace s3d::io
