// The fused-kernel flags of one forward (issue 5; execution_plan.h names them), carried by
// the Request so that the model code reads them where it picks between a fused op and the
// reference op chain. All off = pure_eager. A flag that is on but whose op does not support
// the shape at hand runs the reference chain and counts a fallback (contract/fallback.h).
#pragma once

namespace s3d::model {

class ExecutionPlan;

struct FusionFlags {
  bool qk_rmsnorm_rope_inplace = false;   // self-attn q/k RMSNorm + RoPE in place in QKV
  bool modulated_layernorm = false;       // LayerNorm + (1 + scale[b]) h + shift[b]
  bool gated_residual_add = false;        // x + gate[b] h
  bool qk_rmsnorm_cross_inplace = false;  // cross-attn q RMSNorm in place
  bool gelu_tanh = false;                 // the wide standalone GELU kernel
  bool gemm_gelu_epilogue = false;        // MLP fc1 with the cuBLASLt bias+GELU epilogue

  static FusionFlags from_plan(const ExecutionPlan& plan);
  bool any() const {
    return qk_rmsnorm_rope_inplace || modulated_layernorm || gated_residual_add ||
           qk_rmsnorm_cross_inplace || gelu_tanh || gemm_gelu_epilogue;
  }
};

}  // namespace s3d::model
