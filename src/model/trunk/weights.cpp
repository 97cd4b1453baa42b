#include "model/trunk/weights.h"

#include <cuda_runtime.h>

#include <cmath>
#include <cstring>
#include <functional>

#include "core/allocator.h"
#include "core/cuda_util.h"
#include "core/error.h"
#include "core/fault.h"

namespace s3d::model {
namespace {

// Synthetic weights follow the "scaled" initialisation of the original, except that the
// layers it zero-initialises (adaLN, out_layer, every bias) get small random values: with
// zeros every test would pass trivially, and the null-context row b_V W_O + b_O would vanish.
constexpr float kBiasStd = 0.02f;
constexpr float kGammaStd = 0.1f;  // RMSNorm gammas and norm2 weight: 1 + N(0, 0.1)

// Called once per tensor that is not a linear layer's, with its spec and its field; and once
// per linear layer with its spec, the initialisation of its weight and its field.
struct Visit {
  std::function<void(const ParamSpec&, Tensor& field)> tensor;
  std::function<void(const LinearSpec&, float weight_std, Linear& field)> linear;
};

struct Walk {
  const Visit& visit;

  void tensor(Tensor& field, std::string name, Shape shape, DType dt, float mean, float std) {
    visit.tensor(ParamSpec{std::move(name), std::move(shape), dt, Init{mean, std}}, field);
  }
  void linear(Linear& field, const std::string& name, int64_t out, int64_t in, DType dt,
              float std) {
    visit.linear(LinearSpec{name, out, in, dt}, std, field);
  }
};

// A linear layer's two checkpoint tensors.
void linear_params(const LinearSpec& l, float weight_std, std::vector<ParamSpec>& specs) {
  specs.push_back(ParamSpec{l.name + ".weight", {l.out, l.in}, l.dtype, Init{0.0f, weight_std}});
  specs.push_back(ParamSpec{l.name + ".bias", {l.out}, l.dtype, Init{0.0f, kBiasStd}});
}

// The tensor `name` of `tensors`, checked against the shape and dtype the config needs.
const Tensor& bound_tensor(const std::map<std::string, Tensor>& tensors, const std::string& name,
                           const Shape& shape, DType dtype) {
  auto it = tensors.find(name);
  S3D_CHECK(it != tensors.end(), "model: parameter ", name, " is not loaded");
  const Tensor& t = it->second;
  S3D_CHECK(t.shape() == shape && t.dtype() == dtype, "model: parameter ", name, " is ",
            t.describe(), ", the config needs ", dtype_name(dtype), " ", shape_str(shape));
  return t;
}

// Block i's parameters, named "blocks.<i>.<...>" as in the released state dict.
void walk_block(const ModelConfig& c, int i, BlockWeights& w, Walk& walk) {
  const int64_t C = c.model_channels, H = c.num_heads, D = c.head_dim();
  const int64_t hidden = c.mlp_hidden(), Cc = c.cond_channels;
  const float linear_std = static_cast<float>(std::sqrt(2.0 / (5.0 * C)));
  const float out_proj_std = static_cast<float>(1.0 / std::sqrt(5.0 * c.num_blocks * C));
  const float small_std = static_cast<float>(0.5 / std::sqrt(static_cast<double>(C)));
  const DType f32 = DType::F32, bf16 = DType::BF16;
  const std::string b = "blocks." + std::to_string(i);
  if (c.share_mod) {
    walk.tensor(w.modulation, b + ".modulation", {6 * C}, f32, 0.0f,
                static_cast<float>(1.0 / std::sqrt(double(C))));
  } else {
    walk.linear(w.adaLN_modulation, b + ".adaLN_modulation.1", 6 * C, C, bf16, small_std);
  }
  // An attention's per-head RMSNorm gammas of Q and K, f32 [H, D].
  const auto qk_gammas = [&](auto& attn, const std::string& prefix) {
    walk.tensor(attn.q_rms_gamma, prefix + ".q_rms_norm.gamma", {H, D}, f32, 1.0f, kGammaStd);
    walk.tensor(attn.k_rms_gamma, prefix + ".k_rms_norm.gamma", {H, D}, f32, 1.0f, kGammaStd);
  };
  walk.linear(w.self_attn.to_qkv, b + ".self_attn.to_qkv", 3 * C, C, bf16, linear_std);
  if (c.qk_rms_norm) qk_gammas(w.self_attn, b + ".self_attn");
  walk.linear(w.self_attn.to_out, b + ".self_attn.to_out", C, C, bf16, out_proj_std);
  walk.tensor(w.norm2.weight, b + ".norm2.weight", {C}, f32, 1.0f, kGammaStd);
  walk.tensor(w.norm2.bias, b + ".norm2.bias", {C}, f32, 0.0f, kBiasStd);
  walk.linear(w.cross_attn.to_q, b + ".cross_attn.to_q", C, C, bf16, linear_std);
  walk.linear(w.cross_attn.to_kv, b + ".cross_attn.to_kv", 2 * C, Cc, bf16, linear_std);
  if (c.qk_rms_norm_cross) qk_gammas(w.cross_attn, b + ".cross_attn");
  walk.linear(w.cross_attn.to_out, b + ".cross_attn.to_out", C, C, bf16, out_proj_std);
  walk.linear(w.mlp.fc1, b + ".mlp.mlp.0", hidden, C, bf16, linear_std);
  walk.linear(w.mlp.fc2, b + ".mlp.mlp.2", C, hidden, bf16, out_proj_std);
}

// Every parameter of `c` in the checkpoint's order, each with the field of `w` it binds to
// (w.blocks is sized here).
void walk_parameters(const ModelConfig& c, TrunkWeights& w, const Visit& visit) {
  c.validate();
  const int64_t C = c.model_channels;
  const float small_std = static_cast<float>(0.5 / std::sqrt(static_cast<double>(C)));
  const DType f32 = DType::F32;
  Walk walk{visit};
  walk.linear(w.t_embedder_fc1, "t_embedder.mlp.0", C, 256, f32, 0.02f);
  walk.linear(w.t_embedder_fc2, "t_embedder.mlp.2", C, C, f32, 0.02f);
  if (c.share_mod) walk.linear(w.adaLN_modulation, "adaLN_modulation.1", 6 * C, C, f32, small_std);
  walk.linear(w.input_layer, "input_layer", C, c.in_channels, f32,
              static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.in_channels))));
  w.blocks.assign(static_cast<size_t>(c.num_blocks), BlockWeights{});
  for (int i = 0; i < c.num_blocks; ++i) walk_block(c, i, w.blocks[static_cast<size_t>(i)], walk);
  walk.linear(w.out_layer, "out_layer", c.out_channels, C, f32, small_std);
}

}  // namespace

std::vector<ParamSpec> param_specs(const ModelConfig& config) {
  std::vector<ParamSpec> specs;
  TrunkWeights unused;
  walk_parameters(config, unused,
                  Visit{[&](const ParamSpec& s, Tensor&) { specs.push_back(s); },
                        [&](const LinearSpec& l, float std, Linear&) {
                          linear_params(l, std, specs);
                        }});
  return specs;
}

std::vector<LinearSpec> linear_specs(const ModelConfig& config) {
  std::vector<LinearSpec> specs;
  TrunkWeights unused;
  walk_parameters(config, unused,
                  Visit{[](const ParamSpec&, Tensor&) {},
                        [&](const LinearSpec& l, float, Linear&) { specs.push_back(l); }});
  return specs;
}

int64_t parameter_count(const ModelConfig& config) {
  int64_t n = 0;
  for (const auto& s : param_specs(config)) n += shape_numel(s.shape);
  return n;
}

TrunkWeights bind_weights(const ModelConfig& config, const std::map<std::string, Tensor>& tensors,
                          const ops::WeightFormat& format) {
  TrunkWeights w;
  const auto tensor = [&](const ParamSpec& s, Tensor& field) {
    field = bound_tensor(tensors, s.name, s.shape, s.runtime_dtype);
  };
  const auto linear = [&](const LinearSpec& l, float, Linear& field) {
    const ops::WeightFormat& f = ops::format_for(format, l.dtype);
    field.format = &f;
    for (const ops::FormatTensor& t : f.layout(l.out, l.in, l.dtype))
      field.*t.field = bound_tensor(tensors, l.name + t.suffix, t.shape, t.dtype);
  };
  walk_parameters(config, w, Visit{tensor, linear});
  return w;
}

namespace {

constexpr size_t kSlotAlign = 256;  // model/checkpoint.cpp's arena alignment

size_t aligned(size_t n) { return (n + kSlotAlign - 1) / kSlotAlign * kSlotAlign; }

// `p` rounded up to the slot alignment.
char* align_up(void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  return reinterpret_cast<char*>((a + kSlotAlign - 1) / kSlotAlign * kSlotAlign);
}

// A host buffer of `bytes`, the returned pointer aligned to kSlotAlign: page-locked through
// CUDA (page-aligned), or from the host allocator (64-byte aligned: one slot more, and the
// first aligned address in it).
std::shared_ptr<void> host_buffer(size_t bytes, bool pinned) {
  if (!pinned) {
    const size_t n = bytes + kSlotAlign;
    void* block = host_allocate(n);
    return std::shared_ptr<void>(align_up(block), [block, n](void*) { host_release(block, n); });
  }
  const size_t n = bytes == 0 ? 1 : bytes;
  S3D_CHECK(!fault::hit(fault::Point::HostAlloc), "out of host memory: the pinned copy of the "
            "weights (", bytes, " bytes) failed (injected fault)");
  void* p = nullptr;
  const cudaError_t err = cudaHostAlloc(&p, n, cudaHostAllocDefault);
  if (err != cudaSuccess) {
    cudaGetLastError();
    fail("out of host memory: the pinned copy of the weights (", bytes, " bytes) failed (",
         cudaGetErrorString(err), ")");
  }
  return std::shared_ptr<void>(p, [](void* q) { cudaFreeHost(q); });
}

// A synchronous copy of `n` bytes between any two of host, pinned and device memory (the
// current stream on a GPU, so that it orders after the engine's work).
void copy_bytes(void* dst, const void* src, size_t n, bool gpu) {
  if (n == 0) return;
  if (!gpu) {
    std::memcpy(dst, src, n);
    return;
  }
  S3D_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDefault, current_stream()));
}

}  // namespace

HostWeights::HostWeights(const std::map<std::string, Tensor>& tensors, bool pinned) {
  bool gpu = false;
  for (const auto& [name, t] : tensors) {
    slots_[name] = Slot{bytes_, t.shape(), t.dtype()};
    bytes_ += aligned(t.nbytes());
    gpu = gpu || t.is_cuda();
  }
  buffer_ = host_buffer(bytes_, pinned);
  auto* base = static_cast<char*>(buffer_.get());
  for (const auto& [name, t] : tensors) {
    const size_t offset = slots_.at(name).offset;
    copy_bytes(base + offset, t.data(), t.nbytes(), gpu);
    // The alignment gap too: every byte a reload copies is defined.
    std::memset(base + offset + t.nbytes(), 0, aligned(t.nbytes()) - t.nbytes());
  }
  if (gpu) synchronize();
}

HostWeights HostWeights::borrowed(const std::map<std::string, Tensor>& tensors,
                                  std::shared_ptr<void> keep_alive, bool gpu) {
  HostWeights w;
  std::vector<void*> registered;
  // Registration takes page-aligned ranges; two tensors in one page cannot both be
  // registered (the second fails and is staged), which only small tensors do.
  for (const auto& [name, t] : tensors) {
    S3D_CHECK(!t.is_cuda(), "model: the borrowed home of tensor ", name, " is on the GPU");
    w.slots_[name] = Slot{w.bytes_, t.shape(), t.dtype()};
    w.bytes_ += aligned(t.nbytes());
    w.sources_[name] = t.data();
    if (!gpu || t.nbytes() < (size_t(1) << 20)) continue;
    cudaPointerAttributes attributes{};
    if (cudaPointerGetAttributes(&attributes, t.data()) == cudaSuccess &&
        attributes.type == cudaMemoryTypeHost)
      continue;  // page-locked already (e.g. a pinned torch tensor)
    cudaGetLastError();
    if (cudaHostRegister(const_cast<void*>(t.data()), t.nbytes(), cudaHostRegisterPortable) ==
        cudaSuccess)
      registered.push_back(const_cast<void*>(t.data()));
    else
      cudaGetLastError();  // shares a page with another registration, or not allowed: staged
  }
  // Unregistered before the caller's memory can go: this holds `keep_alive` until then.
  w.keep_alive_ = std::shared_ptr<void>(
      nullptr, [keep = std::move(keep_alive), registered](void*) mutable {
        for (void* p : registered) cudaHostUnregister(p);
        keep.reset();
      });
  w.borrowed_ = true;
  return w;
}

std::map<std::string, Tensor> HostWeights::views_at(char* base, Device device) const {
  std::map<std::string, Tensor> out;
  for (const auto& [name, s] : slots_)
    out.emplace(name, Tensor::borrow(base + s.offset, s.shape, s.dtype, device));
  return out;
}

std::map<std::string, Tensor> HostWeights::host_views() const {
  if (!is_borrowed()) return views_at(static_cast<char*>(buffer_.get()), Device::CPU);
  std::map<std::string, Tensor> out;
  for (const auto& [name, s] : slots_)
    out.emplace(name, Tensor::borrow(const_cast<void*>(sources_.at(name)), s.shape, s.dtype,
                                     Device::CPU));
  return out;
}

std::pair<Tensor, std::map<std::string, Tensor>> HostWeights::upload(Device device) const {
  // One slot more than the tensors need, so that the first aligned address in it has room
  // (device blocks are aligned already; host tensors only to 64 bytes). bf16 elements:
  // bytes_ and the slot are multiples of the alignment, so even.
  Tensor arena =
      Tensor::empty({static_cast<int64_t>((bytes_ + kSlotAlign) / 2)}, DType::BF16, device);
  char* base = align_up(arena.data());
  const bool gpu = device == Device::CUDA;
  if (is_borrowed()) {
    for (const auto& [name, s] : slots_)
      copy_bytes(base + s.offset, sources_.at(name),
                 static_cast<size_t>(shape_numel(s.shape)) * dtype_size(s.dtype), gpu);
  } else {
    copy_bytes(base, buffer_.get(), bytes_, gpu);
  }
  if (gpu) synchronize();
  return {arena, views_at(base, device)};
}

}  // namespace s3d::model
