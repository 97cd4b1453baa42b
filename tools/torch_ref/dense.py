"""PyTorch eager reference of TRELLIS.2's dense sparse-structure flow model
(SparseStructureFlowModel, docs/DENSE_MODEL.md), in the oracle's token layout.

The blocks, the timestep embedder, the modulation and the output layer are model.py's (the
same definition as the SLat model, docs/MODEL.md). What differs:

- Tokens. A dense asset is the full R^3 grid: token n = i R^2 + j R + k of asset b is the
  voxel (i, j, k) of the volume [B, C, R, R, R], its feature row the voxel's channels. The
  forward takes and returns packed tokens [B R^3, C] (asset b at rows b R^3 .. (b+1) R^3 - 1),
  so the sampler, the file formats and compare.py are the SLat ones; volume_to_tokens and
  tokens_to_volume convert. The coords of a dense asset are exactly the grid in that order
  (dense_coords), and prepare_layout insists on it.
- Position tables computed once, on the CPU, when the model is built (never per request),
  then moved with the model: RoPE phases with f0 = 1, theta = 10000 whatever the config's
  rope_freq says (complex64 [R^3, D/2], torch.polar on the CPU), or the APE table
  (fp32 [R^3, C]). A checkpoint may carry either table (as the buffer "rope_phases" /
  "pos_emb"); if it does, its values replace the computed ones, as a non-strict load does.
- APE is added in fp32 to the fp32 input-layer output before the single rounding to the
  compute dtype (the SLat model rounds, adds the rounded table and rounds again).
- No concat_cond. The condition must have one row block per asset ([B, L, cond_channels]).
- The sampler's guidance rescale uses the unbiased std over each asset's volume
  (sampler.py picks it for this model), as the original computes it on [B, C, R, R, R].
"""
import torch
import torch.nn as nn

from model import (Block, ModelConfig, SLatFlowModel, TimestepEmbedder, TokenLayout,
                   ape_embedding, rope_phases)

MODEL_NAME = "SparseStructureFlowModel"
RELEASED_ROPE_FREQ = (1.0, 10000.0)     # what the dense model always uses


def config_from_args(args, where="checkpoint config"):
    """ModelConfig from the "args" of a SparseStructureFlowModel NAME.json: the SLat keys
    (model.ModelConfig.from_args, which rejects unknown keys by name) with "resolution"
    required. rope_freq is accepted and ignored by the model."""
    if "resolution" not in args:
        raise ValueError(f"{where}: missing args ['resolution'] (required by "
                         f"{MODEL_NAME})")
    cfg = ModelConfig.from_args(args, where)
    if cfg.resolution <= 0:
        raise ValueError(f"{where}: resolution must be positive, found {cfg.resolution}")
    return cfg


# ---------------------------------------------------------------------------------------
# Token order
# ---------------------------------------------------------------------------------------

def dense_coords(batch, resolution, device="cpu"):
    """int32 [B R^3, 4]: rows (b, n // R^2, (n // R) % R, n % R) for n < R^3, asset by asset."""
    R = resolution
    n = torch.arange(R ** 3, dtype=torch.int64)
    grid = torch.stack([n // (R * R), (n // R) % R, n % R], dim=1)
    rows = [torch.cat([torch.full((R ** 3, 1), b, dtype=torch.int64), grid], dim=1)
            for b in range(batch)]
    return torch.cat(rows).to(torch.int32).to(device)


def volume_to_tokens(v):
    """[B, C, R, R, R] -> [B R^3, C] (contiguous): row b R^3 + n holds voxel n's channels."""
    if v.dim() != 5 or not (v.shape[2] == v.shape[3] == v.shape[4]):
        raise ValueError(f"expected a volume [B, C, R, R, R], found {list(v.shape)}")
    B, C = v.shape[:2]
    return v.reshape(B, C, -1).transpose(1, 2).reshape(-1, C).contiguous()


def tokens_to_volume(x, resolution):
    """[B R^3, C] -> [B, C, R, R, R] (contiguous); the inverse of volume_to_tokens."""
    R = resolution
    if x.dim() != 2 or x.shape[0] % (R ** 3):
        raise ValueError(f"expected tokens [B * {R ** 3}, C], found {list(x.shape)}")
    B, C = x.shape[0] // R ** 3, x.shape[1]
    return x.reshape(B, R ** 3, C).transpose(1, 2).reshape(B, C, R, R, R).contiguous()


# ---------------------------------------------------------------------------------------
# Host tables
# ---------------------------------------------------------------------------------------

def host_rope_table(resolution, head_dim):
    """complex64 [R^3, head_dim/2] on the CPU: the RoPE phases of the grid's tokens with
    f0 = 1, theta = 10000 (model.rope_phases: fp32 omegas, fp32 coord * omega, torch.polar
    on the CPU; padding pairs (1, 0))."""
    return rope_phases(dense_coords(1, resolution), head_dim, RELEASED_ROPE_FREQ)


def host_ape_table(resolution, channels):
    """float32 [R^3, C] on the CPU: model.ape_embedding of the grid's tokens."""
    return ape_embedding(dense_coords(1, resolution), channels)


# ---------------------------------------------------------------------------------------
# The model
# ---------------------------------------------------------------------------------------

class SparseStructureFlowModel(nn.Module):
    """The dense model over packed tokens; same parameters (names, shapes, run-time dtypes)
    as model.SLatFlowModel."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        C = cfg.model_channels
        self.cfg = cfg
        self.resolution = cfg.resolution
        self.t_embedder = TimestepEmbedder(C)
        if cfg.share_mod:
            self.adaLN_modulation = nn.Sequential(nn.SiLU(), nn.Linear(C, 6 * C))
        self.input_layer = nn.Linear(cfg.in_channels, C)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.num_blocks))
        self.out_layer = nn.Linear(C, cfg.out_channels)
        SLatFlowModel._set_runtime_dtypes(self)
        # Computed here, on the CPU, once; .to(device) moves them unchanged.
        if cfg.pe_mode == "rope":
            self.register_buffer("rope_phases", host_rope_table(cfg.resolution, cfg.head_dim))
            self.pos_emb = None
        else:
            self.register_buffer("pos_emb", host_ape_table(cfg.resolution, C))
            self.rope_phases = None

    @staticmethod
    def buffer_shapes(cfg):
        """{name: (shape, dtype)} of the optional position-table buffer a checkpoint may hold."""
        R3 = cfg.resolution ** 3
        if cfg.pe_mode == "rope":
            return {"rope_phases": ((R3, cfg.head_dim // 2), torch.complex64)}
        return {"pos_emb": ((R3, cfg.model_channels), torch.float32)}

    @staticmethod
    def expected_shapes(cfg):
        return SLatFlowModel.expected_shapes(cfg)

    @staticmethod
    def check_state_dict(cfg, state_dict, where="checkpoint"):
        """SLatFlowModel's strict check (names, shapes, dtypes); the position-table buffer
        of this config's pe_mode may be present (shape and dtype checked) or absent."""
        buffers = SparseStructureFlowModel.buffer_shapes(cfg)
        problems = []
        for name, (shape, dtype) in buffers.items():
            if name in state_dict:
                t = state_dict[name]
                if tuple(t.shape) != shape:
                    problems.append(f"mis-shaped {name}: expected {list(shape)}, found "
                                    f"{list(t.shape)}")
                ok = (t.dtype == dtype if dtype == torch.complex64 else
                      t.dtype in (torch.bfloat16, torch.float16, torch.float32))
                if not ok:
                    problems.append(f"bad dtype {name}: {t.dtype} (expected {dtype})")
        rest = {k: v for k, v in state_dict.items() if k not in buffers}
        problems = SLatFlowModel.state_dict_problems(cfg, rest) + problems
        if problems:
            raise ValueError(f"{where}: {len(problems)} problem(s) with the tensors for this "
                             "config:\n  " + "\n  ".join(problems))

    @staticmethod
    def from_state_dict(cfg, state_dict, device="cpu", where="checkpoint"):
        """Strict load (the position table optional); each parameter converted from its
        stored dtype to its run-time dtype; a stored table replaces the computed one."""
        SparseStructureFlowModel.check_state_dict(cfg, state_dict, where)
        model = SparseStructureFlowModel(cfg)
        with torch.no_grad():
            for name, p in model.named_parameters():
                p.copy_(state_dict[name].to(p.dtype))
            for name, b in model.named_buffers():
                if name in state_dict:
                    b.copy_(state_dict[name].to(b.dtype))
        return model.to(device).eval().requires_grad_(False)

    def prepare_layout(self, coords, batch_size):
        """TokenLayout of B dense assets. coords must be dense_coords(B, R) (int32, on the
        model's device): every asset is the full grid in raster order."""
        R = self.resolution
        want = dense_coords(batch_size, R, coords.device)
        if coords.dtype != torch.int32 or tuple(coords.shape) != tuple(want.shape):
            raise ValueError(f"dense model: coords must be int32 [{batch_size} * {R ** 3}, 4] "
                             f"(the full {R}^3 grid of each asset), found {coords.dtype} "
                             f"{list(coords.shape)}")
        if not torch.equal(coords, want):
            row = int((coords != want).any(dim=1).nonzero()[0, 0])
            raise ValueError(f"dense model: coords row {row} is {coords[row].tolist()}, "
                             f"expected {want[row].tolist()} (each asset must be the full "
                             f"{R}^3 grid in raster order)")
        N = R ** 3
        offsets = [b * N for b in range(batch_size + 1)]
        return TokenLayout(
            batch_size=batch_size, offsets=offsets, batch_index=coords[:, 0].long(),
            cu_seqlens=torch.tensor(offsets, dtype=torch.int32, device=coords.device),
            max_seqlen=N,
            rope_phases=(self.rope_phases.repeat(batch_size, 1)
                         if self.rope_phases is not None else None),
            ape=self.pos_emb.repeat(batch_size, 1) if self.pos_emb is not None else None)

    def forward(self, x, t, cond, layout, concat_cond=None, attn_mode="loop"):
        """Velocity [B R^3, out] (fp32) for tokens x (fp32 [B R^3, in]), t = 1000 * time
        (fp32 [B]) and cond ([B, L, cond_channels], any float dtype)."""
        if concat_cond is not None:
            raise ValueError("the dense model takes no concat_cond")
        if cond.shape[0] != layout.batch_size:
            raise ValueError(f"dense model: cond has batch {cond.shape[0]}, expected one "
                             f"condition per asset ({layout.batch_size})")
        # The blocks, modulation and output of the structured-latent forward; this class's
        # embed_tokens (APE before the rounding) and layout (host tables) make the difference.
        return SLatFlowModel.forward(self, x, t, cond, layout, None, attn_mode)

    def forward_volume(self, x, t, cond, attn_mode="loop"):
        """The original's call: x [B, in, R, R, R] -> v [B, out, R, R, R]."""
        R = self.resolution
        B = x.shape[0]
        if list(x.shape) != [B, self.cfg.in_channels, R, R, R]:
            raise ValueError(f"expected x [B, {self.cfg.in_channels}, {R}, {R}, {R}], found "
                             f"{list(x.shape)}")
        layout = self.prepare_layout(dense_coords(B, R, x.device), B)
        return tokens_to_volume(self(volume_to_tokens(x), t, cond, layout,
                                     attn_mode=attn_mode), R)

    def embed_tokens(self, x, ape):
        """Input layer (fp32), plus the fp32 APE table, then one rounding to the compute
        dtype."""
        h = self.input_layer(x)
        if ape is not None:
            h = h + ape
        return h.to(self.cfg.dtype)

    output_tokens = SLatFlowModel.output_tokens
