#include "contract/fallback.h"

#include "core/error.h"

namespace s3d::contract {

std::string format_fallbacks(const std::vector<FallbackCount>& counts) {
  if (counts.empty()) return "  none\n";
  std::string s;
  for (const auto& c : counts)
    s += cat("  ", c.optimization, ": ", c.reason, " (", c.count, "x)\n");
  return s;
}

io::Json fallbacks_to_json(const std::vector<FallbackCount>& counts) {
  io::Json a = io::Json::array();
  for (const auto& c : counts)
    a.push_back(io::Json{{"optimization", c.optimization}, {"reason", c.reason}, {"count", c.count}});
  return a;
}

std::vector<FallbackCount> fallbacks_from_json(const io::Json& j, const std::string& what) {
  S3D_CHECK(j.is_array(), what, ": 'fallbacks' must be a list, found ", io::excerpt(j));
  std::vector<FallbackCount> out;
  for (size_t i = 0; i < j.size(); ++i) {
    const std::string w = cat(what, " fallbacks[", i, "]");
    io::check_known_keys(j[i], {"optimization", "reason", "count"}, w);
    const std::string optimization = io::get_string(j[i], "optimization", w);
    const sparse3d::Flag flag = [&] {
      try {
        return sparse3d::parse_flag(optimization);
      } catch (const Error& e) {
        fail(w, ": ", e.what());
      }
    }();
    out.push_back(FallbackCount{std::string(sparse3d::name(flag)),
                                io::get_string(j[i], "reason", w), io::get_u64(j[i], "count", w)});
  }
  return out;
}

}  // namespace s3d::contract
