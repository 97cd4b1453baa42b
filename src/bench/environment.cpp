#include "bench/environment.h"

#include <ctime>

namespace s3d::bench {

std::string utc_now() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

io::Json fingerprint_json(const std::vector<std::pair<std::string, std::string>>& pairs) {
  auto integer = [](const std::string& s) {
    size_t i = !s.empty() && s[0] == '-' ? 1 : 0;
    if (i == s.size()) return false;
    for (; i < s.size(); ++i)
      if (s[i] < '0' || s[i] > '9') return false;
    return true;
  };
  io::Json j = io::Json::object();
  for (const auto& [key, value] : pairs) {
    if (value == "true" || value == "false") {
      j[key] = value == "true";
    } else if (integer(value)) {
      j[key] = io::parse_json(value, "fingerprint " + key);
    } else {
      j[key] = value;
    }
  }
  return j;
}

io::Json fingerprint_json(const sparse3d::Engine& engine) {
  return fingerprint_json(engine.fingerprint());
}

}  // namespace s3d::bench
