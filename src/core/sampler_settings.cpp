// The sampler's settings (include/sparse3d/sampler_settings.h): their checks and presets,
// defined here, in the bottom layer, beside the rest of the vocabulary floor (flags.cpp,
// fallback.cpp), so that any layer including the header also links what it declares.
#include "sparse3d/sampler_settings.h"

#include <cmath>

#include "core/error.h"

namespace sparse3d {

void SamplerSettings::validate() const {
  // Every setting is bounded by what the original sampler means by it: t runs from 1 to 0, so
  // a guidance interval outside [0, 1] or reversed selects nothing it could mean; a negative
  // guidance strength extrapolates away from the condition. NaN fails every comparison, so
  // each check is written to pass only for a finite value in range.
  S3D_CHECK(steps >= 1 && steps <= kMaxSteps, "sampler: steps must be in [1, ", kMaxSteps,
            "], got ", steps);
  S3D_CHECK(std::isfinite(rescale_t) && rescale_t > 0,
            "sampler: rescale_t must be finite and > 0, got ", rescale_t);
  S3D_CHECK(std::isfinite(guidance) && guidance >= 0,
            "sampler: guidance strength must be finite and >= 0, got ", guidance);
  S3D_CHECK(std::isfinite(interval_lo) && std::isfinite(interval_hi) && interval_lo <= interval_hi,
            "sampler: guidance interval [", interval_lo, ", ", interval_hi, "] is not an interval");
  S3D_CHECK(interval_lo >= 0 && interval_hi <= 1, "sampler: guidance interval [", interval_lo,
            ", ", interval_hi, "] must lie within [0, 1] (t runs from 1 to 0)");
  S3D_CHECK(std::isfinite(guidance_rescale) && guidance_rescale >= 0 && guidance_rescale <= 1,
            "sampler: guidance rescale must be in [0, 1], got ", guidance_rescale);
  S3D_CHECK(sigma_min >= 0 && sigma_min < 1, "sampler: sigma_min must be in [0, 1), got ",
            sigma_min);
}

std::vector<std::string> SamplerSettings::preset_names() {
  return {"released", "released_sparse_structure", "protocol"};
}

SamplerSettings SamplerSettings::preset(const std::string& name) {
  if (name == "released") return released();
  if (name == "released_sparse_structure") return released_sparse_structure();
  if (name == "protocol") return protocol();
  throw Error("sampler preset must be \"released\", \"released_sparse_structure\" or "
              "\"protocol\", got \"" + name + "\"");
}

}  // namespace sparse3d
