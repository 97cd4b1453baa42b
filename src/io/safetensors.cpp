#include "io/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>

#include "core/bf16.h"
#include "core/error.h"
#include "io/atomic_file.h"
#include "io/json.h"

namespace s3d::io {

// The file format is little-endian and so is every host we build for; reading raw bytes
// into tensors relies on it.
static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes little-endian");

namespace {

// The reference reader's limit: a larger header is an attack, not a checkpoint.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
// The most one read() call asks for.
constexpr uint64_t kReadPiece = uint64_t{64} << 20;
const char* const kMetadataKey = "__metadata__";

struct DtypeInfo {
  const char* name;
  uint64_t size;
};

// The closed set of the safetensors format.
constexpr DtypeInfo kDtypes[] = {
    {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1},
    {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},
    {"U32", 4},  {"F32", 4}, {"F64", 8}, {"I64", 8},     {"U64", 8},
};

const DtypeInfo* find_dtype(const std::string& name) {
  for (const auto& d : kDtypes)
    if (name == d.name) return &d;
  return nullptr;
}

std::string dtype_list() {
  std::string s;
  for (const auto& d : kDtypes) s += (s.empty() ? "" : ", ") + std::string(d.name);
  return s;
}

// A read-only file descriptor that closes itself; every read is positioned (pread), so a
// tensor is read once, straight to where it goes, with no whole-file buffer.
class InputFile {
 public:
  InputFile(const std::string& path, const std::string& what) : what_(what) {
    // O_NONBLOCK: opening a FIFO must not hang waiting for a writer (it is refused below);
    // it changes nothing for regular files.
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    S3D_CHECK(fd_ >= 0, what_, ": cannot open (", std::strerror(errno), ")");
    struct stat st {};
    const bool stat_ok = ::fstat(fd_, &st) == 0;
    if (!stat_ok || !S_ISREG(st.st_mode)) {
      const int err = errno;
      ::close(fd_);  // the destructor does not run when the constructor throws
      fail(what_, stat_ok ? ": not a regular file" : cat(": cannot stat (", std::strerror(err), ")"));
    }
    size_ = static_cast<uint64_t>(st.st_size);
  }
  ~InputFile() { ::close(fd_); }
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  uint64_t size() const { return size_; }

  void read_exact(void* dst, uint64_t bytes, uint64_t offset) const {
    auto* p = static_cast<char*>(dst);
    while (bytes > 0) {
      // Bounded pieces (Linux moves at most ~2 GiB per call anyway): a slow or hostile file
      // costs one piece per call, and a signal or an error is seen between pieces.
      size_t chunk = static_cast<size_t>(std::min<uint64_t>(bytes, kReadPiece));
      ssize_t n = ::pread(fd_, p, chunk, static_cast<off_t>(offset));
      if (n < 0 && errno == EINTR) continue;
      S3D_CHECK(n >= 0, what_, ": read failed at byte ", offset, " (", std::strerror(errno), ")");
      S3D_CHECK(n > 0, what_, ": unexpected end of file at byte ", offset,
                " (was the file truncated after it was opened?)");
      p += n;
      offset += static_cast<uint64_t>(n);
      bytes -= static_cast<uint64_t>(n);
    }
  }

 private:
  int fd_ = -1;
  uint64_t size_ = 0;
  std::string what_;
};

// IEEE binary16 to binary32; exact (every half is a float).
float half_to_float(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  if (exp == 0) {
    // Zero or subnormal: man * 2^-24.
    float f = std::ldexp(static_cast<float>(man), -24);
    return sign ? -f : f;
  }
  uint32_t bits = exp == 0x1f ? (sign | 0x7f800000u | (man << 13))       // inf / NaN
                              : (sign | ((exp + 112u) << 23) | (man << 13));  // rebias 15->127
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// Reads a JSON array of non-negative integers no larger than `max`.
bool read_uint_array(const Json& v, uint64_t max, std::vector<uint64_t>& out) {
  if (!v.is_array()) return false;
  for (const Json& e : v) {
    uint64_t x;
    if (e.is_number_unsigned()) {
      x = e.get<uint64_t>();
    } else if (e.is_number_integer() && e.get<int64_t>() >= 0) {
      x = static_cast<uint64_t>(e.get<int64_t>());
    } else {
      return false;  // negative, fractional, beyond 2^64 (stored as float), or not a number
    }
    if (x > max) return false;
    out.push_back(x);
  }
  return true;
}

// Validates one header entry completely: fields, dtype, shape, offsets, size, alignment.
TensorEntry parse_entry(const std::string& name, const Json& v, const std::string& what) {
  std::string where = cat(what, ": tensor '", name, "'");
  S3D_CHECK(v.is_object(), where, " must be an object with dtype, shape and data_offsets, found ",
            excerpt(v));
  for (const auto& [key, value] : v.items()) {
    S3D_CHECK(key == "dtype" || key == "shape" || key == "data_offsets", where,
              " has unknown field '", key, "' (an entry holds dtype, shape and data_offsets)");
  }
  for (const char* key : {"dtype", "shape", "data_offsets"})
    S3D_CHECK(v.contains(key), where, " has no '", key, "'");

  TensorEntry e;
  e.name = name;
  const Json& dtype = v.at("dtype");
  S3D_CHECK(dtype.is_string(), where, " has dtype ", excerpt(dtype), ", which is not a string");
  e.dtype = dtype.get<std::string>();
  const DtypeInfo* info = find_dtype(e.dtype);
  S3D_CHECK(info != nullptr, where, " has unknown dtype '", e.dtype, "' (expected one of ",
            dtype_list(), ")");

  std::vector<uint64_t> dims;
  S3D_CHECK(read_uint_array(v.at("shape"), std::numeric_limits<int64_t>::max(), dims), where,
            " has shape ", excerpt(v.at("shape")),
            ": shape entries must be non-negative integers below 2^63");
  for (uint64_t d : dims) e.shape.push_back(static_cast<int64_t>(d));

  std::vector<uint64_t> offsets;
  S3D_CHECK(read_uint_array(v.at("data_offsets"), std::numeric_limits<uint64_t>::max(), offsets) &&
                offsets.size() == 2 && offsets[0] <= offsets[1],
            where, " has data_offsets ", excerpt(v.at("data_offsets")),
            ": expected [begin, end], two non-negative 64-bit integers with begin <= end");
  e.begin = offsets[0];
  e.end = offsets[1];

  // Element count and byte size with overflow checks: a shape of [2^32, 2^32, 2] must not
  // wrap around to a small number that happens to match the span.
  uint64_t bytes = 0;
  bool overflow = false;
  if (std::find(dims.begin(), dims.end(), 0) == dims.end()) {  // else empty: 0 bytes
    bytes = info->size;
    for (uint64_t d : dims) {
      overflow = overflow || bytes > std::numeric_limits<uint64_t>::max() / d;
      if (!overflow) bytes *= d;
    }
  }
  S3D_CHECK(!overflow, where, " has shape ", shape_str(e.shape), " x ", e.dtype,
            ", whose size in bytes does not fit in 64 bits");
  S3D_CHECK(bytes == e.end - e.begin, where, " has data_offsets [", e.begin, ", ", e.end,
            "] (", e.end - e.begin, " bytes) but shape ", shape_str(e.shape), " x ", e.dtype,
            " needs ", bytes, " bytes");
  S3D_CHECK(e.begin % info->size == 0, where, " starts at data offset ", e.begin,
            ", which is not aligned to its dtype size (", e.dtype, ", ", info->size, " bytes)");
  return e;
}

// Converts `n` elements of a float file dtype to bf16 or f32 at dst. The source kind is
// resolved once per call, not per element: checkpoints hold a billion of them.
template <class Decode>
void convert_with(const uint8_t* src, size_t in_size, void* dst, DType to, size_t n,
                  Decode decode) {
  if (to == DType::F32) {
    auto* out = static_cast<float*>(dst);
    for (size_t i = 0; i < n; ++i) out[i] = decode(src + in_size * i);
  } else {
    auto* out = static_cast<uint16_t*>(dst);
    for (size_t i = 0; i < n; ++i) out[i] = float_to_bf16(decode(src + in_size * i));
  }
}

// The header length in the file's first 8 bytes (little-endian), checked against the file's
// size and both limits before any of the header is read.
uint64_t read_header_length(const InputFile& file, uint64_t size, const std::string& what,
                            uint64_t max_header_bytes, const std::string& expected) {
  S3D_CHECK(size >= 8, what, ": the file is ", size,
            " bytes, shorter than the 8-byte header length that starts a safetensors file");
  uint8_t len_bytes[8];
  file.read_exact(len_bytes, 8, 0);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | len_bytes[i];
  // A length past the end means these bytes are not a header length at all (a text file, a
  // hard link to anything): the message gives the file's size, never the number those bytes
  // make, which would print the file's first bytes in another guise.
  // size >= 8 here, so size - 8 cannot wrap.
  S3D_CHECK(header_len <= size - 8, what,
            ": not a safetensors file (the header length in its first 8 bytes is larger than "
            "the file, ",
            size, " bytes)");
  // Nor here: the length is only known to fit the file.
  S3D_CHECK(header_len <= kMaxHeaderBytes, what,
            ": the header length in its first 8 bytes is larger than the limit of ",
            kMaxHeaderBytes, " bytes");
  S3D_CHECK(header_len <= max_header_bytes, what,
            ": the header length in its first 8 bytes is more than ", max_header_bytes,
            " bytes, all that ", expected, " can need; refused before reading it");
  return header_len;
}

// The JSON header that follows the length: a JSON object, with nothing before its '{'.
Json read_header(const InputFile& file, uint64_t header_len, const std::string& what) {
  std::string header(static_cast<size_t>(header_len), '\0');
  file.read_exact(header.data(), header_len, 8);
  // nlohmann would silently skip a UTF-8 byte-order mark; requiring '{' as the first
  // non-blank byte leaves no room for anything (a polyglot's second header) before it.
  size_t first = header.find_first_not_of(" \t\r\n");
  // Named without the byte itself: the file may be anything.
  S3D_CHECK(first != std::string::npos && header[first] == '{', what,
            ": not a safetensors file (its header does not start with '{'",
            first == std::string::npos          ? ": it is only white space"
            : header.compare(first, 3, "\xEF\xBB\xBF") == 0 ? ": it starts with a UTF-8 byte-order mark"
                                                : "",
            ")");
  Json root = parse_json(header, what + " header");
  S3D_CHECK(root.is_object(), what, ": header is not a JSON object");
  return root;
}

// The header's items: the __metadata__ strings, and one entry per tensor, in the header's
// order.
void parse_header_items(const Json& root, const std::string& what,
                        std::vector<TensorEntry>& entries,
                        std::map<std::string, std::string>& metadata) {
  // Duplicate names cannot reach here (parse_json rejects duplicate keys), but the check is
  // cheap and keeps this reader correct on its own.
  std::set<std::string> names;
  for (const auto& [key, value] : root.items()) {
    if (key == kMetadataKey) {
      S3D_CHECK(value.is_object(), what, ": __metadata__ must map strings to strings, found ",
                excerpt(value));
      for (const auto& [mk, mv] : value.items()) {
        S3D_CHECK(mv.is_string(), what, ": __metadata__ value of '", mk,
                  "' must be a string, found ", excerpt(mv));
        metadata[mk] = mv.get<std::string>();
      }
      continue;
    }
    S3D_CHECK(names.insert(key).second, what, ": duplicate tensor name '", key, "'");
    entries.push_back(parse_entry(key, value, what));
  }
}

// Sorted by offset, the tensors must tile the data section exactly: the first starts at 0,
// each starts where the previous ended, and the last ends at the end of the file. Only
// comparisons, no sums, so offsets near 2^64 cannot wrap. Returns the bytes the tensors cover
// (the last one's end); the caller checks them against the data section's size.
uint64_t sort_and_check_tiling(std::vector<TensorEntry>& entries, const std::string& what) {
  std::stable_sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t covered = 0;
  const TensorEntry* prev = nullptr;
  for (const TensorEntry& e : entries) {
    if (e.begin != covered) {
      if (prev == nullptr)
        fail(what, ": tensor '", e.name, "' is the first in the data section but starts at offset ",
             e.begin, " instead of 0");
      if (e.begin > covered)
        fail(what, ": gap of ", e.begin - covered, " bytes between tensor '", prev->name,
             "' (data_offsets [", prev->begin, ", ", prev->end, "]) and tensor '", e.name,
             "' (data_offsets [", e.begin, ", ", e.end, "])");
      fail(what, ": tensor '", e.name, "' (data_offsets [", e.begin, ", ", e.end,
           "]) overlaps tensor '", prev->name, "' (data_offsets [", prev->begin, ", ", prev->end,
           "])");
    }
    covered = e.end;
    prev = &e;
  }
  return covered;
}

}  // namespace

const char* file_dtype(DType d) {
  switch (d) {
    case DType::BF16: return "BF16";
    case DType::F32: return "F32";
    case DType::I32: return "I32";
  }
  return "?";
}

void convert_floats(const void* source, const std::string& from, void* dst, DType to, size_t n) {
  const auto* src = static_cast<const uint8_t*>(source);
  auto u16 = [](const uint8_t* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return h;
  };
  if (from == "F32") {
    convert_with(src, 4, dst, to, n, [](const uint8_t* p) {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    });
  } else if (from == "BF16") {
    convert_with(src, 2, dst, to, n, [&](const uint8_t* p) { return bf16_to_float(u16(p)); });
  } else {
    convert_with(src, 2, dst, to, n, [&](const uint8_t* p) { return half_to_float(u16(p)); });
  }
}

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  return open(path, "safetensors file " + path);
}

SafetensorsFile SafetensorsFile::open(const std::string& path, const std::string& what) {
  return open(path, what, kMaxHeaderBytes, "");
}

SafetensorsFile SafetensorsFile::open(const std::string& path, const std::string& what,
                                      uint64_t max_header_bytes, const std::string& expected) {
  InputFile file(path, what);
  const uint64_t size = file.size();
  const uint64_t header_len = read_header_length(file, size, what, max_header_bytes, expected);
  const Json root = read_header(file, header_len, what);

  SafetensorsFile f;
  f.path_ = path;
  f.what_ = what;
  f.data_start_ = 8 + header_len;
  parse_header_items(root, what, f.entries_, f.metadata_);
  const uint64_t covered = sort_and_check_tiling(f.entries_, what);
  f.index_.reserve(f.entries_.size());
  for (size_t i = 0; i < f.entries_.size(); ++i) f.index_.emplace(f.entries_[i].name, i);
  const uint64_t data_bytes = size - f.data_start_;
  S3D_CHECK(covered <= data_bytes, what, ": truncated: the tensors need ", covered,
            " bytes of data but the file holds ", data_bytes, " after the header");
  S3D_CHECK(covered == data_bytes, what, ": ", data_bytes - covered,
            " trailing bytes after the last tensor (the tensors cover ", covered, " of ",
            data_bytes, " data bytes)");
  return f;
}

void SafetensorsFile::check_tensor_bytes(uint64_t max_bytes, const std::string& expected) const {
  for (const TensorEntry& e : entries_)
    S3D_CHECK(e.end - e.begin <= max_bytes, what_, ": tensor '", e.name, "' (", e.dtype, " ",
              shape_str(e.shape), ") is ", e.end - e.begin, " bytes, more than the ", max_bytes,
              " bytes ", expected, " may hold in one tensor; refused before reading it");
}

const TensorEntry* SafetensorsFile::find(const std::string& name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &entries_[it->second];
}

Tensor SafetensorsFile::load(const std::string& name, DType as) const {
  const TensorEntry* e = find(name);
  S3D_CHECK(e != nullptr, what_, ": has no tensor '", name, "'");
  const bool is_float = e->dtype == "BF16" || e->dtype == "F16" || e->dtype == "F32";
  const bool is_int = e->dtype == "I32";
  S3D_CHECK(is_float || is_int, what_, ": tensor '", name, "' has dtype ", e->dtype,
            "; sparse3d loads BF16, F16 and F32 (as bf16 or f32) and I32 (as i32)");
  S3D_CHECK(is_int == (as == DType::I32), what_, ": tensor '", name, "' has dtype ", e->dtype,
            " and cannot be loaded as ", dtype_name(as),
            " (I32 loads only as i32, floats only as bf16 or f32)");

  // open() checked that entry sizes fit the file, so this allocation is bounded by it.
  Tensor out = Tensor::empty(e->shape, as, Device::CPU);
  const uint64_t bytes = e->end - e->begin;
  if (bytes == 0) return out;
  InputFile file(path_, what_);
  S3D_CHECK(file.size() >= data_start_ + e->end, what_, ": the file shrank to ", file.size(),
            " bytes since it was opened");
  const uint64_t offset = data_start_ + e->begin;
  if (e->dtype == file_dtype(as)) {
    file.read_exact(out.data(), bytes, offset);
    return out;
  }
  // Conversions go through a bounded buffer so that a large tensor is still read once.
  const uint64_t in_size = e->dtype == "F32" ? 4 : 2;
  const uint64_t chunk_elems = (4ull << 20) / in_size;
  std::vector<uint8_t> buf(static_cast<size_t>(std::min(bytes, chunk_elems * in_size)));
  const uint64_t total = bytes / in_size;
  auto* dst = static_cast<uint8_t*>(out.data());
  for (uint64_t done = 0; done < total; done += chunk_elems) {
    uint64_t n = std::min(chunk_elems, total - done);
    file.read_exact(buf.data(), n * in_size, offset + done * in_size);
    convert_floats(buf.data(), e->dtype, dst + done * dtype_size(as), as, static_cast<size_t>(n));
  }
  return out;
}

void SafetensorsFile::read_bytes(const std::string& name, uint64_t begin, uint64_t bytes,
                                 void* dst) const {
  const TensorEntry* e = find(name);
  S3D_CHECK(e != nullptr, what_, ": has no tensor '", name, "'");
  const uint64_t size = e->end - e->begin;
  S3D_CHECK(begin <= size && bytes <= size - begin, what_, ": bytes [", begin, ", +", bytes,
            ") are outside tensor '", name, "' (", size, " bytes)");
  if (bytes == 0) return;
  InputFile file(path_, what_);
  S3D_CHECK(file.size() >= data_start_ + e->end, what_, ": the file shrank to ", file.size(),
            " bytes since it was opened");
  file.read_exact(dst, bytes, data_start_ + e->begin + begin);
}

void write_safetensors(const std::string& path,
                       const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  const std::string what = "writing " + path;
  // ordered_json lists the tensors in the header in their data order.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    auto& m = header[kMetadataKey] = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
  }
  // Data order: the caller's, except that 4-byte dtypes go before 2-byte ones (a stable
  // sort), so that every tensor starts aligned to its dtype size as readers require, even
  // after a bf16 tensor with an odd element count.
  std::vector<size_t> order(tensors.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  for (const auto& [name, t] : tensors)
    S3D_CHECK(t.defined(), what, ": tensor '", name, "' is undefined");
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return dtype_size(tensors[a].second.dtype()) > dtype_size(tensors[b].second.dtype());
  });
  std::vector<Tensor> host;
  uint64_t offset = 0;
  for (size_t index : order) {
    const auto& [name, t] = tensors[index];
    S3D_CHECK(name != kMetadataKey, what, ": a tensor cannot be named ", kMetadataKey);
    S3D_CHECK(!header.contains(name), what, ": duplicate tensor name '", name, "'");
    host.push_back(t.device() == Device::CPU ? t : t.to(Device::CPU));
    uint64_t end = offset + t.nbytes();
    header[name] = {{"dtype", file_dtype(t.dtype())},
                    {"shape", t.shape()},
                    {"data_offsets", {offset, end}}};
    offset = end;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::ordered_json::exception& e) {
    fail(what, ": cannot encode the header (", e.what(), ")");
  }
  // Spaces are valid JSON padding: they put the data section on an 8-byte boundary so that
  // a reader that maps the file sees every tensor aligned.
  text.append((8 - (8 + text.size()) % 8) % 8, ' ');
  S3D_CHECK(text.size() <= kMaxHeaderBytes, what, ": header of ", text.size(),
            " bytes exceeds the ", kMaxHeaderBytes, "-byte limit readers enforce");

  // Written to a temporary file, fsynced and renamed (io/atomic_file.h): a reader never sees
  // a half-written file, and a failure leaves none behind.
  AtomicFile out(path);
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(uint64_t(text.size()) >> (8 * i));
  out.write(len, 8);
  out.write(text.data(), text.size());
  for (const Tensor& t : host)
    if (t.nbytes() > 0) out.write(t.data(), t.nbytes());
  out.commit();
}

}  // namespace s3d::io
