#include "payload/payload.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>

#include "core/error.h"
#include "io/atomic_file.h"
#include "io/json.h"
#include "io/safetensors.h"

namespace s3d::payload {
namespace {

const char* const kManifestFormat = "sparse3d-payload-manifest";
const char* const kAssetFormat = "sparse3d-asset";
constexpr int64_t kMaxNoiseSeed = (int64_t{1} << 53) - 1;  // exact in a double (Python, JSON)
constexpr int64_t kMaxGrid = 1 << 16;
constexpr int64_t kMaxChannels = 1 << 20;
constexpr int64_t kMaxTokens = int64_t{1} << 30;

// Asset names become output file names (DIR/<name>.safetensors): nothing that could leave
// the output folder or confuse a shell.
void check_name(const std::string& name, const std::string& what) {
  S3D_CHECK(!name.empty(), what, ": 'name' is empty");
  S3D_CHECK(name.size() <= 200, what, ": 'name' is ", name.size(), " bytes long (at most 200)");
  S3D_CHECK(name != "." && name != "..", what, ": 'name' cannot be \"", name, "\"");
  for (unsigned char ch : name)
    S3D_CHECK(ch >= 0x20 && ch != 0x7f && ch != '/' && ch != '\\', what, ": 'name' \"", name,
              "\" contains a path separator or control character");
}

// A relative path that stays inside the manifest's folder.
void check_relative_file(const std::string& file, const std::string& what) {
  S3D_CHECK(!file.empty(), what, ": 'file' is empty");
  S3D_CHECK(file.front() != '/', what, ": 'file' \"", file,
            "\" is absolute; it must be relative to the manifest's folder");
  S3D_CHECK(file.find('\0') == std::string::npos, what, ": 'file' contains a NUL byte");
  size_t start = 0;
  while (start <= file.size()) {
    size_t slash = file.find('/', start);
    if (slash == std::string::npos) slash = file.size();
    S3D_CHECK(file.compare(start, slash - start, "..") != 0, what, ": 'file' \"", file,
              "\" has a \"..\" component; it must stay inside the manifest's folder");
    start = slash + 1;
  }
}

// The rules for one entry, shared by the reader (after the typed getters) and the writer,
// so that write_manifest never produces a file read_manifest refuses.
void check_entry(const ManifestEntry& e, const std::string& what) {
  check_name(e.name, what);
  check_relative_file(e.file, what);
  S3D_CHECK(e.tokens >= 1 && e.tokens <= kMaxTokens, what, ": 'tokens' must be in [1, ",
            kMaxTokens, "], found ", e.tokens);
  S3D_CHECK(e.noise_seed <= static_cast<uint64_t>(kMaxNoiseSeed), what,
            ": 'noise_seed' must be in [0, 2^53), found ", e.noise_seed);
  S3D_CHECK(e.set == "default" || e.set == "long-tail", what,
            ": 'set' must be \"default\" or \"long-tail\", found \"", e.set, "\"");
}

ManifestEntry parse_entry(const io::Json& j, const std::string& what) {
  io::check_known_keys(j, {"name", "file", "tokens", "noise_seed", "set"}, what);
  ManifestEntry e;
  e.name = io::get_string(j, "name", what);
  e.file = io::get_string(j, "file", what);
  e.tokens = io::get_int(j, "tokens", what, 1, kMaxTokens);
  e.noise_seed = static_cast<uint64_t>(io::get_int(j, "noise_seed", what, 0, kMaxNoiseSeed));
  e.set = io::get_string_or(j, "set", what, "default");
  check_entry(e, what);
  return e;
}

void check_unique_names(const std::vector<ManifestEntry>& assets, const std::string& what) {
  std::set<std::string> names;
  for (size_t i = 0; i < assets.size(); ++i)
    S3D_CHECK(names.insert(assets[i].name).second, what, ": assets[", i, "] repeats the name \"",
              assets[i].name, "\" (names must be unique)");
}

// Every value finite; reports the first that is not by its (token, channel).
void check_finite(const Tensor& t, const std::string& what, const char* tensor_name) {
  const int64_t i = t.first_non_finite();
  if (i < 0) return;
  const float v = t.to_floats()[static_cast<size_t>(i)];
  const int64_t cols = t.size(1);
  fail(what, ": ", tensor_name, " has ", std::isnan(v) ? "a NaN" : "an infinity", " at token ",
       i / cols, ", channel ", i % cols);
}

void check_2d(const io::TensorEntry* e, const std::string& what, const char* name,
              const std::vector<std::string>& dtypes, int64_t rows, int64_t cols) {
  S3D_CHECK(e != nullptr, what, ": has no '", name, "' tensor");
  bool dtype_ok = false;
  std::string list;
  for (const auto& d : dtypes) {
    dtype_ok = dtype_ok || e->dtype == d;
    list += (list.empty() ? "" : " or ") + d;
  }
  S3D_CHECK(dtype_ok, what, ": '", name, "' has dtype ", e->dtype, ", expected ", list);
  S3D_CHECK(e->shape.size() == 2 && (rows < 0 || e->shape[0] == rows) && e->shape[1] == cols,
            what, ": '", name, "' has shape ", shape_str(e->shape), ", expected [",
            rows < 0 ? std::string("T") : std::to_string(rows), ", ", cols, "]");
}

}  // namespace

Manifest read_manifest(const std::string& path) {
  const std::string what = "manifest " + path;
  io::Json j = io::read_json_file(path);
  io::check_known_keys(j, {"format", "version", "grid", "cond_tokens", "cond_channels",
                           "concat_channels", "assets"},
                       what);
  std::string format = io::get_string(j, "format", what);
  S3D_CHECK(format == kManifestFormat, what, ": 'format' must be \"", kManifestFormat,
            "\", found \"", format, "\"");
  io::get_int(j, "version", what, 1, 1);
  Manifest m;
  std::filesystem::path parent = std::filesystem::path(path).parent_path();
  m.dir = parent.empty() ? "." : parent.string();
  m.grid = static_cast<int>(io::get_int(j, "grid", what, 1, kMaxGrid));
  m.cond_tokens = static_cast<int>(io::get_int(j, "cond_tokens", what, 1, kMaxTokens));
  m.cond_channels = static_cast<int>(io::get_int(j, "cond_channels", what, 1, kMaxChannels));
  m.concat_channels =
      static_cast<int>(io::get_int_or(j, "concat_channels", what, 0, kMaxChannels, 0));
  S3D_CHECK(j.contains("assets") && j.at("assets").is_array(), what,
            ": 'assets' must be an array of asset entries");
  const io::Json& assets = j.at("assets");
  S3D_CHECK(!assets.empty(), what, ": 'assets' lists no assets");
  for (size_t i = 0; i < assets.size(); ++i)
    m.assets.push_back(parse_entry(assets[i], cat(what, ": assets[", i, "]")));
  check_unique_names(m.assets, what);
  return m;
}

void write_manifest(const std::string& path, const Manifest& m) {
  const std::string what = "writing manifest " + path;
  S3D_CHECK(m.grid >= 1 && m.grid <= kMaxGrid && m.cond_tokens >= 1 && m.cond_channels >= 1 &&
                m.concat_channels >= 0 && !m.assets.empty(),
            what, ": grid ", m.grid, ", cond_tokens ", m.cond_tokens, ", cond_channels ",
            m.cond_channels, ", concat_channels ", m.concat_channels, " and ", m.assets.size(),
            " assets do not make a valid manifest");
  for (size_t i = 0; i < m.assets.size(); ++i) check_entry(m.assets[i], cat(what, ": assets[", i, "]"));
  check_unique_names(m.assets, what);
  nlohmann::ordered_json assets = nlohmann::ordered_json::array();
  for (const auto& a : m.assets) {
    assets.push_back({{"name", a.name},
                      {"file", a.file},
                      {"tokens", a.tokens},
                      {"noise_seed", a.noise_seed},
                      {"set", a.set}});
  }
  nlohmann::ordered_json j = {{"format", kManifestFormat}, {"version", 1},
                              {"grid", m.grid},            {"cond_tokens", m.cond_tokens},
                              {"cond_channels", m.cond_channels},
                              {"concat_channels", m.concat_channels},
                              {"assets", assets}};
  std::string text;
  try {
    text = j.dump(1) + "\n";
  } catch (const nlohmann::ordered_json::exception& e) {
    fail(what, ": cannot encode (", e.what(), ")");
  }
  io::write_file_atomic(path, text);
}

// The asset's path, once it is known to be a regular file inside the manifest's folder after
// every symbolic link is resolved (a link may point anywhere; its text may look harmless).
std::string resolved_asset_path(const Manifest& m, const ManifestEntry& entry,
                                const std::string& what) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path folder = fs::canonical(m.dir.empty() ? "." : m.dir, ec);
  S3D_CHECK(!ec, what, ": the manifest's folder ", m.dir, " cannot be resolved (", ec.message(), ")");
  const fs::path path = fs::canonical(fs::path(m.dir) / entry.file, ec);
  S3D_CHECK(!ec, what, ": cannot open ", (fs::path(m.dir) / entry.file).string(), " (",
            ec.message(), ")");
  const auto [end, ignored] = std::mismatch(folder.begin(), folder.end(), path.begin(), path.end());
  S3D_CHECK(end == folder.end(), what, ": resolves (through a symbolic link) to ", path.string(),
            ", outside the manifest's folder ", folder.string());
  S3D_CHECK(fs::is_regular_file(path, ec), what, ": ", path.string(), " is not a regular file");
  return path.string();
}

Asset read_asset(const Manifest& m, const ManifestEntry& entry) {
  const std::string what = "payload " + entry.file;
  check_relative_file(entry.file, what);
  // Three tensors and a little metadata: 1 MiB of header is plenty, and a longer one is
  // refused before it is read.
  auto file = io::SafetensorsFile::open(resolved_asset_path(m, entry, what), what, 1u << 20,
                                        "a payload asset (coords, cond, concat_cond)");
  auto format = file.metadata().find("format");
  S3D_CHECK(format == file.metadata().end() || format->second == kAssetFormat, what,
            ": metadata 'format' is \"", format->second, "\", expected \"", kAssetFormat, "\"");
  for (const auto& e : file.entries())
    S3D_CHECK(e.name == "coords" || e.name == "cond" || e.name == "concat_cond", what,
              ": unexpected tensor '", e.name, "' (an asset holds coords, cond and, for texture "
              "models, concat_cond)");
  file.check_tensor_bytes(kMaxAssetBytes, "a payload asset");

  // Every header check first, then the loads: a bad file fails before any large read.
  const io::TensorEntry* coords_e = file.find("coords");
  check_2d(coords_e, what, "coords", {"I32"}, -1, 4);
  const int64_t tokens = coords_e->shape[0];
  S3D_CHECK(tokens >= 1, what, ": asset has 0 tokens");
  S3D_CHECK(tokens == entry.tokens, what, ": coords has ", tokens,
            " rows, but the manifest says the asset has ", entry.tokens, " tokens");
  check_2d(file.find("cond"), what, "cond", {"BF16", "F32"}, m.cond_tokens, m.cond_channels);
  const io::TensorEntry* concat_e = file.find("concat_cond");
  if (m.concat_channels > 0) {
    check_2d(concat_e, what, "concat_cond", {"F32"}, tokens, m.concat_channels);
  } else {
    S3D_CHECK(concat_e == nullptr, what,
              ": has a concat_cond tensor, but the manifest's concat_channels is 0");
  }

  Asset a;
  a.name = entry.name;
  a.noise_seed = entry.noise_seed;
  // The coordinates are read and checked in pieces, and the whole tensor is allocated only
  // once the first piece holds: a file whose header promises many rows but whose rows are
  // wrong (a sparse file of zeros, say) is refused after reading one piece, not after
  // allocating gigabytes.
  constexpr int64_t kPieceRows = 1 << 16;
  std::vector<int32_t> piece(static_cast<size_t>(std::min(tokens, kPieceRows)) * 4);
  int32_t prev[4] = {0, 0, 0, 0};
  auto check_rows = [&](const int32_t* c, int64_t first, int64_t n) {
    for (int64_t k = 0; k < n; ++k) {
      const int64_t r = first + k;
      const int32_t* row = c + 4 * k;
      S3D_CHECK(row[0] == 0, what, ": coords row ", r, " has batch index ", row[0],
                ", but an asset file holds one asset (batch index 0)");
      for (int axis = 1; axis <= 3; ++axis)
        S3D_CHECK(row[axis] >= 0 && row[axis] < m.grid, what, ": coords row ", r, " has ",
                  "xyz"[axis - 1], " = ", row[axis], ", but the grid is ", m.grid, "^3");
      if (r > 0) {
        const int32_t* p = prev;
        bool after = p[1] != row[1] ? p[1] < row[1] : p[2] != row[2] ? p[2] < row[2] : p[3] < row[3];
        S3D_CHECK(after, what, ": coords row ", r, " (", row[1], ", ", row[2], ", ", row[3],
                  ") is not after row ", r - 1, " (", p[1], ", ", p[2], ", ", p[3],
                  ") (coords must be sorted by x, y, z, without duplicates)");
      }
      std::copy(row, row + 4, prev);
    }
  };
  for (int64_t first = 0; first < tokens; first += kPieceRows) {
    const int64_t n = std::min(kPieceRows, tokens - first);
    file.read_bytes("coords", static_cast<uint64_t>(first) * 16, static_cast<uint64_t>(n) * 16,
                    piece.data());
    check_rows(piece.data(), first, n);
    if (first == 0) a.coords = Tensor::empty({tokens, 4}, DType::I32, Device::CPU);
    std::copy(piece.begin(), piece.begin() + n * 4, a.coords.data_as<int32_t>() + first * 4);
  }
  a.cond = file.load("cond", file.find("cond")->dtype == "BF16" ? DType::BF16 : DType::F32);
  check_finite(a.cond, what, "cond");
  if (m.concat_channels > 0) {
    a.concat_cond = file.load("concat_cond", DType::F32);
    check_finite(a.concat_cond, what, "concat_cond");
  }
  return a;
}

void write_asset(const std::string& path, const Asset& a) {
  std::vector<std::pair<std::string, Tensor>> tensors = {{"coords", a.coords}, {"cond", a.cond}};
  if (a.concat_cond.defined()) tensors.emplace_back("concat_cond", a.concat_cond);
  io::write_safetensors(path, tensors, {{"format", kAssetFormat}, {"name", a.name}});
}

void validate_packed_coords(const Tensor& coords, int batch, int grid, const std::string& what) {
  check_tensor(coords, what.c_str(), DType::I32, {-1, 4});
  S3D_CHECK(coords.device() == Device::CPU, what, ": coords must be on the host, found ",
            coords.describe());
  S3D_CHECK(batch >= 1, what, ": batch must be at least 1, found ", batch);
  const int64_t tokens = coords.size(0);
  S3D_CHECK(tokens >= 1, what, ": coords has no rows, but the batch has ", batch, " assets");
  const int32_t* c = coords.data_as<int32_t>();
  int32_t prev = -1;
  for (int64_t r = 0; r < tokens; ++r) {
    const int32_t* row = c + 4 * r;
    S3D_CHECK(row[0] >= 0 && row[0] < batch, what, ": coords row ", r, " has batch index ",
              row[0], ", but the batch has ", batch, " assets");
    S3D_CHECK(row[0] >= prev, what, ": coords row ", r, " has batch index ", row[0],
              " after batch index ", prev, " (rows of one asset must be contiguous, in batch order)");
    if (row[0] > prev + 1) {
      if (prev < 0)
        fail(what, ": coords start with batch index ", row[0],
             ": asset 0 has no rows (rows must be in batch order, from asset 0)");
      fail(what, ": coords row ", r, " has batch index ", row[0], " after batch index ", prev,
           ": asset ", prev + 1, " has no rows");
    }
    for (int axis = 1; axis <= 3; ++axis)
      S3D_CHECK(row[axis] >= 0 && row[axis] < grid, what, ": coords row ", r, " has ",
                "xyz"[axis - 1], " = ", row[axis], ", but the grid is ", grid, "^3");
    prev = row[0];
  }
  S3D_CHECK(prev == batch - 1, what, ": coords cover assets 0..", prev, ", but the batch has ",
            batch, " assets (assets ", prev + 1, "..", batch - 1, " have no rows)");
}

}  // namespace s3d::payload
