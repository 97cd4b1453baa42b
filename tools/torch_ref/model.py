"""PyTorch eager reference of TRELLIS.2's SLatFlowModel (docs/MODEL.md).

Written from the specification, rounding where the original rounds: the blocks run in
the checkpoint's compute dtype (bf16) with their Linear layers in that dtype, while the
input and output layers, the timestep embedder, the shared adaLN, the per-block
modulation offsets, norm2 and the RMSNorm gammas stay fp32. Norms, RMSNorm and RoPE
compute in fp32 and round back. Tokens are packed [T, ...] over B assets in batch
order; per-asset offsets, batch indices, RoPE phases and the "ape" embedding depend only
on the coordinates and are computed once per request (TokenLayout), never per layer.
"""
import math
from dataclasses import dataclass
from typing import List, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

_DTYPES = {
    "bf16": torch.bfloat16, "bfloat16": torch.bfloat16,
    "f16": torch.float16, "fp16": torch.float16, "float16": torch.float16,
    "f32": torch.float32, "fp32": torch.float32, "float32": torch.float32,
}

_DEFAULTS = dict(resolution=64, num_heads=None, num_head_channels=64, mlp_ratio=4.0,
                 pe_mode="ape", rope_freq=(1.0, 10000.0), dtype=None, use_checkpoint=False,
                 share_mod=False, initialization="vanilla", qk_rms_norm=False,
                 qk_rms_norm_cross=False)
_REQUIRED = ("in_channels", "model_channels", "cond_channels", "out_channels", "num_blocks")


@dataclass
class ModelConfig:
    in_channels: int
    model_channels: int
    cond_channels: int
    out_channels: int
    num_blocks: int
    num_heads: int
    mlp_ratio: float
    pe_mode: str
    rope_freq: tuple
    share_mod: bool
    qk_rms_norm: bool
    qk_rms_norm_cross: bool
    dtype: torch.dtype
    resolution: int = 64
    initialization: str = "scaled"

    @property
    def head_dim(self):
        return self.model_channels // self.num_heads

    @property
    def mlp_hidden(self):
        return int(self.model_channels * self.mlp_ratio)   # int() truncates, as the original

    @staticmethod
    def from_args(args, where="checkpoint config"):
        """From the "args" of NAME.json. The argument names are those of the original
        SLatFlowModel.__init__, which takes no others. A missing "dtype" means float32,
        the original's default (and the engine's); the released checkpoints say bf16."""
        unknown = set(args) - set(_DEFAULTS) - set(_REQUIRED)
        if unknown:
            raise ValueError(f"{where}: unknown args {sorted(unknown)}; known: "
                             f"{sorted(set(_DEFAULTS) | set(_REQUIRED))}")
        missing = [k for k in _REQUIRED if k not in args]
        if missing:
            raise ValueError(f"{where}: missing args {missing}")
        a = {**_DEFAULTS, **args}
        C = int(a["model_channels"])
        heads = a["num_heads"] or C // int(a["num_head_channels"])
        dtype_name = a["dtype"] or "float32"
        if dtype_name not in _DTYPES:
            raise ValueError(f"{where}: dtype {dtype_name!r} is not one of {sorted(_DTYPES)}")
        if a["pe_mode"] not in ("ape", "rope"):
            raise ValueError(f"{where}: pe_mode {a['pe_mode']!r} must be \"ape\" or \"rope\"")
        cfg = ModelConfig(
            in_channels=int(a["in_channels"]), model_channels=C,
            cond_channels=int(a["cond_channels"]), out_channels=int(a["out_channels"]),
            num_blocks=int(a["num_blocks"]), num_heads=int(heads),
            mlp_ratio=float(a["mlp_ratio"]), pe_mode=a["pe_mode"],
            rope_freq=(float(a["rope_freq"][0]), float(a["rope_freq"][1])),
            share_mod=bool(a["share_mod"]), qk_rms_norm=bool(a["qk_rms_norm"]),
            qk_rms_norm_cross=bool(a["qk_rms_norm_cross"]), dtype=_DTYPES[dtype_name],
            resolution=int(a["resolution"]), initialization=str(a["initialization"]))
        if C % cfg.num_heads:
            raise ValueError(f"{where}: model_channels ({C}) must be divisible by "
                             f"num_heads ({cfg.num_heads})")
        if cfg.head_dim % 2:
            raise ValueError(f"{where}: head dim ({cfg.head_dim}) must be even")
        if cfg.pe_mode == "rope" and cfg.head_dim // 2 // 3 == 0:
            raise ValueError(f"{where}: head dim ({cfg.head_dim}) too small for 3-D RoPE")
        return cfg


# ---------------------------------------------------------------------------------------
# Per-request token layout
# ---------------------------------------------------------------------------------------

@dataclass
class TokenLayout:
    """What the coordinates of one request determine, computed once (prepare_layout)."""
    batch_size: int
    offsets: List[int]              # B + 1 row offsets (host ints)
    batch_index: torch.Tensor       # long [T]: the asset of each token
    cu_seqlens: torch.Tensor        # int32 [B + 1] on the device (varlen attention)
    max_seqlen: int
    rope_phases: Optional[torch.Tensor]   # complex64 [T, D/2] (pe_mode "rope")
    ape: Optional[torch.Tensor]           # float32 [T, C] (pe_mode "ape")

    @property
    def num_tokens(self):
        return self.offsets[-1]


def rope_frequencies(head_dim, rope_freq=(1.0, 10000.0)):
    """omega_j = f0 / theta^(j / freq_dim), j < freq_dim = head_dim // 2 // 3, in fp32."""
    freq_dim = head_dim // 2 // 3
    j = torch.arange(freq_dim, dtype=torch.float32) / freq_dim
    return rope_freq[0] / (rope_freq[1] ** j)


def rope_phases(coords, head_dim, rope_freq=(1.0, 10000.0)):
    """Unit complex phases [T, head_dim/2]: [x*omega, y*omega, z*omega] then phase 0 up to
    head_dim/2. The products coord * omega are fp32 (int coords promote to float32) and
    cos/sin are taken in fp32, as torch.outer + torch.polar do in the original."""
    freqs = rope_frequencies(head_dim, rope_freq).to(coords.device)
    xyz = coords[:, 1:]
    angles = torch.outer(xyz.reshape(-1), freqs).reshape(xyz.shape[0], -1)   # [T, 3F]
    pad = head_dim // 2 - angles.shape[1]
    if pad:
        angles = torch.cat([angles, angles.new_zeros(angles.shape[0], pad)], dim=1)
    return torch.polar(torch.ones_like(angles), angles)


def apply_rope(x, phases):
    """Rotate head-dim pairs (2p, 2p+1) of x [T, H, D] by phases [T, D/2]: complex product
    in fp32 (complex64), rounded back to x's dtype."""
    xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    rotated = xc * phases.unsqueeze(-2)
    return torch.view_as_real(rotated).reshape(x.shape).to(x.dtype)


def ape_embedding(coords, channels):
    """Absolute sin/cos embedding [T, channels] (fp32): per axis [sin(c*w), cos(c*w)] with
    w_j = 1 / 10000^(j / F), F = channels // 3 // 2; axes x, y, z; zero-padded."""
    freq_dim = channels // 3 // 2
    freqs = 1.0 / (10000 ** (torch.arange(freq_dim, dtype=torch.float32) / freq_dim))
    xyz = coords[:, 1:]
    angles = torch.outer(xyz.reshape(-1), freqs.to(coords.device))          # [3T, F]
    emb = torch.cat([torch.sin(angles), torch.cos(angles)], dim=-1).reshape(xyz.shape[0], -1)
    pad = channels - emb.shape[1]
    if pad:
        emb = torch.cat([emb, emb.new_zeros(emb.shape[0], pad)], dim=1)
    return emb


# ---------------------------------------------------------------------------------------
# Layers
# ---------------------------------------------------------------------------------------

class HeadRMSNorm(nn.Module):
    """Per-head RMSNorm: F.normalize in fp32, * gamma[h, :], * sqrt(D), rounded back."""

    def __init__(self, heads, head_dim):
        super().__init__()
        self.gamma = nn.Parameter(torch.ones(heads, head_dim))
        self.scale = head_dim ** 0.5

    def forward(self, x):
        return (F.normalize(x.float(), dim=-1) * self.gamma * self.scale).to(x.dtype)


def attention(q, k, v, q_offsets, kv_offsets, mode, cu_q=None, cu_k=None, max_q=0, max_k=0):
    """Softmax attention, scale 1/sqrt(D), of each asset's queries to its own keys.
    q: [Tq, H, D]; k, v: [Tk, H, D]; asset b owns rows [offsets[b], offsets[b+1]).
    "loop": one scaled_dot_product_attention per asset; "varlen": one flash varlen call."""
    if mode == "varlen":
        from torch.nn.attention.varlen import varlen_attn
        return varlen_attn(q, k, v, cu_q, cu_k, max_q, max_k)
    out = torch.empty_like(q)
    for b in range(len(q_offsets) - 1):
        qs, qe = q_offsets[b], q_offsets[b + 1]
        ks, ke = kv_offsets[b], kv_offsets[b + 1]
        o = F.scaled_dot_product_attention(q[qs:qe].transpose(0, 1).unsqueeze(0),
                                           k[ks:ke].transpose(0, 1).unsqueeze(0),
                                           v[ks:ke].transpose(0, 1).unsqueeze(0))
        out[qs:qe] = o[0].transpose(0, 1)
    return out


def layer_norm32(x, eps, weight=None, bias=None):
    """TRELLIS.2's LayerNorm32: normalise in fp32, round back to x's dtype."""
    return F.layer_norm(x.float(), x.shape[-1:], weight, bias, eps).to(x.dtype)


class SelfAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        C, H, D = cfg.model_channels, cfg.num_heads, cfg.head_dim
        self.heads, self.head_dim = H, D
        self.to_qkv = nn.Linear(C, 3 * C)
        if cfg.qk_rms_norm:
            self.q_rms_norm = HeadRMSNorm(H, D)
            self.k_rms_norm = HeadRMSNorm(H, D)
        self.to_out = nn.Linear(C, C)
        self.qk_rms_norm = cfg.qk_rms_norm
        self.use_rope = cfg.pe_mode == "rope"

    def forward(self, h, layout, attn_mode):
        T = h.shape[0]
        qkv = self.to_qkv(h).view(T, 3, self.heads, self.head_dim)   # channel s*C + h*D + d
        if self.qk_rms_norm or self.use_rope:
            q, k, v = qkv.unbind(1)
            if self.qk_rms_norm:      # rounds to bf16 here, then RoPE rounds again
                q, k = self.q_rms_norm(q), self.k_rms_norm(k)
            if self.use_rope:
                q, k = apply_rope(q, layout.rope_phases), apply_rope(k, layout.rope_phases)
            qkv = torch.stack([q, k, v], dim=1)
        q, k, v = qkv.unbind(1)
        out = attention(q, k, v, layout.offsets, layout.offsets, attn_mode,
                        layout.cu_seqlens, layout.cu_seqlens, layout.max_seqlen,
                        layout.max_seqlen)
        return self.to_out(out.reshape(T, -1))


class CrossAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        C, H, D = cfg.model_channels, cfg.num_heads, cfg.head_dim
        self.heads, self.head_dim = H, D
        self.to_q = nn.Linear(C, C)
        self.to_kv = nn.Linear(cfg.cond_channels, 2 * C)
        if cfg.qk_rms_norm_cross:
            self.q_rms_norm = HeadRMSNorm(H, D)
            self.k_rms_norm = HeadRMSNorm(H, D)
        self.to_out = nn.Linear(C, C)
        self.qk_rms_norm = cfg.qk_rms_norm_cross

    def forward(self, h, context, layout, attn_mode):
        T = h.shape[0]
        B, L, _ = context.shape
        q = self.to_q(h).view(T, self.heads, self.head_dim)
        kv = self.to_kv(context).view(B, L, 2, self.heads, self.head_dim)
        k, v = kv.unbind(2)
        if self.qk_rms_norm:
            q, k = self.q_rms_norm(q), self.k_rms_norm(k)
        k = k.reshape(B * L, self.heads, self.head_dim)
        v = v.reshape(B * L, self.heads, self.head_dim)
        kv_offsets = [b * L for b in range(B + 1)]
        cu_k = None
        if attn_mode == "varlen":
            cu_k = torch.arange(0, (B + 1) * L, L, dtype=torch.int32, device=h.device)
        out = attention(q, k, v, layout.offsets, kv_offsets, attn_mode,
                        layout.cu_seqlens, cu_k, layout.max_seqlen, L)
        return self.to_out(out.reshape(T, -1))


class FeedForward(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        C, hidden = cfg.model_channels, cfg.mlp_hidden
        self.mlp = nn.Sequential(nn.Linear(C, hidden), nn.GELU(approximate="tanh"),
                                 nn.Linear(hidden, C))

    def forward(self, h):
        return self.mlp(h)


class Block(nn.Module):
    """Modulated self-attention, cross-attention and MLP, each added back as a residual."""

    def __init__(self, cfg):
        super().__init__()
        C = cfg.model_channels
        self.share_mod = cfg.share_mod
        if cfg.share_mod:
            self.modulation = nn.Parameter(torch.zeros(6 * C))
        else:
            self.adaLN_modulation = nn.Sequential(nn.SiLU(), nn.Linear(C, 6 * C))
        self.self_attn = SelfAttention(cfg)
        self.norm2 = nn.LayerNorm(C, eps=1e-6)    # the only affine norm (fp32 parameters)
        self.cross_attn = CrossAttention(cfg)
        self.mlp = FeedForward(cfg)

    def forward(self, x, mod, context, layout, attn_mode):
        if self.share_mod:
            # fp32 offset + bf16 m promotes to fp32; one rounding back to bf16.
            mods = (self.modulation + mod).to(mod.dtype)
        else:
            mods = self.adaLN_modulation(mod)
        shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp = mods.chunk(6, dim=1)
        b = layout.batch_index     # [B, C] rows are applied to tokens by their asset

        h = layer_norm32(x, 1e-6)
        h = h * (1 + scale_msa)[b] + shift_msa[b]       # bf16 ops, each rounded
        h = self.self_attn(h, layout, attn_mode)
        x = x + h * gate_msa[b]

        h = layer_norm32(x, 1e-6, self.norm2.weight, self.norm2.bias)
        x = x + self.cross_attn(h, context, layout, attn_mode)     # no gate

        h = layer_norm32(x, 1e-6)
        h = h * (1 + scale_mlp)[b] + shift_mlp[b]
        h = self.mlp(h)
        return x + h * gate_mlp[b]


class TimestepEmbedder(nn.Module):
    def __init__(self, C, freq_size=256):
        super().__init__()
        self.freq_size = freq_size
        self.mlp = nn.Sequential(nn.Linear(freq_size, C), nn.SiLU(), nn.Linear(C, C))

    @staticmethod
    def sinusoid(t, dim, max_period=10000):
        """[cos(t f), sin(t f)], f_i = exp(-ln(max_period) * i / half), all fp32."""
        half = dim // 2
        freqs = torch.exp(-math.log(max_period)
                          * torch.arange(half, dtype=torch.float32, device=t.device) / half)
        args = t[:, None].float() * freqs[None]
        emb = torch.cat([torch.cos(args), torch.sin(args)], dim=-1)
        if dim % 2:
            emb = torch.cat([emb, torch.zeros_like(emb[:, :1])], dim=-1)
        return emb

    def forward(self, t):
        return self.mlp(self.sinusoid(t, self.freq_size))


# ---------------------------------------------------------------------------------------
# The model
# ---------------------------------------------------------------------------------------

class SLatFlowModel(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        C = cfg.model_channels
        self.cfg = cfg
        self.t_embedder = TimestepEmbedder(C)
        if cfg.share_mod:
            self.adaLN_modulation = nn.Sequential(nn.SiLU(), nn.Linear(C, 6 * C))
        self.input_layer = nn.Linear(cfg.in_channels, C)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.num_blocks))
        self.out_layer = nn.Linear(C, cfg.out_channels)
        self._set_runtime_dtypes()

    def _set_runtime_dtypes(self):
        """Everything fp32 except the Linear layers inside the blocks (bias included), which
        run in the compute dtype, as the original's convert_to(dtype)."""
        self.float()
        for module in self.blocks.modules():
            if isinstance(module, nn.Linear):
                module.to(self.cfg.dtype)

    @staticmethod
    def expected_shapes(cfg):
        """{tensor name: shape} of a checkpoint for cfg."""
        C, H, D = cfg.model_channels, cfg.num_heads, cfg.head_dim
        shapes = {
            "t_embedder.mlp.0.weight": (C, 256), "t_embedder.mlp.0.bias": (C,),
            "t_embedder.mlp.2.weight": (C, C), "t_embedder.mlp.2.bias": (C,),
            "input_layer.weight": (C, cfg.in_channels), "input_layer.bias": (C,),
            "out_layer.weight": (cfg.out_channels, C), "out_layer.bias": (cfg.out_channels,),
        }
        if cfg.share_mod:
            shapes["adaLN_modulation.1.weight"] = (6 * C, C)
            shapes["adaLN_modulation.1.bias"] = (6 * C,)
        for i in range(cfg.num_blocks):
            p = f"blocks.{i}."
            if cfg.share_mod:
                shapes[p + "modulation"] = (6 * C,)
            else:
                shapes[p + "adaLN_modulation.1.weight"] = (6 * C, C)
                shapes[p + "adaLN_modulation.1.bias"] = (6 * C,)
            shapes.update({
                p + "self_attn.to_qkv.weight": (3 * C, C), p + "self_attn.to_qkv.bias": (3 * C,),
                p + "self_attn.to_out.weight": (C, C), p + "self_attn.to_out.bias": (C,),
                p + "norm2.weight": (C,), p + "norm2.bias": (C,),
                p + "cross_attn.to_q.weight": (C, C), p + "cross_attn.to_q.bias": (C,),
                p + "cross_attn.to_kv.weight": (2 * C, cfg.cond_channels),
                p + "cross_attn.to_kv.bias": (2 * C,),
                p + "cross_attn.to_out.weight": (C, C), p + "cross_attn.to_out.bias": (C,),
                p + "mlp.mlp.0.weight": (cfg.mlp_hidden, C), p + "mlp.mlp.0.bias": (cfg.mlp_hidden,),
                p + "mlp.mlp.2.weight": (C, cfg.mlp_hidden), p + "mlp.mlp.2.bias": (C,),
            })
            if cfg.qk_rms_norm:
                shapes[p + "self_attn.q_rms_norm.gamma"] = (H, D)
                shapes[p + "self_attn.k_rms_norm.gamma"] = (H, D)
            if cfg.qk_rms_norm_cross:
                shapes[p + "cross_attn.q_rms_norm.gamma"] = (H, D)
                shapes[p + "cross_attn.k_rms_norm.gamma"] = (H, D)
        return shapes

    @staticmethod
    def check_state_dict(cfg, state_dict, where="checkpoint"):
        """Raises one error naming every missing, unexpected and mis-shaped tensor, and
        every tensor stored in a dtype other than bf16, f16 or f32."""
        problems = SLatFlowModel.state_dict_problems(cfg, state_dict)
        if problems:
            raise ValueError(f"{where}: {len(problems)} problem(s) with the tensors for this "
                             "config:\n  " + "\n  ".join(problems))

    @staticmethod
    def state_dict_problems(cfg, state_dict):
        """check_state_dict's findings as a list of lines (empty when the tensors fit)."""
        expected = SLatFlowModel.expected_shapes(cfg)
        problems = []
        for name in sorted(set(expected) - set(state_dict)):
            problems.append(f"missing {name} {list(expected[name])}")
        for name in sorted(set(state_dict) - set(expected)):
            problems.append(f"unexpected {name} {list(state_dict[name].shape)}")
        for name in sorted(set(state_dict) & set(expected)):
            t = state_dict[name]
            if tuple(t.shape) != expected[name]:
                problems.append(f"mis-shaped {name}: expected {list(expected[name])}, "
                                f"found {list(t.shape)}")
            if t.dtype not in (torch.bfloat16, torch.float16, torch.float32):
                problems.append(f"bad dtype {name}: {t.dtype} (expected bf16, f16 or f32)")
        return problems

    @staticmethod
    def from_state_dict(cfg, state_dict, device="cpu", where="checkpoint"):
        """Strict load; each tensor converted from its stored dtype to its run-time dtype."""
        SLatFlowModel.check_state_dict(cfg, state_dict, where)
        model = SLatFlowModel(cfg)
        params = dict(model.named_parameters())
        with torch.no_grad():
            for name, p in params.items():
                p.copy_(state_dict[name].to(p.dtype))
        return model.to(device).eval().requires_grad_(False)

    def prepare_layout(self, coords, batch_size):
        """The per-request TokenLayout from packed coords (int32 [T, 4] on the model's
        device, column 0 the asset index, non-decreasing, every asset present)."""
        if coords.dtype != torch.int32 or coords.dim() != 2 or coords.shape[1] != 4:
            raise ValueError(f"coords must be int32 [T, 4], found {coords.dtype} "
                             f"{list(coords.shape)}")
        bidx = coords[:, 0].long()
        counts = torch.bincount(bidx, minlength=batch_size).tolist()
        if len(counts) != batch_size or min(counts) == 0 or \
                (bidx.numel() > 1 and bool((bidx[1:] < bidx[:-1]).any())):
            raise ValueError(f"coords batch column must be non-decreasing and cover assets "
                             f"0..{batch_size - 1}; per-asset counts {counts}")
        offsets = [0]
        for n in counts:
            offsets.append(offsets[-1] + n)
        cfg = self.cfg
        return TokenLayout(
            batch_size=batch_size, offsets=offsets, batch_index=bidx,
            cu_seqlens=torch.tensor(offsets, dtype=torch.int32, device=coords.device),
            max_seqlen=max(counts),
            rope_phases=(rope_phases(coords, cfg.head_dim, cfg.rope_freq)
                         if cfg.pe_mode == "rope" else None),
            ape=ape_embedding(coords, cfg.model_channels) if cfg.pe_mode == "ape" else None)

    def forward(self, x, t, cond, layout, concat_cond=None, attn_mode="loop"):
        """Velocity [T, out] (fp32) for noisy latents x (fp32 [T, out]), t = 1000 * time
        (fp32 [B]) and condition tokens cond ([B, L, cond_channels], any float dtype)."""
        dt = self.cfg.dtype
        if concat_cond is not None:
            x = torch.cat([x, concat_cond], dim=-1)
        h = self.embed_tokens(x, layout.ape)
        mod = self.t_embedder(t)
        if self.cfg.share_mod:
            mod = self.adaLN_modulation(mod)
        mod = mod.to(dt)
        context = cond.to(dt)
        for block in self.blocks:
            h = block(h, mod, context, layout, attn_mode)
        return self.output_tokens(h, x.dtype)

    # The per-token work outside the blocks, as methods so that run.py --compile blocks
    # can wrap them; tensor arguments only.
    def embed_tokens(self, x, ape):
        """Input layer (fp32) rounded to the compute dtype, plus the "ape" embedding."""
        dt = self.cfg.dtype
        h = self.input_layer(x).to(dt)
        if ape is not None:
            h = h + ape.to(dt)
        return h

    def output_tokens(self, h, dtype):
        """Output LayerNorm (eps 1e-5, no affine) and out layer, in dtype (fp32)."""
        h = F.layer_norm(h.to(dtype), h.shape[-1:])
        return self.out_layer(h)
