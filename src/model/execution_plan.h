// Execution paths and optimization flags (DESIGN.md "Execution paths"). Every optimization
// is one named flag; a path is a named set of flags; `--enable/--disable NAME` edits it.
// Unknown names are errors. Paths whose optimizations are not built yet are listed, so a
// request for one says so instead of silently running something else.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace s3d::model {

struct FlagInfo {
  std::string name;
  std::string help;
  // Calls per denoise step the flag changes, for the leave-one-out table (0 = n/a).
  int calls_per_step = 0;
  // False until the flag's GPU tests have passed on a GPU (run and bench warn about it).
  bool gpu_validated = true;
};

struct PathInfo {
  std::string name;
  std::string help;
  std::vector<std::string> flags;  // flags on in this path
  bool available = true;
  std::string missing;             // why not available (the issue that builds it)
};

const std::vector<FlagInfo>& optimization_flags();
const std::vector<PathInfo>& execution_paths();

class ExecutionPlan {
 public:
  // A path name, optionally followed by "+flag" / "-flag" edits: "pure_eager+batched_cfg".
  static ExecutionPlan parse(const std::string& spec);
  static ExecutionPlan of_path(const std::string& path);

  void enable(const std::string& flag);
  void disable(const std::string& flag);
  bool on(const std::string& flag) const;
  std::vector<std::string> enabled() const;
  // Enabled flags whose GPU versions have not been validated on a GPU yet.
  std::vector<std::string> unvalidated() const;

  const std::string& path() const { return path_; }
  // Canonical spelling: the path, then "+flag" for flags the path lacks, "-flag" for flags
  // it has that are off.
  std::string label() const;

 private:
  std::string path_;
  std::map<std::string, bool> flags_;
};

}  // namespace s3d::model
