"""TRELLIS.2's pipeline pieces as the sparse3d drop-in meets them, over the oracle: a
SparseTensor with the duck type the drop-in reads (.feats, .coords, .replace(), .shape), the
oracle's SLatFlowModel behind TRELLIS.2's call `model(x, t, cond, concat_cond=None)`, the
FlowEulerGuidanceIntervalSampler with TRELLIS.2's signature and result (`.samples`), and a
pipeline object holding them as TRELLIS.2's does (`pipeline.models[...]`,
`pipeline.shape_slat_sampler`). Nothing of TRELLIS.2 is imported or copied: the sampler's
arithmetic is sampler.py's, which check_original.py holds bit for bit to the original.
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


class FlowEulerGuidanceIntervalSampler:
    """TRELLIS.2's sampler interface over sampler.py's arithmetic: one model call per
    branch (cond, then the negative condition) per step."""

    def __init__(self, sigma_min=1e-5):
        self.sigma_min = sigma_min

    @torch.no_grad()
    def sample(self, model, noise, cond, neg_cond, steps=50, rescale_t=1.0,
               guidance_strength=3.0, guidance_interval=(0.0, 1.0), guidance_rescale=0.0,
               verbose=True, tqdm_desc="Sampling", **kwargs):
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


class Pipeline:
    """The parts of Trellis2ImageTo3DPipeline that hold the structured-latent flow models."""

    def __init__(self, shape_model):
        self.models = {"shape_slat_flow_model_1024": shape_model}
        self.shape_slat_sampler = FlowEulerGuidanceIntervalSampler()
        self.tex_slat_sampler = FlowEulerGuidanceIntervalSampler()
        self.shape_slat_sampler_params = {"steps": 12, "rescale_t": 3.0,
                                          "guidance_strength": 7.5,
                                          "guidance_interval": (0.6, 1.0),
                                          "guidance_rescale": 0.5}

    def sample_shape_slat(self, cond, noise, model_name="shape_slat_flow_model_1024"):
        """As the pipeline: the sampler over the model with a zero negative condition."""
        model = self.models[model_name]
        return self.shape_slat_sampler.sample(model, noise, cond, torch.zeros_like(cond),
                                              **self.shape_slat_sampler_params,
                                              verbose=False).samples
