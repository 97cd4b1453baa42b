#include "io/fallback_json.h"

#include "core/error.h"

namespace s3d::io {

Json fallbacks_to_json(const std::vector<FallbackCount>& counts) {
  Json a = Json::array();
  for (const auto& c : counts)
    a.push_back(Json{{"optimization", c.optimization}, {"reason", c.reason}, {"count", c.count}});
  return a;
}

std::vector<FallbackCount> fallbacks_from_json(const Json& j, const std::string& what) {
  S3D_CHECK(j.is_array(), what, ": 'fallbacks' must be a list, found ", excerpt(j));
  std::vector<FallbackCount> out;
  for (size_t i = 0; i < j.size(); ++i) {
    const std::string w = cat(what, " fallbacks[", i, "]");
    check_known_keys(j[i], {"optimization", "reason", "count"}, w);
    const std::string optimization = get_string(j[i], "optimization", w);
    const sparse3d::Flag flag = [&] {
      try {
        return sparse3d::parse_flag(optimization);
      } catch (const Error& e) {
        fail(w, ": ", e.what());
      }
    }();
    out.push_back(FallbackCount{std::string(sparse3d::name(flag)),
                                get_string(j[i], "reason", w), get_u64(j[i], "count", w)});
  }
  return out;
}

}  // namespace s3d::io
