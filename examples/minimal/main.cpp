// The smallest program on the public API: load a checkpoint, denoise a few dozen voxels.
// Usage: minimal CHECKPOINT.json   (e.g. from `sparse3d make-checkpoint --preset tiny`)
#include <sparse3d/sparse3d.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

int main(int argc, char** argv) try {
  if (argc != 2) return std::fprintf(stderr, "usage: %s CHECKPOINT.json\n", argv[0]), 2;
  // Auto: the GPU where there is one, else the CPU backend.
  sparse3d::Engine engine(argv[1], {.device = sparse3d::DeviceChoice::Auto});
  const int64_t T = 48, L = 8, C = engine.model().cond_channels;
  std::vector<int32_t> coords;  // (batch 0, x, y, z) rows in order: a 4x4x3 block
  for (int32_t i = 0; i < T; ++i) coords.insert(coords.end(), {0, i / 12, i / 3 % 4, i % 3});
  std::vector<float> cond(L * C);
  std::mt19937 rng(1);
  for (std::normal_distribution<float> normal; float& v : cond) v = normal(rng);

  sparse3d::SampleRequest request;
  request.coords = {.data = coords.data(), .dtype = sparse3d::DType::I32, .shape = {T, 4}};
  request.cond = {.data = cond.data(), .dtype = sparse3d::DType::F32, .shape = {1, L, C}};
  request.seed = 1;
  request.sampler = sparse3d::SamplerSettings::released();
  request.sampler.steps = 2;
  const sparse3d::SampleResult result = engine.sample(request);
  const std::vector<int64_t>& shape = result.latent.view.shape;  // [T, out_channels]
  const std::vector<float> x = result.latent.to_floats();

  double sum = 0, abs_max = 0;
  for (float v : x) sum += v, abs_max = std::fmax(abs_max, std::fabs(v));
  std::printf("latent [%lld, %lld]: mean %.6f, abs-max %.6f\n", (long long)shape.at(0),
              (long long)shape.at(1), sum / double(x.size()), abs_max);
  return 0;
} catch (const sparse3d::Error& e) {
  std::fprintf(stderr, "minimal: error: %s\n", e.what());
  return 1;
}
