#include "model/checkpoint.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <utility>
#include <fstream>
#include <sstream>

#include "core/bf16.h"
#include "core/cuda_util.h"
#include "core/error.h"
#include "core/fault.h"
#include "core/hash.h"
#include "core/rng.h"
#include "io/atomic_file.h"
#include "io/safetensors.h"
#include "model/trunk/weights.h"

namespace s3d::model {
namespace {

std::string safetensors_path_for(const std::string& json_path) {
  std::filesystem::path p(json_path);
  S3D_CHECK(p.extension() == ".json", "checkpoint ", json_path,
            ": expected the NAME.json config path (NAME.safetensors beside it)");
  return p.replace_extension(".safetensors").string();
}

uint64_t fnv1a(const void* data, size_t n, uint64_t h) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

uint64_t name_seed(uint64_t seed, const std::string& name) {
  return splitmix64(fnv1a(name.data(), name.size(), 0xcbf29ce484222325ull) ^ seed);
}

// A model with a NaN or infinite weight cannot give a finite latent: refused at load, by name.
std::string non_finite_message(const std::string& what, const std::string& name, const Tensor& t,
                               int64_t at) {
  const float v = t.dtype() == DType::BF16
                      ? bf16_to_float(static_cast<const uint16_t*>(t.data())[at])
                      : static_cast<const float*>(t.data())[at];
  return cat(what, ": tensor ", name, " has a non-finite value (", v, ") at element ", at,
             "; a model with NaN or infinite weights cannot give a finite latent");
}

// Every tensor of `specs`, read and converted on all cores (a released checkpoint is
// gigabytes: its start-up is mostly this). The first failure is rethrown here.
// Each tensor is hashed by the thread that read it, while its bytes are still close.
std::vector<Tensor> read_tensors(const io::SafetensorsFile& file, const std::vector<ParamSpec>& specs,
                                 std::vector<uint64_t>& hashes) {
  std::vector<Tensor> host(specs.size());
  hashes.assign(specs.size(), 0);
  std::string failure;
#pragma omp parallel for schedule(dynamic)
  for (size_t i = 0; i < specs.size(); ++i) {
    try {
      host[i] = file.load(specs[i].name, specs[i].runtime_dtype);
      const int64_t bad = host[i].first_non_finite();
      if (bad >= 0) fail(non_finite_message("checkpoint " + file.path(), specs[i].name, host[i], bad));
      hashes[i] = content_hash(host[i].data(), host[i].nbytes());
    } catch (const std::exception& e) {
#pragma omp critical
      if (failure.empty()) failure = e.what();
    }
  }
  if (!failure.empty()) fail(failure);
  return host;
}

// Strict key, shape and dtype check before any tensor is read: one error, on one line, lists
// the missing, unexpected and mis-shaped tensors (the first kListedProblems, then how many more).
constexpr int kListedProblems = 30;

void check_entries(const std::vector<ParamSpec>& specs, const std::vector<io::TensorEntry>& entries,
                   const std::string& what, const std::string& against) {
  std::map<std::string, const io::TensorEntry*> found;
  for (const auto& e : entries) found[e.name] = &e;
  std::map<std::string, const ParamSpec*> expected;
  for (const auto& s : specs) expected[s.name] = &s;
  std::ostringstream problems;
  int n_problems = 0;
  bool first = true;
  auto sep = [&first]() { return std::exchange(first, false) ? " " : "; "; };
  for (const auto& s : specs) {
    auto it = found.find(s.name);
    const io::TensorEntry* e = it == found.end() ? nullptr : it->second;
    if (e == nullptr) {
      if (++n_problems <= kListedProblems)
        problems << sep() << "missing: " << s.name << " " << shape_str(s.shape);
    } else if (e->shape != s.shape) {
      if (++n_problems <= kListedProblems)
        problems << sep() << "wrong shape: " << s.name << " is " << shape_str(e->shape)
                 << ", the config needs " << shape_str(s.shape);
    } else if (e->dtype != "BF16" && e->dtype != "F16" && e->dtype != "F32") {
      if (++n_problems <= kListedProblems)
        problems << sep() << "wrong dtype: " << s.name << " is " << e->dtype
                 << ", expected BF16, F16 or F32";
    }
  }
  for (const auto& e : entries) {
    if (!expected.count(e.name)) {
      if (++n_problems <= kListedProblems)
        problems << sep() << "unexpected: " << e.name << " " << shape_str(e.shape);
    }
  }
  if (n_problems > kListedProblems)
    problems << sep() << "and " << n_problems - kListedProblems << " more";
  S3D_CHECK(n_problems == 0, what, against, " (", n_problems, " problem",
            n_problems == 1 ? "" : "s", "):", problems.str());
}

// The checkpoint's version: every tensor's name and content hash, in spec order.
uint64_t version_of(const std::vector<ParamSpec>& specs, const std::vector<uint64_t>& hashes) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < specs.size(); ++i) {
    h = content_hash(specs[i].name, h);
    h = content_hash(&hashes[i], sizeof hashes[i], h);
  }
  return h;
}

}  // namespace

Checkpoint load_checkpoint(const std::string& json_path, Device device) {
  return to_device(read_checkpoint(json_path), device);
}

namespace {

constexpr size_t kArenaAlign = 256;
constexpr size_t kStageBytes = size_t(64) << 20;

size_t aligned(size_t n) { return (n + kArenaAlign - 1) / kArenaAlign * kArenaAlign; }

// A host copy on all cores: one core's memcpy (~5 GB/s) would be slower than the upload.
void copy_parallel(void* dst, const void* src, size_t n) {
  constexpr size_t kPiece = size_t(1) << 20;
  const int64_t pieces = static_cast<int64_t>((n + kPiece - 1) / kPiece);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < pieces; ++i) {
    const size_t off = static_cast<size_t>(i) * kPiece;
    std::memcpy(static_cast<char*>(dst) + off, static_cast<const char*>(src) + off,
                std::min(kPiece, n - off));
  }
}

// Two pinned host buffers that take turns: one fills while the other's copy runs.
struct Staging {
  void* buf[2] = {nullptr, nullptr};
  cudaEvent_t done[2] = {nullptr, nullptr};
  int next = 0;
  Staging() {
    try {
      for (int i = 0; i < 2; ++i) {
        S3D_CHECK(!fault::hit(fault::Point::HostAlloc), "out of host memory: pinned staging "
                  "buffer ", i, " failed (injected fault)");
        S3D_CUDA_CHECK(cudaHostAlloc(&buf[i], kStageBytes, cudaHostAllocDefault));
        S3D_CUDA_CHECK(cudaEventCreateWithFlags(&done[i], cudaEventDisableTiming));
      }
    } catch (...) {
      release();  // a constructor that throws runs no destructor
      throw;
    }
  }
  ~Staging() { release(); }
  void release() {
    for (int i = 0; i < 2; ++i) {
      if (done[i]) cudaEventSynchronize(done[i]), cudaEventDestroy(done[i]);
      if (buf[i]) cudaFreeHost(buf[i]);
      done[i] = nullptr;
      buf[i] = nullptr;
    }
  }
  void upload(void* dst, const void* src, size_t n) {
    for (size_t off = 0; off < n; off += kStageBytes) {
      const size_t len = std::min(kStageBytes, n - off);
      S3D_CUDA_CHECK(cudaEventSynchronize(done[next]));
      copy_parallel(buf[next], static_cast<const char*>(src) + off, len);
      S3D_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(dst) + off, buf[next], len,
                                     cudaMemcpyHostToDevice, current_stream()));
      S3D_CUDA_CHECK(cudaEventRecord(done[next], current_stream()));
      next ^= 1;
    }
  }
};

}  // namespace

// One device allocation for every weight (hundreds of cudaMallocs and synchronised copies
// cost more than the bytes), filled through pinned staging buffers.
Checkpoint to_device(Checkpoint ck, Device device) {
  if (device == Device::CPU) {
    if (ck.borrowed) ck.borrowed_in_place = true;  // the caller's host tensors, as they are
    return ck;
  }
  if (ck.borrowed_in_place) return ck;
  // Borrowed host tensors stay the weights' home: uploaded from now and after each offload.
  if (ck.borrowed) ck.home = ck.tensors;
  size_t total = 0;
  for (const auto& [name, t] : ck.tensors) total += aligned(t.nbytes());
  ck.arena = Tensor::empty({static_cast<int64_t>(total / 2)}, DType::BF16, device);
  auto* base = static_cast<char*>(ck.arena.data());
  size_t offset = 0;
  {
    Staging staging;
    for (auto& [name, t] : ck.tensors) {
      staging.upload(base + offset, t.data(), t.nbytes());
      t = Tensor::borrow(base + offset, t.shape(), t.dtype(), device);
      offset += aligned(t.nbytes());
    }
  }
  synchronize();
  return ck;
}

void apply_weight_format(Checkpoint& ck, const ops::WeightFormat& format) {
  if (&format == &ops::plain_format()) return;
  S3D_CHECK(!ck.borrowed, ck.path, ": weight format ", format.name, " converts the weights; "
            "a borrowed checkpoint's tensors are the caller's");
  for (const LinearSpec& l : linear_specs(ck.config)) {
    const ops::WeightFormat& f = ops::format_for(format, l.dtype);
    if (&f == &ops::plain_format()) continue;
    const Tensor weight = ck.tensors.at(l.name + ".weight"), bias = ck.tensors.at(l.name + ".bias");
    S3D_CHECK(!weight.is_cuda() && !bias.is_cuda(), ck.path, ": weight format ", f.name,
              " converts host tensors; ", l.name, " is on the GPU");
    const std::vector<ops::FormatTensor> layout = f.layout(l.out, l.in, l.dtype);
    std::vector<Tensor> made = f.create(weight, bias);
    S3D_CHECK(made.size() == layout.size(), "weight format ", f.name, ": create made ",
              made.size(), " tensors for a layout of ", layout.size());
    ck.tensors.erase(l.name + ".weight");
    ck.tensors.erase(l.name + ".bias");
    for (size_t i = 0; i < layout.size(); ++i) {
      S3D_CHECK(made[i].shape() == layout[i].shape && made[i].dtype() == layout[i].dtype,
                "weight format ", f.name, ": ", l.name, layout[i].suffix, " was made ",
                made[i].describe(), ", its layout says ", dtype_name(layout[i].dtype), " ",
                shape_str(layout[i].shape));
      ck.tensors[l.name + layout[i].suffix] = std::move(made[i]);
    }
  }
  ck.format = &format;
  ck.version = content_hash(std::string(format.name), ck.version);
}

Checkpoint read_checkpoint(const std::string& json_path) {
  Checkpoint ck;
  ck.path = json_path;
  ck.config = read_config_file(json_path);
  const std::string st_path = safetensors_path_for(json_path);
  const std::vector<ParamSpec> specs = param_specs(ck.config);
  // A header entry is some 150 bytes (name, dtype, shape, offsets); 1 KiB each and 1 MiB of
  // metadata is generous, and refuses a 100 MB header before it is read and parsed (it cost
  // 0.9 GB and 5 s to find that its 130,000 tensors do not match a 40-tensor config).
  const uint64_t max_header = (uint64_t{1} << 20) + 1024 * static_cast<uint64_t>(specs.size());
  io::SafetensorsFile file = io::SafetensorsFile::open(
      st_path, "safetensors file " + st_path, max_header,
      cat("a checkpoint of its config (", specs.size(), " tensors)"));

  check_entries(specs, file.entries(), "checkpoint " + st_path, " does not match its config " + json_path);

  std::vector<uint64_t> hashes;
  const std::vector<Tensor> host = read_tensors(file, specs, hashes);
  for (size_t i = 0; i < specs.size(); ++i) ck.tensors[specs[i].name] = host[i];
  ck.version = version_of(specs, hashes);
  return ck;
}

namespace {

// The start of a checkpoint held in memory: named `what`, its config parsed from the text.
Checkpoint with_config(const std::string& config_json, const std::string& what) {
  Checkpoint ck;
  ck.path = what;
  ck.config = config_from_json(io::parse_json(config_json, "config of " + what), "config of " + what);
  return ck;
}

}  // namespace

Checkpoint checkpoint_from_memory(const std::string& config_json, const std::string& what,
                                  const std::vector<TensorBytes>& tensors) {
  Checkpoint ck = with_config(config_json, what);
  const std::vector<ParamSpec> specs = param_specs(ck.config);
  std::vector<io::TensorEntry> entries;
  std::map<std::string, const TensorBytes*> by_name;
  for (const auto& t : tensors) {
    S3D_CHECK(by_name.emplace(t.name, &t).second, what, ": tensor ", t.name, " is given twice");
    entries.push_back(io::TensorEntry{t.name, t.dtype, t.shape, 0, 0});
  }
  check_entries(specs, entries, what, " does not match its config");
  std::vector<uint64_t> hashes(specs.size(), 0);
  std::vector<Tensor> host(specs.size());
  std::vector<const TensorBytes*> source(specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    host[i] = Tensor::empty(specs[i].shape, specs[i].runtime_dtype, Device::CPU);
    source[i] = by_name.at(specs[i].name);
    S3D_CHECK(source[i]->data != nullptr, what, ": tensor ", specs[i].name, " has no data");
  }
  std::vector<int64_t> nonfinite(specs.size(), -1);
  // Conversion, hashing and the finite check on all cores (nothing in the loop throws).
#pragma omp parallel for schedule(dynamic)
  for (size_t i = 0; i < specs.size(); ++i) {
    const TensorBytes& src = *source[i];
    io::convert_floats(src.data, src.dtype, host[i].data(), specs[i].runtime_dtype,
                       static_cast<size_t>(shape_numel(specs[i].shape)));
    hashes[i] = content_hash(host[i].data(), host[i].nbytes());
    nonfinite[i] = host[i].first_non_finite();
  }
  for (size_t i = 0; i < specs.size(); ++i)
    S3D_CHECK(nonfinite[i] < 0, non_finite_message(what, specs[i].name, host[i], nonfinite[i]));
  for (size_t i = 0; i < specs.size(); ++i) ck.tensors[specs[i].name] = host[i];
  ck.version = version_of(specs, hashes);
  return ck;
}

std::string borrow_refusal(const ModelConfig& config, const std::vector<BorrowedTensor>& tensors) {
  std::map<std::string, DType> runtime;
  for (const ParamSpec& s : param_specs(config)) runtime.emplace(s.name, s.runtime_dtype);
  for (const BorrowedTensor& t : tensors) {
    auto it = runtime.find(t.name);
    if (it == runtime.end()) continue;  // checkpoint_borrowed names it as unexpected
    if (t.view.dtype() != it->second)
      return cat("tensor ", t.name, " is ", dtype_name(t.view.dtype()), ", its run-time dtype is ",
                 dtype_name(it->second), " (a conversion needs a copy)");
  }
  return "";
}

Checkpoint checkpoint_borrowed(const std::string& config_json, const std::string& what,
                               const std::vector<BorrowedTensor>& tensors,
                               std::shared_ptr<void> keep_alive) {
  Checkpoint ck = with_config(config_json, what);
  const std::vector<ParamSpec> specs = param_specs(ck.config);
  std::vector<io::TensorEntry> entries;
  std::map<std::string, const Tensor*> by_name;
  bool on_device = false, on_host = false;
  for (const auto& t : tensors) {
    S3D_CHECK(by_name.emplace(t.name, &t.view).second, what, ": tensor ", t.name, " is given twice");
    entries.push_back(io::TensorEntry{t.name, io::file_dtype(t.view.dtype()), t.view.shape(), 0, 0});
    (t.view.is_cuda() ? on_device : on_host) = true;
  }
  check_entries(specs, entries, what, " does not match its config");
  S3D_CHECK(!(on_device && on_host), what, ": borrowed tensors must all be on the host or all "
            "on the engine's device, not both");
  const std::string refusal = borrow_refusal(ck.config, tensors);
  S3D_CHECK(refusal.empty(), what, ": cannot borrow the weights: ", refusal);
  std::vector<const Tensor*> source(specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    source[i] = by_name.at(specs[i].name);
    S3D_CHECK(source[i]->data() != nullptr || source[i]->nbytes() == 0, what, ": tensor ",
              specs[i].name, " has no data");
  }
  std::vector<uint64_t> hashes(specs.size(), 0);
  std::vector<int64_t> nonfinite(specs.size(), -1);
  // Hash and finite check: host tensors where they are, on all cores; device tensors
  // through one host buffer of at most kBatchBytes, a batch of whole tensors at a time.
  auto check_range = [&](size_t lo, size_t hi, const std::vector<Tensor>& host) {
#pragma omp parallel for schedule(dynamic)
    for (size_t i = lo; i < hi; ++i) {
      const Tensor& h = host[i - lo];
      hashes[i] = content_hash(h.data(), h.nbytes());
      nonfinite[i] = h.first_non_finite();
    }
  };
  if (!on_device) {
    std::vector<Tensor> host;
    for (const Tensor* t : source) host.push_back(*t);
    check_range(0, specs.size(), host);
    for (size_t i = 0; i < specs.size(); ++i)
      S3D_CHECK(nonfinite[i] < 0, non_finite_message(what, specs[i].name, host[i], nonfinite[i]));
  } else {
    constexpr size_t kBatchBytes = size_t(256) << 20;
    size_t widest = 0;
    for (const Tensor* t : source) widest = std::max(widest, t->nbytes());
    std::vector<char> buffer(std::max(kBatchBytes, widest));
    for (size_t lo = 0; lo < specs.size();) {
      std::vector<Tensor> host;
      size_t used = 0, hi = lo;
      while (hi < specs.size() && (hi == lo || used + source[hi]->nbytes() <= buffer.size())) {
        const Tensor& t = *source[hi];
        if (t.nbytes() > 0)
          S3D_CUDA_CHECK(cudaMemcpy(buffer.data() + used, t.data(), t.nbytes(), cudaMemcpyDeviceToHost));
        host.push_back(Tensor::borrow(buffer.data() + used, t.shape(), t.dtype(), Device::CPU));
        used += t.nbytes();
        ++hi;
      }
      check_range(lo, hi, host);
      for (size_t i = lo; i < hi; ++i)
        if (nonfinite[i] >= 0)  // the message reads the value from the host copy, still here
          fail(non_finite_message(what, specs[i].name, host[i - lo], nonfinite[i]));
      lo = hi;
    }
  }
  for (size_t i = 0; i < specs.size(); ++i) ck.tensors[specs[i].name] = *source[i];
  ck.version = version_of(specs, hashes);
  ck.keep_alive = std::move(keep_alive);
  ck.borrowed = true;
  ck.borrowed_in_place = on_device;
  return ck;
}

void make_checkpoint(const ModelConfig& config, uint64_t seed, const std::string& out_prefix,
                     DType dtype) {
  S3D_CHECK(dtype == DType::BF16 || dtype == DType::F32,
            "make-checkpoint: dtype must be bf16 or f32, got ", dtype_name(dtype));
  // The file system's refusals (a file where a folder should be, a name too long, a
  // read-only mount) are the caller's bad path: an Error naming it, not a filesystem_error.
  std::filesystem::path prefix(out_prefix);
  std::error_code fs_error;
  const bool folder_existed =
      !prefix.has_parent_path() || std::filesystem::exists(prefix.parent_path(), fs_error);
  if (prefix.has_parent_path() && !folder_existed) {
    std::filesystem::create_directories(prefix.parent_path(), fs_error);
    S3D_CHECK(!fs_error, "make-checkpoint: cannot create the folder ",
              prefix.parent_path().string(), ": ", fs_error.message());
  }

  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const auto& s : param_specs(config)) {
    int64_t n = shape_numel(s.shape);
    std::vector<float> v(static_cast<size_t>(n));
    normal_fill(name_seed(seed, s.name), 0, static_cast<uint64_t>(n), v.data());
    for (float& x : v) x = s.init.mean + s.init.std * x;
    tensors.emplace_back(s.name, Tensor::from_floats(v, s.shape, dtype));
  }
  // Both files or neither: the .safetensors first, then the .json; a failure of the second
  // removes the first when this call created it.
  const std::string st = out_prefix + ".safetensors";
  const bool existed = std::filesystem::exists(st, fs_error);
  try {
    io::write_safetensors(st, tensors,
                          {{"format", "pt"}, {"generator", "sparse3d make-checkpoint"},
                           {"seed", std::to_string(seed)}});
    io::write_file_atomic(out_prefix + ".json", config_to_json(config).dump(2) + "\n");
  } catch (...) {
    std::error_code ec;
    if (!existed) std::filesystem::remove(st, ec);
    if (!folder_existed) std::filesystem::remove(prefix.parent_path(), ec);  // only if empty
    throw;
  }
}

}  // namespace s3d::model
