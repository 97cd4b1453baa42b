// libFuzzer target: the safetensors reader, the tensor loads and conversions, and the
// payload asset checks on whatever the reader accepts. Only s3d::Error may escape a parser;
// anything else (a crash, a sanitizer report, another exception) is a finding.
#include <climits>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "io/safetensors.h"
#include "payload/payload.h"
#include "scratch.h"

namespace {

int dim_or(const s3d::io::TensorEntry* e, size_t i, int fallback) {
  if (e == nullptr || e->shape.size() <= i || e->shape[i] < 1 || e->shape[i] > INT_MAX)
    return fallback;
  return static_cast<int>(e->shape[i]);
}

void exercise(const std::string& path) {
  using namespace s3d;
  io::SafetensorsFile f = io::SafetensorsFile::open(path);
  for (const auto& e : f.entries()) {
    for (DType as : {DType::BF16, DType::F32, DType::I32}) {
      try {
        Tensor t = f.load(e.name, as);
        if (e.name == "coords" && as == DType::I32 && t.ndim() == 2 && t.size(1) == 4 &&
            t.size(0) > 0) {
          int last = t.data_as<int32_t>()[4 * (t.size(0) - 1)];
          payload::validate_packed_coords(t, last >= 0 && last < 1024 ? last + 1 : 1, 64, "fuzz");
        }
      } catch (const Error&) {
      }
    }
  }
  // Read it as a payload asset, with a manifest shaped after the file so that the checks
  // past the header ones (coords order, finiteness) are reached.
  payload::Manifest m;
  m.dir = s3d::fuzz::scratch_dir();
  m.grid = 64;
  m.cond_tokens = dim_or(f.find("cond"), 0, 1);
  m.cond_channels = dim_or(f.find("cond"), 1, 1);
  m.concat_channels = f.find("concat_cond") ? dim_or(f.find("concat_cond"), 1, 1) : 0;
  payload::ManifestEntry entry;
  entry.name = "fuzz";
  entry.file = "input.safetensors";
  entry.tokens = dim_or(f.find("coords"), 0, 1);
  payload::read_asset(m, entry);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = s3d::fuzz::write_input("input.safetensors", data, size);
  try {
    exercise(path);
  } catch (const s3d::Error&) {
  }
  return 0;
}
