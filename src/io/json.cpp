#include "io/json.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <unordered_set>

#include "core/error.h"

namespace s3d::io {
namespace {

// nlohmann parses any depth, but copying or dumping a very deep value recurses and
// overflows the stack (docs/RELIABILITY.md): no config or manifest needs more than a few levels.
constexpr int kMaxDepth = 64;
constexpr uintmax_t kMaxJsonFileBytes = 64ull << 20;

const char* kind(const Json& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "a boolean";
  if (v.is_number_integer()) return "an integer";
  if (v.is_number_float()) return "a non-integer number";
  if (v.is_string()) return "a string";
  if (v.is_array()) return "an array";
  if (v.is_object()) return "an object";
  return "a binary value";
}

const Json& field(const Json& obj, const std::string& key, const std::string& what) {
  S3D_CHECK(obj.is_object(), what, ": expected a JSON object, found ", kind(obj));
  auto it = obj.find(key);
  S3D_CHECK(it != obj.end(), what, ": '", key, "' is missing");
  return *it;
}

bool has(const Json& obj, const std::string& key, const std::string& what) {
  S3D_CHECK(obj.is_object(), what, ": expected a JSON object, found ", kind(obj));
  return obj.contains(key);
}

// Range-checks in the integer domain before converting: nlohmann stores integers above
// 2^63 as unsigned and those above 2^64 as floats, and get<int64_t>() would wrap either.
int64_t as_int(const Json& v, const std::string& key, const std::string& what, int64_t min,
               int64_t max) {
  bool ok = false;
  int64_t i = 0;
  if (v.is_number_unsigned()) {
    uint64_t u = v.get<uint64_t>();
    ok = max >= 0 && u <= static_cast<uint64_t>(max);
    i = ok ? static_cast<int64_t>(u) : 0;
    ok = ok && i >= min;
  } else if (v.is_number_integer()) {
    i = v.get<int64_t>();
    ok = i >= min && i <= max;
  }
  S3D_CHECK(ok, what, ": '", key, "' must be an integer in [", min, ", ", max, "], found ",
            excerpt(v), v.is_number_float() ? " (not an integer, or beyond the 64-bit range)" : "");
  return i;
}

}  // namespace

std::string excerpt(const Json& v) {
  // Invalid UTF-8 can only come from values built in code; replace it rather than throw
  // while reporting another error.
  std::string s = v.dump(-1, ' ', false, Json::error_handler_t::replace);
  return s.size() > 80 ? s.substr(0, 77) + "..." : s;
}

Json parse_json(const std::string& text, const std::string& what) {
  // One key set per open object, innermost last: a key event belongs to the innermost
  // object because arrays hold no keys.
  std::vector<std::unordered_set<std::string>> open_objects;
  Json::parser_callback_t check = [&](int depth, Json::parse_event_t event, Json& parsed) {
    switch (event) {
      case Json::parse_event_t::object_start:
      case Json::parse_event_t::array_start:
        // depth counts the containers already open around this one.
        S3D_CHECK(depth < kMaxDepth, what, ": JSON nests deeper than ", kMaxDepth, " levels");
        if (event == Json::parse_event_t::object_start) open_objects.emplace_back();
        break;
      case Json::parse_event_t::object_end:
        open_objects.pop_back();
        break;
      case Json::parse_event_t::key: {
        const auto& k = parsed.get_ref<const std::string&>();
        S3D_CHECK(!open_objects.empty() && open_objects.back().insert(k).second, what,
                  ": duplicate key '", k, "'");
        break;
      }
      default:
        break;
    }
    return true;
  };
  try {
    return Json::parse(text, check, /*allow_exceptions=*/true, /*ignore_comments=*/false);
  } catch (const Json::exception& e) {
    fail(what, ": invalid JSON: ", e.what());
  }
}

Json read_json_file(const std::string& path) {
  std::error_code ec;
  S3D_CHECK(std::filesystem::is_regular_file(path, ec), path, ": not a readable regular file");
  uintmax_t size = std::filesystem::file_size(path, ec);
  S3D_CHECK(!ec, path, ": cannot read its size (", ec.message(), ")");
  S3D_CHECK(size <= kMaxJsonFileBytes, path, ": ", size, " bytes is larger than the ",
            kMaxJsonFileBytes, "-byte limit for JSON files");
  std::ifstream in(path, std::ios::binary);
  S3D_CHECK(in.good(), path, ": cannot open for reading");
  std::string text(static_cast<size_t>(size), '\0');
  in.read(text.data(), static_cast<std::streamsize>(size));
  S3D_CHECK(in.gcount() == static_cast<std::streamsize>(size), path, ": short read (",
            in.gcount(), " of ", size, " bytes)");
  return parse_json(text, path);
}

int64_t get_int(const Json& obj, const std::string& key, const std::string& what, int64_t min,
                int64_t max) {
  return as_int(field(obj, key, what), key, what, min, max);
}

int64_t get_int_or(const Json& obj, const std::string& key, const std::string& what,
                   int64_t min, int64_t max, int64_t fallback) {
  return has(obj, key, what) ? get_int(obj, key, what, min, max) : fallback;
}

uint64_t get_u64(const Json& obj, const std::string& key, const std::string& what) {
  const Json& v = field(obj, key, what);
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer() && v.get<int64_t>() >= 0) return static_cast<uint64_t>(v.get<int64_t>());
  fail(what, ": '", key, "' must be an integer in [0, ", std::numeric_limits<uint64_t>::max(),
       "], found ", excerpt(v));
}

double get_number(const Json& obj, const std::string& key, const std::string& what, double min,
                  double max) {
  const Json& v = field(obj, key, what);
  // Booleans are not numbers here, although nlohmann would convert them.
  S3D_CHECK(v.is_number(), what, ": '", key, "' must be a number in [", min, ", ", max,
            "], found ", kind(v), " ", excerpt(v));
  double d = v.get<double>();
  // Written so that a NaN (possible only in a programmatically built value) fails too.
  S3D_CHECK(d >= min && d <= max && std::isfinite(d), what, ": '", key,
            "' must be a number in [", min, ", ", max, "], found ", excerpt(v));
  return d;
}

double get_number_or(const Json& obj, const std::string& key, const std::string& what,
                     double min, double max, double fallback) {
  return has(obj, key, what) ? get_number(obj, key, what, min, max) : fallback;
}

bool get_bool_or(const Json& obj, const std::string& key, const std::string& what,
                 bool fallback) {
  if (!has(obj, key, what)) return fallback;
  const Json& v = obj.at(key);
  S3D_CHECK(v.is_boolean(), what, ": '", key, "' must be true or false, found ", kind(v), " ",
            excerpt(v));
  return v.get<bool>();
}

std::string get_string(const Json& obj, const std::string& key, const std::string& what) {
  const Json& v = field(obj, key, what);
  S3D_CHECK(v.is_string(), what, ": '", key, "' must be a string, found ", kind(v), " ",
            excerpt(v));
  return v.get<std::string>();
}

std::string get_string_or(const Json& obj, const std::string& key, const std::string& what,
                          const std::string& fallback) {
  return has(obj, key, what) ? get_string(obj, key, what) : fallback;
}

void check_known_keys(const Json& obj, const std::vector<std::string>& known,
                      const std::string& what) {
  S3D_CHECK(obj.is_object(), what, ": expected a JSON object, found ", kind(obj));
  for (const auto& [key, value] : obj.items()) {
    bool found = false;
    for (const auto& k : known) found = found || k == key;
    if (found) continue;
    std::string list;
    for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
    fail(what, ": unknown key '", key, "' (known keys: ", list, ")");
  }
}

}  // namespace s3d::io
