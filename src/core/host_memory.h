// Host memory a request may still use: what the kernel says is available (MemAvailable), no
// more than the process's cgroup leaves it. The CPU backend's activations live in host memory,
// so its requests are sized against this before anything is allocated (the GPU backend asks
// the driver instead).
#pragma once

#include <cstddef>
#include <optional>
#include <string>

namespace s3d {

// Bytes of host memory available now; nullopt when the system does not say (not Linux, no
// /proc), in which case a caller has nothing to check against but its own caps.
std::optional<size_t> host_memory_available();

// The parsers behind it, for tests: the MemAvailable line of a /proc/meminfo text (in kB)
// as bytes, a cgroup memory limit file's content ("max" or a byte count) and one value of
// a cgroup memory.stat.
std::optional<size_t> parse_mem_available(const std::string& meminfo);
std::optional<size_t> parse_cgroup_limit(const std::string& text);
// The value of `key` in a cgroup memory.stat text ("file 123\n..."), or nullopt.
std::optional<size_t> parse_cgroup_stat(const std::string& stat, const std::string& key);

}  // namespace s3d
