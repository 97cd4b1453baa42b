#include "core/host_memory.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <fstream>
#include <sstream>

namespace s3d {
namespace {

std::optional<std::string> read_text(const char* path) {
  std::ifstream f(path);
  if (!f) return std::nullopt;
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

// A non-negative decimal number at the start of `s` (after blanks), or nullopt.
std::optional<size_t> leading_number(const std::string& s, size_t at = 0) {
  while (at < s.size() && std::isspace(static_cast<unsigned char>(s[at]))) ++at;
  if (at >= s.size() || !std::isdigit(static_cast<unsigned char>(s[at]))) return std::nullopt;
  size_t v = 0;
  for (; at < s.size() && std::isdigit(static_cast<unsigned char>(s[at])); ++at) {
    const size_t d = static_cast<size_t>(s[at] - '0');
    if (v > (SIZE_MAX - d) / 10) return SIZE_MAX;  // saturate: "more than anyone has"
    v = v * 10 + d;
  }
  return v;
}

}  // namespace

std::optional<size_t> parse_mem_available(const std::string& meminfo) {
  const std::string key = "MemAvailable:";
  const size_t at = meminfo.find(key);
  if (at == std::string::npos || (at > 0 && meminfo[at - 1] != '\n')) return std::nullopt;
  const std::optional<size_t> kb = leading_number(meminfo, at + key.size());
  if (!kb) return std::nullopt;
  return *kb > SIZE_MAX / 1024 ? SIZE_MAX : *kb * 1024;
}

std::optional<size_t> parse_cgroup_limit(const std::string& text) {
  if (text.rfind("max", 0) == 0) return std::nullopt;  // no limit
  return leading_number(text);
}

std::optional<size_t> parse_cgroup_stat(const std::string& stat, const std::string& key) {
  size_t at = 0;
  while (at < stat.size()) {
    const size_t end = std::min(stat.find('\n', at), stat.size());
    if (stat.compare(at, key.size(), key) == 0 && at + key.size() < end &&
        stat[at + key.size()] == ' ')
      return leading_number(stat.substr(at + key.size(), end - at - key.size()));
    at = end + 1;
  }
  return std::nullopt;
}

std::optional<size_t> host_memory_available() {
  std::optional<size_t> available;
  if (const auto meminfo = read_text("/proc/meminfo")) available = parse_mem_available(*meminfo);
  // A container's cgroup (v2) may allow less than the machine has free: its limit less what
  // it uses now, page cache left out (the kernel reclaims it first; a checkpoint just read
  // would otherwise count as used).
  const auto limit = read_text("/sys/fs/cgroup/memory.max");
  const auto current = read_text("/sys/fs/cgroup/memory.current");
  if (limit && current) {
    const std::optional<size_t> l = parse_cgroup_limit(*limit);
    std::optional<size_t> used = leading_number(*current);
    if (const auto stat = read_text("/sys/fs/cgroup/memory.stat"); stat && used) {
      const std::optional<size_t> file = parse_cgroup_stat(*stat, "file");
      if (file) used = *used > *file ? *used - *file : 0;
    }
    if (l && used) {
      const size_t left = *l > *used ? *l - *used : 0;
      available = available ? std::min(*available, left) : left;
    }
  }
  return available;
}

}  // namespace s3d
