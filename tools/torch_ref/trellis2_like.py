"""TRELLIS.2's pipeline pieces as the sparse3d drop-in meets them, over the oracle: a
SparseTensor with the duck type the drop-in reads (.feats, .coords, .replace(), .shape), the
oracle's SLatFlowModel behind TRELLIS.2's call `model(x, t, cond, concat_cond=None)`, the
dense oracle (dense.py) behind the SparseStructureFlowModel's call `model(x, t, cond)` on
volumes [B, C, R, R, R], the FlowEulerGuidanceIntervalSampler with TRELLIS.2's signature
and result (`.samples`) over either, and a pipeline object holding them as TRELLIS.2's
does (`pipeline.models[...]`, `pipeline.shape_slat_sampler`,
`pipeline.sparse_structure_sampler`).
Nothing of TRELLIS.2 is imported or copied: the sampler's arithmetic is sampler.py's, which
check_original.py holds bit for bit to the original; over a dense volume the guidance
rescale's std is Tensor.std over all but the batch dimension (unbiased), as the original's
guidance mixin computes it for a dense tensor (docs/DENSE_MODEL.md).
"""
import types

import torch

import sampler as oracle_sampler


class SparseTensor:
    def __init__(self, feats, coords):
        self.feats, self.coords = feats, coords

    def replace(self, feats):
        return SparseTensor(feats, self.coords)

    @property
    def shape(self):
        return torch.Size([int(self.coords[:, 0].max()) + 1, self.feats.shape[1]])

    @property
    def device(self):
        return self.feats.device


class OracleFlowModel(torch.nn.Module):
    """The oracle SLatFlowModel called as TRELLIS.2's: the layout is prepared per call from
    x.coords (the original does the same inside its sparse ops)."""

    def __init__(self, model):
        super().__init__()
        self.model = model
        cfg = model.cfg
        for a in ("resolution", "in_channels", "model_channels", "cond_channels",
                  "out_channels", "num_blocks", "num_heads", "mlp_ratio", "pe_mode",
                  "share_mod", "qk_rms_norm", "qk_rms_norm_cross"):
            setattr(self, a, getattr(cfg, a))
        self.rope_freq = tuple(cfg.rope_freq)
        self.dtype = cfg.dtype

    def state_dict(self, *args, **kwargs):
        return self.model.state_dict(*args, **kwargs)

    def forward(self, x, t, cond, concat_cond=None):
        B = int(cond.shape[0])
        layout = self.model.prepare_layout(x.coords, B)
        concat = concat_cond.feats if hasattr(concat_cond, "feats") else concat_cond
        v = self.model(x.feats, t, cond, layout, concat, "varlen")
        return x.replace(v.to(x.feats.dtype))


class SparseStructureFlowModel(torch.nn.Module):
    """The dense oracle (dense.py's SparseStructureFlowModel) called as TRELLIS.2's
    SparseStructureFlowModel: `model(x, t, cond)` with x [B, C, R, R, R], the result a volume
    of x's dtype. It has the original's class name and its `rope_phases` / `pos_emb` buffer
    (the drop-in's family rule reads either), the constructor's arguments as attributes, and
    the oracle's state dict (that buffer included, as the original's)."""

    def __init__(self, model, attn_mode="loop"):
        super().__init__()
        self.model = model
        self.attn_mode = attn_mode
        cfg = model.cfg
        for a in ("resolution", "in_channels", "model_channels", "cond_channels",
                  "out_channels", "num_blocks", "num_heads", "mlp_ratio", "pe_mode",
                  "share_mod", "qk_rms_norm", "qk_rms_norm_cross"):
            setattr(self, a, getattr(cfg, a))
        self.dtype = cfg.dtype
        # The buffer as the original registers it (not a copy: the oracle's own tensor).
        if getattr(model, "rope_phases", None) is not None:
            self.register_buffer("rope_phases", model.rope_phases, persistent=False)
        if getattr(model, "pos_emb", None) is not None:
            self.register_buffer("pos_emb", model.pos_emb, persistent=False)

    def state_dict(self, *args, **kwargs):
        return self.model.state_dict(*args, **kwargs)

    def forward(self, x, t, cond):
        v = self.model.forward_volume(x.float(), t, cond, attn_mode=self.attn_mode)
        return v.to(x.dtype)


class FlowEulerGuidanceIntervalSampler:
    """TRELLIS.2's sampler interface over sampler.py's arithmetic: one model call per
    branch (cond, then the negative condition) per step; over a SparseTensor (the structured
    latents) or a dense volume (the sparse structure)."""

    def __init__(self, sigma_min=1e-5):
        self.sigma_min = sigma_min

    @torch.no_grad()
    def sample(self, model, noise, cond, neg_cond, steps=50, rescale_t=1.0,
               guidance_strength=3.0, guidance_interval=(0.0, 1.0), guidance_rescale=0.0,
               verbose=True, tqdm_desc="Sampling", **kwargs):
        if not hasattr(noise, "feats"):
            return self._sample_dense(model, noise, cond, neg_cond, steps, rescale_t,
                                      guidance_strength, guidance_interval, guidance_rescale,
                                      **kwargs)
        ts = oracle_sampler.timesteps(steps, rescale_t)
        sm = self.sigma_min
        B = int(cond.shape[0])
        counts = torch.bincount(noise.coords[:, 0].long(), minlength=B).tolist()
        offsets = [0]
        for n in counts:
            offsets.append(offsets[-1] + n)
        layout = types.SimpleNamespace(batch_size=B, offsets=offsets,
                                       batch_index=noise.coords[:, 0].long())
        x = noise
        for k in range(steps):
            t, t_prev = ts[k], ts[k + 1]
            tt = torch.tensor([1000 * t] * B, dtype=torch.float32, device=x.feats.device)
            lo, hi = guidance_interval
            g = guidance_strength if lo <= t <= hi else 1
            v_pos = model(x, tt, cond, **kwargs).feats
            if g == 1:
                v = v_pos
            else:
                v_neg = model(x, tt, neg_cond, **kwargs).feats
                v = g * v_pos + (1 - g) * v_neg
                if guidance_rescale > 0:
                    x0_pos = oracle_sampler.pred_to_xstart(x.feats, t, v_pos, sm)
                    x0_cfg = oracle_sampler.pred_to_xstart(x.feats, t, v, sm)
                    ratio = (oracle_sampler.per_asset_std(x0_pos, layout)
                             / oracle_sampler.per_asset_std(x0_cfg, layout))
                    x0 = (guidance_rescale * (x0_cfg * ratio[layout.batch_index])
                          + (1 - guidance_rescale) * x0_cfg)
                    v = oracle_sampler.xstart_to_pred(x.feats, t, x0, sm)
            x = x.replace(x.feats - (t - t_prev) * v)
        return types.SimpleNamespace(samples=x, pred_x_t=None, pred_x_0=None)

    def _sample_dense(self, model, noise, cond, neg_cond, steps, rescale_t, guidance_strength,
                      guidance_interval, guidance_rescale, **kwargs):
        ts = oracle_sampler.timesteps(steps, rescale_t)
        sm = self.sigma_min
        B = int(noise.shape[0])
        dims = list(range(1, noise.ndim))
        x = noise
        for k in range(steps):
            t, t_prev = ts[k], ts[k + 1]
            tt = torch.tensor([1000 * t] * B, dtype=torch.float32, device=x.device)
            lo, hi = guidance_interval
            g = guidance_strength if lo <= t <= hi else 1
            v_pos = model(x, tt, cond, **kwargs)
            if g == 1:
                v = v_pos
            else:
                v_neg = model(x, tt, neg_cond, **kwargs)
                v = g * v_pos + (1 - g) * v_neg
                if guidance_rescale > 0:
                    x0_pos = oracle_sampler.pred_to_xstart(x, t, v_pos, sm)
                    x0_cfg = oracle_sampler.pred_to_xstart(x, t, v, sm)
                    ratio = (x0_pos.std(dim=dims, keepdim=True)
                             / x0_cfg.std(dim=dims, keepdim=True))   # unbiased, as the original
                    x0 = guidance_rescale * (x0_cfg * ratio) + (1 - guidance_rescale) * x0_cfg
                    v = oracle_sampler.xstart_to_pred(x, t, x0, sm)
            x = x - (t - t_prev) * v
        return types.SimpleNamespace(samples=x, pred_x_t=None, pred_x_0=None)


class Pipeline:
    """The parts of Trellis2ImageTo3DPipeline that hold the flow models: the shape model and,
    when given, the dense sparse-structure model, with the released samplers' parameters."""

    def __init__(self, shape_model=None, dense_model=None):
        self.models = {}
        if shape_model is not None:
            self.models["shape_slat_flow_model_1024"] = shape_model
        if dense_model is not None:
            self.models["sparse_structure_flow_model"] = dense_model
        self.sparse_structure_sampler = FlowEulerGuidanceIntervalSampler()
        self.shape_slat_sampler = FlowEulerGuidanceIntervalSampler()
        self.tex_slat_sampler = FlowEulerGuidanceIntervalSampler()
        self.sparse_structure_sampler_params = {"steps": 12, "rescale_t": 5.0,
                                                "guidance_strength": 7.5,
                                                "guidance_interval": (0.6, 1.0),
                                                "guidance_rescale": 0.7}
        self.shape_slat_sampler_params = {"steps": 12, "rescale_t": 3.0,
                                          "guidance_strength": 7.5,
                                          "guidance_interval": (0.6, 1.0),
                                          "guidance_rescale": 0.5}

    def sample_sparse_structure(self, cond, noise):
        """As the pipeline: the sparse-structure sampler over the dense model, a zero negative
        condition, noise [B, C, R, R, R]; z_s of the noise's shape."""
        model = self.models["sparse_structure_flow_model"]
        return self.sparse_structure_sampler.sample(model, noise, cond, torch.zeros_like(cond),
                                                    **self.sparse_structure_sampler_params,
                                                    verbose=False).samples

    def sample_shape_slat(self, cond, noise, model_name="shape_slat_flow_model_1024"):
        """As the pipeline: the sampler over the model with a zero negative condition."""
        model = self.models[model_name]
        return self.shape_slat_sampler.sample(model, noise, cond, torch.zeros_like(cond),
                                              **self.shape_slat_sampler_params,
                                              verbose=False).samples
