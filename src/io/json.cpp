#include "io/json.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <unordered_set>
#include <vector>

#include "core/error.h"

namespace s3d::io {
namespace {

// nlohmann parses any depth, but copying or dumping a very deep value recurses and
// overflows the stack (docs/RELIABILITY.md): no config or manifest needs more than a few levels.
constexpr int kMaxDepth = 64;
constexpr uintmax_t kMaxJsonFileBytes = 64ull << 20;
// Values (scalars and containers) in one document: a manifest of the largest payload set
// has a few hundred, a bench result tens of thousands. 64 MiB of `{}` would be 22 million,
// gigabytes of nodes: refused at the limit instead, in a fraction of a second.
constexpr size_t kMaxJsonValues = size_t(1) << 20;

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

namespace {

// Builds the value from nlohmann's SAX events, checking as it goes: nesting depth, duplicate
// keys (one key set per open object). Linear in the input: nlohmann's own callback parser
// re-scans the parent container each time an object closes, which made 200,000 empty
// objects take 20 s (docs/RELIABILITY.md).
class CheckedBuilder : public nlohmann::json_sax<Json> {
 public:
  explicit CheckedBuilder(const std::string& what) : what_(what) {}
  Json root;
  std::string error;  // nlohmann's message for a syntax error

  bool null() override { return add(Json(nullptr)); }
  bool boolean(bool v) override { return add(Json(v)); }
  bool number_integer(number_integer_t v) override { return add(Json(v)); }
  bool number_unsigned(number_unsigned_t v) override { return add(Json(v)); }
  bool number_float(number_float_t v, const string_t&) override { return add(Json(v)); }
  bool string(string_t& v) override { return add(Json(std::move(v))); }
  bool binary(binary_t& v) override { return add(Json::binary(std::move(v))); }
  bool start_object(std::size_t) override {
    open(Json::object());
    keys_.emplace_back();
    return true;
  }
  bool key(string_t& k) override {
    S3D_CHECK(keys_.back().insert(k).second, what_, ": duplicate key '", k, "'");
    key_ = std::move(k);
    return true;
  }
  bool end_object() override {
    stack_.pop_back();
    keys_.pop_back();
    return true;
  }
  bool start_array(std::size_t) override {
    open(Json::array());
    return true;
  }
  bool end_array() override {
    stack_.pop_back();
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    error = e.what();
    return false;
  }

 private:
  // Places a value in the innermost open container (or as the root); returns where it is.
  Json* place(Json&& v) {
    S3D_CHECK(++values_ <= kMaxJsonValues, what_, ": more than ", kMaxJsonValues,
              " JSON values; no sparse3d file needs that many");
    if (stack_.empty()) {
      root = std::move(v);
      return &root;
    }
    Json& top = *stack_.back();
    if (top.is_array()) {
      top.push_back(std::move(v));
      return &top.back();
    }
    Json& slot = top[key_];
    slot = std::move(v);
    return &slot;
  }
  bool add(Json&& v) {
    place(std::move(v));
    return true;
  }
  void open(Json&& container) {
    // The containers already open around this one.
    S3D_CHECK(stack_.size() < kMaxDepth, what_, ": JSON nests deeper than ", kMaxDepth, " levels");
    stack_.push_back(place(std::move(container)));
  }

  const std::string& what_;
  // Open containers, innermost last. A pointer into a parent stays valid while the child is
  // open: the parent gets no other element until the child closes.
  std::vector<Json*> stack_;
  std::vector<std::unordered_set<std::string>> keys_;
  std::string key_;
  size_t values_ = 0;
};

}  // namespace

Json parse_json(const std::string& text, const std::string& what) {
  CheckedBuilder builder(what);
  bool ok = false;
  try {
    ok = Json::sax_parse(text, &builder, nlohmann::detail::input_format_t::json,
                         /*strict=*/true, /*ignore_comments=*/false);
  } catch (const Json::exception& e) {
    fail(what, ": invalid JSON: ", e.what());
  }
  S3D_CHECK(ok, what, ": invalid JSON: ", builder.error);
  return std::move(builder.root);
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

namespace {

constexpr size_t kReadableWidth = 100;

bool is_scalar(const Json& v) { return !v.is_object() && !v.is_array(); }

std::string compact_text(const Json& v) {
  std::string text = v.dump(-1, ' ', false, Json::error_handler_t::replace);
  if (!v.is_object() && !v.is_array()) {
    return text;
  }
  // nlohmann's compact form has no space after ',' and ':'; one reads easier. Only the
  // separators outside strings change.
  std::string out;
  out.reserve(text.size() + text.size() / 4);
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    out += c;
    if (in_string) {
      if (c == '\\' && i + 1 < text.size()) {
        out += text[++i];
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == ',' || c == ':') {
      out += ' ';
    }
  }
  return out;
}

// Appends `v` to `out`, whose current line is `column` characters long so far. What fits on
// the line stays on it; otherwise the entries (an object's "key": value, an array's elements)
// that fit on a line share lines of about kReadableWidth characters and the others start lines
// of their own. tools/compact_json.py writes the same layout.
void dump_readable_into(const Json& v, int indent, int depth, size_t column, std::string& out) {
  const std::string one_line = compact_text(v);
  if (is_scalar(v) || v.empty() || column + one_line.size() <= kReadableWidth) {
    out += one_line;
    return;
  }
  const std::string pad(static_cast<size_t>(indent * (depth + 1)), ' ');
  std::vector<std::string> entries;
  const auto add = [&](const std::string& head, const Json& value) {
    std::string text = head;
    dump_readable_into(value, indent, depth + 1, pad.size() + head.size(), text);
    entries.push_back(std::move(text));
  };
  if (v.is_object()) {
    for (const auto& [key, value] : v.items()) add(compact_text(Json(key)) + ": ", value);
  } else {
    for (const Json& e : v) add("", e);
  }
  out += (v.is_object() ? "{\n" : "[\n") + pad;
  size_t line = pad.size();
  bool tall = false;  // the entry before spans lines
  for (size_t i = 0; i < entries.size(); ++i) {
    const std::string& t = entries[i];
    const size_t newline = t.rfind('\n');
    const bool spans = newline != std::string::npos;
    if (i > 0) {
      const bool wrap = tall || spans || line + 2 + t.size() > kReadableWidth;
      out += wrap ? ",\n" + pad : ", ";
      line = wrap ? pad.size() : line + 2;
    }
    out += t;
    line = spans ? t.size() - newline - 1 : line + t.size();
    tall = spans;
  }
  out += "\n" + std::string(static_cast<size_t>(indent * depth), ' ') +
         (v.is_object() ? "}" : "]");
}

}  // namespace

std::string dump_readable(const Json& v, int indent) {
  std::string out;
  dump_readable_into(v, indent, 0, 0, out);
  return out;
}

}  // namespace s3d::io
