#include "apps/inputs_file.h"

#include <cmath>
#include <filesystem>
#include <vector>

#include "core/error.h"
#include "io/safetensors.h"
#include "payload/payload.h"

namespace s3d::apps {
namespace {

// Coordinates must lie below this (the engine's own bound: the released texture model is fed
// coordinates beyond its config's resolution, so the resolution is no bound).
constexpr int kMaxCoordinate = 1 << 16;

const char* const kKnown = "coords, cond, concat_cond, noise";

// The entry's dtype is one of `dtypes` ("F32", "BF16", "I32") and its rank is one of `ranks`.
void check_entry(const io::TensorEntry& e, const std::string& what,
                 const std::vector<std::string>& dtypes, const std::vector<size_t>& ranks,
                 const std::string& layouts) {
  bool dtype_ok = false;
  std::string list;
  for (const auto& d : dtypes) {
    dtype_ok = dtype_ok || e.dtype == d;
    list += (list.empty() ? "" : " or ") + d;
  }
  S3D_CHECK(dtype_ok, what, ": '", e.name, "' has dtype ", e.dtype, ", expected ", list);
  bool rank_ok = false;
  for (size_t r : ranks) rank_ok = rank_ok || e.shape.size() == r;
  S3D_CHECK(rank_ok, what, ": '", e.name, "' has shape ", shape_str(e.shape), " (rank ",
            e.shape.size(), "), expected ", layouts);
  for (int64_t d : e.shape)
    S3D_CHECK(d >= 1, what, ": '", e.name, "' has shape ", shape_str(e.shape),
              ", with an empty dimension");
}

// Every value finite; the first that is not is named by its index.
void check_finite(const Tensor& t, const std::string& what, const char* name) {
  const int64_t i = t.first_non_finite();
  if (i < 0) return;
  const float v = t.to_floats()[static_cast<size_t>(i)];
  std::string index;
  int64_t rest = i;
  for (int d = t.ndim() - 1; d >= 0; --d) {
    index = cat(rest % t.size(d), index.empty() ? "" : ", ", index);
    rest /= t.size(d);
  }
  fail(what, ": '", name, "' has ", std::isnan(v) ? "a NaN" : "an infinity", " at [", index, "]");
}

Tensor load_float(const io::SafetensorsFile& file, const std::string& name, bool keep_bf16) {
  const bool bf16 = file.find(name)->dtype == "BF16";
  return file.load(name, bf16 && keep_bf16 ? DType::BF16 : DType::F32);
}

}  // namespace

InputsFile read_inputs(const std::string& path) {
  const std::string what = "inputs " + path;
  // Four tensors and a little metadata: 1 MiB of header is plenty.
  auto file = io::SafetensorsFile::open(path, what, 1u << 20,
                                        "an inputs file (coords, cond, concat_cond, noise)");
  for (const auto& e : file.entries())
    S3D_CHECK(e.name == "coords" || e.name == "cond" || e.name == "concat_cond" ||
                  e.name == "noise",
              what, ": unexpected tensor '", e.name, "' (an inputs file holds ", kKnown, ")");
  file.check_tensor_bytes(kMaxInputsTensorBytes, "an inputs file");
  InputsFile in;
  in.path = path;
  in.name = std::filesystem::path(path).stem().string();
  S3D_CHECK(!in.name.empty() && in.name != "." && in.name != "..", what,
            ": the file name gives no output name");

  // Every header check first, then the loads: a bad file fails before any large read.
  const io::TensorEntry* cond_e = file.find("cond");
  S3D_CHECK(cond_e != nullptr, what, ": has no 'cond' tensor (the image condition, f32 or bf16 ",
            "[L, C] or [B, L, C])");
  check_entry(*cond_e, what, {"F32", "BF16"}, {2, 3}, "[L, C] or [B, L, C]");
  in.batch = cond_e->shape.size() == 3 ? static_cast<int>(cond_e->shape[0]) : 1;
  const io::TensorEntry* coords_e = file.find("coords");
  int64_t tokens = 0;
  if (coords_e != nullptr) {
    check_entry(*coords_e, what, {"I32"}, {2}, "[N, 4]");
    S3D_CHECK(coords_e->shape[1] == 4, what, ": 'coords' has shape ", shape_str(coords_e->shape),
              ", expected [N, 4] rows (batch, x, y, z)");
    tokens = coords_e->shape[0];
  }
  const io::TensorEntry* concat_e = file.find("concat_cond");
  if (concat_e != nullptr) {
    S3D_CHECK(coords_e != nullptr, what,
              ": has 'concat_cond' but no 'coords' (concat_cond is a texture model's per-token "
              "shape latent, [N, Cc] for the N coords rows)");
    check_entry(*concat_e, what, {"F32", "BF16"}, {2}, "[N, Cc]");
    S3D_CHECK(concat_e->shape[0] == tokens, what, ": 'concat_cond' has shape ",
              shape_str(concat_e->shape), ", expected [", tokens, ", Cc] (one row per coords row)");
  }
  const io::TensorEntry* noise_e = file.find("noise");
  if (noise_e != nullptr) {
    if (coords_e != nullptr) {
      check_entry(*noise_e, what, {"F32", "BF16"}, {2}, "[N, C_out] (one row per coords row)");
      S3D_CHECK(noise_e->shape[0] == tokens, what, ": 'noise' has shape ",
                shape_str(noise_e->shape), ", expected [", tokens,
                ", C_out] (one row per coords row)");
    } else {
      check_entry(*noise_e, what, {"F32", "BF16"}, {5},
                  "the volume [B, C_out, R, R, R] (no coords: the dense model)");
      const Shape& s = noise_e->shape;
      S3D_CHECK(s[0] == in.batch && s[2] == s[3] && s[3] == s[4], what, ": 'noise' has shape ",
                shape_str(s), ", expected the volume [", in.batch, ", C_out, R, R, R] (", in.batch,
                " asset(s), as cond says)");
    }
  }

  if (coords_e != nullptr) {
    in.coords = file.load("coords", DType::I32);
    payload::validate_packed_coords(
        in.coords, in.batch, kMaxCoordinate,
        cat(what, ": 'coords' (", in.batch, " asset(s), as cond ", shape_str(cond_e->shape),
            " says)"));
  }
  in.cond = load_float(file, "cond", true);
  check_finite(in.cond, what, "cond");
  if (in.cond.ndim() == 2) in.cond = in.cond.reshape({1, in.cond.size(0), in.cond.size(1)});
  if (concat_e != nullptr) {
    in.concat_cond = load_float(file, "concat_cond", false);
    check_finite(in.concat_cond, what, "concat_cond");
  }
  if (noise_e != nullptr) {
    in.noise = load_float(file, "noise", false);
    check_finite(in.noise, what, "noise");
  }
  return in;
}

void check_inputs(const InputsFile& in, const sparse3d::ModelInfo& m) {
  const std::string what = "inputs " + in.path;
  const bool dense = m.layout == "grid";  // the whole grid per asset: no coords
  if (dense) {
    S3D_CHECK(!in.coords.defined(), what, ": has 'coords', but ", m.checkpoint, " is a ",
              m.family, ", whose tokens are its whole ", m.resolution,
              "^3 grid: leave coords out (and give noise, if any, as the volume [B, ",
              m.out_channels, ", ", m.resolution, ", ", m.resolution, ", ", m.resolution, "])");
  } else {
    S3D_CHECK(in.coords.defined(), what, ": has no 'coords' tensor (i32 [N, 4] rows (batch, x, ",
              "y, z)), which a ", m.family, " (", m.checkpoint, ") needs");
  }
  S3D_CHECK(in.cond.size(2) == m.cond_channels, what, ": 'cond' has ", in.cond.size(2),
            " channels, but ", m.checkpoint, " expects ", m.cond_channels);
  const int concat = m.in_channels - m.out_channels;
  if (concat > 0) {
    S3D_CHECK(in.concat_cond.defined(), what, ": has no 'concat_cond' tensor, which ",
              m.checkpoint, " needs: [N, ", concat, "] (its ", m.in_channels,
              " input channels are ", m.out_channels, " latent + ", concat, " concat channels)");
    S3D_CHECK(in.concat_cond.size(1) == concat, what, ": 'concat_cond' has shape ",
              shape_str(in.concat_cond.shape()), ", but ", m.checkpoint, " expects [",
              in.concat_cond.size(0), ", ", concat, "]");
  } else {
    S3D_CHECK(!in.concat_cond.defined(), what, ": has 'concat_cond', but ", m.checkpoint,
              " takes none (", m.in_channels, " input channels = its ", m.out_channels,
              " latent channels)");
  }
  if (in.noise.defined()) {
    const Shape want = dense ? Shape{in.batch, m.out_channels, m.resolution, m.resolution,
                                     m.resolution}
                             : Shape{in.coords.size(0), m.out_channels};
    S3D_CHECK(in.noise.shape() == want, what, ": 'noise' has shape ", shape_str(in.noise.shape()),
              ", but ", m.checkpoint, " expects ", shape_str(want));
  }
}

}  // namespace s3d::apps
