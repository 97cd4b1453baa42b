// Strict JSON for configs and manifests: nesting deeper than 64 levels, duplicate keys and
// numbers out of the target type's range are errors that name the file and the key.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace s3d::io {

using Json = nlohmann::json;

// Parses text; `what` names the source in errors ("config foo.json").
Json parse_json(const std::string& text, const std::string& what);
// Reads and parses a file (at most 64 MiB).
Json read_json_file(const std::string& path);

// Typed field access. Each throws s3d::Error naming `what`, the key, the expected type and
// range, and the value found. The *_or versions return the default when the key is absent.
int64_t get_int(const Json& obj, const std::string& key, const std::string& what,
                int64_t min, int64_t max);
int64_t get_int_or(const Json& obj, const std::string& key, const std::string& what,
                   int64_t min, int64_t max, int64_t fallback);
uint64_t get_u64(const Json& obj, const std::string& key, const std::string& what);
double get_number(const Json& obj, const std::string& key, const std::string& what,
                  double min, double max);
double get_number_or(const Json& obj, const std::string& key, const std::string& what,
                     double min, double max, double fallback);
bool get_bool_or(const Json& obj, const std::string& key, const std::string& what,
                 bool fallback);
std::string get_string(const Json& obj, const std::string& key, const std::string& what);
std::string get_string_or(const Json& obj, const std::string& key, const std::string& what,
                          const std::string& fallback);

// A value as JSON text for error messages, cut to at most 80 characters.
std::string excerpt(const Json& v);

// `v` as text for a file a person may read: what fits on a line of about 100 characters stays
// on it; in a larger object or array the entries that fit on a line share lines and the others
// start lines of their own, indented by `indent` spaces per level; invalid UTF-8 replaced.
// parse_json() reads it back to the same value; tools/compact_json.py writes the same layout.
// (nlohmann's dump(n) puts every number of a sample array on a line of its own: the bench's
// results were thousands of lines each.)
std::string dump_readable(const Json& v, int indent = 1);

// Throws unless `obj` is an object whose keys all appear in `known`; the message names the
// first unknown key and lists the known ones. Strict readers call it before the getters.
void check_known_keys(const Json& obj, const std::vector<std::string>& known,
                      const std::string& what);

}  // namespace s3d::io
