#include "model/config.h"

#include <cmath>
#include <filesystem>

#include "core/error.h"
#include "model/family.h"

namespace s3d::model {
namespace {

// Largest channel count, block count, resolution, ... we accept: far above any real model,
// low enough that products of two sizes stay well inside 64 bits.
constexpr int64_t kMaxSize = 1 << 20;
constexpr double kMaxMlpRatio = 64.0;
// Blocks: TRELLIS.2's flow models have 30, the largest DiTs a few dozen. The parameter list
// and its checks are per block, so this bounds the work and memory spent on a config.
constexpr int64_t kMaxBlocks = 1024;
// Parameters: 2^36 (69 billion; 137 GB of bf16) is more than any GPU holds. Estimated from
// the config before anything is built, so a hostile config is refused in microseconds.
constexpr double kMaxParameters = 68719476736.0;

// The keys of the original classes' __init__ (every family's) that a released NAME.json may
// carry.
const std::vector<std::string> kArgsKeys = {
    "resolution", "in_channels", "model_channels", "cond_channels", "out_channels",
    "num_blocks", "num_heads", "num_head_channels", "mlp_ratio", "pe_mode", "rope_freq",
    "share_mod", "qk_rms_norm", "qk_rms_norm_cross", "initialization", "dtype",
    "use_checkpoint"};

int get_size(const io::Json& args, const std::string& key, const std::string& what) {
  return static_cast<int>(io::get_int(args, key, what, 1, kMaxSize));
}

std::string one_of(const io::Json& args, const std::string& key, const std::string& what,
                   const std::string& fallback, const std::vector<std::string>& allowed) {
  std::string v = io::get_string_or(args, key, what, fallback);
  std::string list;
  for (const auto& a : allowed) {
    if (v == a) return v;
    list += (list.empty() ? "\"" : ", \"") + a + "\"";
  }
  fail(what, ": '", key, "' must be one of ", list, ", found \"", v, "\"");
}

// num_heads and num_head_channels are Optional[int] in the original: null means absent.
bool present(const io::Json& args, const std::string& key) {
  return args.contains(key) && !args.at(key).is_null();
}

}  // namespace

void ModelConfig::validate() const {
  auto size_ok = [](const char* name, int64_t v) {
    S3D_CHECK(v >= 1 && v <= kMaxSize, "model config: ", name, " = ", v, " is outside [1, ",
              kMaxSize, "]");
  };
  size_ok("resolution", resolution);
  size_ok("in_channels", in_channels);
  size_ok("model_channels", model_channels);
  size_ok("cond_channels", cond_channels);
  size_ok("out_channels", out_channels);
  size_ok("num_blocks", num_blocks);
  size_ok("num_heads", num_heads);
  S3D_CHECK(model_channels % num_heads == 0, "model config: model_channels (", model_channels,
            ") must be divisible by num_heads (", num_heads, ")");
  // Q/K RMSNorm and the attention kernels work on (even, odd) pairs of a head.
  S3D_CHECK(head_dim() % 2 == 0, "model config: head dim model_channels / num_heads = ",
            head_dim(), " must be even");
  S3D_CHECK(std::isfinite(mlp_ratio) && mlp_ratio > 0 && mlp_ratio <= kMaxMlpRatio,
            "model config: mlp_ratio ", mlp_ratio, " is outside (0, ", kMaxMlpRatio, "]");
  S3D_CHECK(mlp_hidden() >= 1, "model config: MLP hidden size int(", model_channels, " * ",
            mlp_ratio, ") = ", mlp_hidden(), " must be at least 1");
  S3D_CHECK(pe_mode == "rope" || pe_mode == "ape", "model config: pe_mode must be \"rope\" or "
            "\"ape\", found \"", pe_mode, "\"");
  if (pe_mode == "rope") {
    // 3-D RoPE gives each axis head_dim / 2 / 3 frequencies.
    S3D_CHECK(head_dim() / 2 / 3 >= 1, "model config: RoPE needs head dim >= 6 (one frequency "
              "per axis), found ", head_dim());
    S3D_CHECK(std::isfinite(rope_freq0) && rope_freq0 > 0 && std::isfinite(rope_theta) &&
                  rope_theta > 0,
              "model config: rope_freq [", rope_freq0, ", ", rope_theta,
              "] must be two positive finite numbers");
  }
  S3D_CHECK(dtype == "bfloat16" || dtype == "float16" || dtype == "float32",
            "model config: dtype must be \"bfloat16\", \"float16\" or \"float32\", found \"",
            dtype, "\"");
  S3D_CHECK(num_blocks <= kMaxBlocks, "model config: num_blocks = ", num_blocks,
            " is more than ", kMaxBlocks);
  // An upper bound on the parameter count, in floating point (no overflow): per block the
  // attention projections (4 C^2 self, 2 C^2 + 2 C Cc cross), the MLP (2 C H), a modulation
  // (6 C^2 when not shared) and the norms and biases; around them embeddings and the output.
  const double c = model_channels, cc = cond_channels, h = mlp_hidden();
  const double per_block = 6 * c * c + 2 * c * cc + 2 * c * h + (share_mod ? 0 : 6 * c * c) + 32 * c + 2 * h;
  const double estimate = num_blocks * per_block + 6 * c * c + c * (in_channels + out_channels) +
                          512 * c + 2 * cc;
  S3D_CHECK(estimate <= kMaxParameters, "model config: about ", estimate, " parameters (",
            num_blocks, " blocks of ", model_channels, " channels) is more than the ",
            kMaxParameters, " any GPU holds");
  find_family(family).check_config(*this);
}

ModelConfig preset(const std::string& name) {
  for (const Family* f : families())
    for (const auto& [preset_name, config] : f->presets())
      if (preset_name == name) return config;
  std::string list;
  for (const auto& n : preset_names()) list += (list.empty() ? "" : ", ") + n;
  fail("unknown model preset '", name, "' (known presets: ", list, ")");
}

std::vector<std::string> preset_names() {
  std::vector<std::string> names;
  for (const Family* f : families())
    for (const auto& preset : f->presets()) names.push_back(preset.first);
  return names;
}

ModelConfig config_from_json(const io::Json& j, const std::string& what) {
  io::check_known_keys(j, {"name", "args"}, what);
  std::string name = io::get_string(j, "name", what);
  const Family* family = nullptr;
  std::string known;
  for (const Family* f : families()) {
    if (f->name() == name) family = f;
    known += (known.empty() ? "\"" : ", \"") + f->name() + "\"";
  }
  S3D_CHECK(family != nullptr, what, ": 'name' must be a model family (", known, "), found \"",
            name, "\"");
  S3D_CHECK(j.contains("args"), what, ": 'args' is missing");
  const io::Json& args = j.at("args");
  const std::string where = what + " args";
  io::check_known_keys(args, kArgsKeys, where);

  // Defaults for absent keys are those of the class's __init__, not the preset's (the
  // families share their keys and defaults).
  ModelConfig c;
  c.family = name;
  c.resolution = get_size(args, "resolution", where);
  c.in_channels = get_size(args, "in_channels", where);
  c.model_channels = get_size(args, "model_channels", where);
  c.cond_channels = get_size(args, "cond_channels", where);
  c.out_channels = get_size(args, "out_channels", where);
  c.num_blocks = get_size(args, "num_blocks", where);
  if (present(args, "num_heads")) {
    c.num_heads = get_size(args, "num_heads", where);
  } else {
    int head_channels = present(args, "num_head_channels")
                            ? get_size(args, "num_head_channels", where)
                            : 64;
    S3D_CHECK(c.model_channels % head_channels == 0, where, ": model_channels (",
              c.model_channels, ") must be divisible by num_head_channels (", head_channels,
              ") when num_heads is absent");
    c.num_heads = c.model_channels / head_channels;
  }
  c.mlp_ratio = io::get_number_or(args, "mlp_ratio", where, 0.0, kMaxMlpRatio, 4.0);
  c.pe_mode = one_of(args, "pe_mode", where, "ape", {"ape", "rope"});
  if (args.contains("rope_freq")) {
    const io::Json& rf = args.at("rope_freq");
    S3D_CHECK(rf.is_array() && rf.size() == 2, where,
              ": 'rope_freq' must be an array [f0, theta], found ",
              io::excerpt(rf));
    auto positive = [&](const io::Json& v, const char* role) {
      S3D_CHECK(v.is_number() && v.get<double>() > 0 && std::isfinite(v.get<double>()), where,
                ": 'rope_freq' ", role, " must be a positive number, found ",
                io::excerpt(v));
      return v.get<double>();
    };
    c.rope_freq0 = positive(rf[0], "f0 (first entry)");
    c.rope_theta = positive(rf[1], "theta (second entry)");
  }
  if (!args.contains("rope_freq") || !family->reads_rope_freq()) {
    // A family that ignores rope_freq still type-checks it (docs/DENSE_MODEL.md).
    c.rope_freq0 = 1.0;
    c.rope_theta = 10000.0;
  }
  c.share_mod = io::get_bool_or(args, "share_mod", where, false);
  c.qk_rms_norm = io::get_bool_or(args, "qk_rms_norm", where, false);
  c.qk_rms_norm_cross = io::get_bool_or(args, "qk_rms_norm_cross", where, false);
  c.initialization = io::get_string_or(args, "initialization", where, "vanilla");
  c.dtype = one_of(args, "dtype", where, "float32", {"bfloat16", "float16", "float32"});
  io::get_bool_or(args, "use_checkpoint", where, false);  // training only: type-checked, ignored
  try {
    c.validate();
  } catch (const Error& e) {
    fail(what, ": ", e.what());
  }
  return c;
}

io::Json config_to_json(const ModelConfig& c) {
  io::Json args = {
      {"resolution", c.resolution},
      {"in_channels", c.in_channels},
      {"model_channels", c.model_channels},
      {"cond_channels", c.cond_channels},
      {"out_channels", c.out_channels},
      {"num_blocks", c.num_blocks},
      {"num_heads", c.num_heads},
      {"mlp_ratio", c.mlp_ratio},
      {"pe_mode", c.pe_mode},
      {"share_mod", c.share_mod},
      {"qk_rms_norm", c.qk_rms_norm},
      {"qk_rms_norm_cross", c.qk_rms_norm_cross},
      {"initialization", c.initialization},
      {"dtype", c.dtype},
  };
  if (find_family(c.family).reads_rope_freq()) args["rope_freq"] = {c.rope_freq0, c.rope_theta};
  return {{"name", c.family}, {"args", args}};
}

ModelConfig read_config_file(const std::string& path) {
  // The weights file given where its config belongs is a mistake worth naming: read as JSON
  // it is a parse error at its first byte that says nothing of the cause.
  const std::string ext = std::filesystem::path(path).extension().string();
  S3D_CHECK(ext != ".safetensors", "checkpoint ", path, " is the weights file: give its config, ",
            std::filesystem::path(path).replace_extension(".json").string(),
            " (NAME.json, with NAME.safetensors beside it)");
  return config_from_json(io::read_json_file(path), "config " + path);
}

}  // namespace s3d::model
