"""Rotations by absolute position: RetNet's (§11) and rotary position embeddings (§12) of
the mixers whose config takes "rotary" (each names the width it turns within:
Mixer.ROTARY_WIDTH)."""

import torch
from torch import Tensor, nn

from .common import _pos_int, _pos_number

# "rotary" (rotary position embeddings of q and k, §12): its pair layouts and default base; where
# its angles come from ("theta": "base" or "stored"; or "table": rows).
ROTARY_PAIRS = ("interleaved", "half")
ROTARY_BASE = 10000
ROTARY_THETA = ("base", "stored")
ROTARY_KEYS = {"dims", "pairs", "base", "theta", "table"}


def check_rotary(cfg: dict, width: str, need) -> None:
    """The rules of cfg["rotary"] for a mixer whose q/k features per head are cfg[width]
    (need(ok, what) raises validate_mixer's ValueError)."""
    r = cfg["rotary"]
    need(isinstance(r, dict), f"mixer.rotary must be a dict, got {r!r}")
    need({"dims", "pairs"} <= set(r), f"mixer.rotary: missing keys {sorted({'dims', 'pairs'} - set(r))}")
    need(set(r) <= ROTARY_KEYS,
         f"mixer.rotary: unknown keys {sorted(set(r) - ROTARY_KEYS)} (allowed: {', '.join(sorted(ROTARY_KEYS))})")
    need(_pos_int(r["dims"]) and r["dims"] % 2 == 0 and r["dims"] <= cfg[width],
         f"mixer.rotary.dims must be even and at most {width} ({cfg[width]}), got {r['dims']!r}")
    need(r["pairs"] in ROTARY_PAIRS, f"unknown mixer.rotary.pairs {r['pairs']!r}; expected one of {list(ROTARY_PAIRS)}")
    need(_pos_number(r.get("base", ROTARY_BASE)), f"mixer.rotary.base must be a finite number > 0, got {r.get('base')!r}")
    need(r.get("theta", "base") in ROTARY_THETA,
         f"unknown mixer.rotary.theta {r.get('theta')!r}; expected one of {list(ROTARY_THETA)}")
    if "table" in r:
        need(_pos_int(r["table"]), f"mixer.rotary.table must be a positive integer (rows), got {r['table']!r}")
        need(r.get("theta", "base") == "base", 'mixer.rotary.table excludes "theta": "stored" (the table holds the angles)')


def rotation_angles(theta: Tensor, pos: int, n: int, dtype: torch.dtype):
    """cos, sin (n, len(theta)) of the angles p·θ_i at positions p = pos..pos+n−1, computed in
    float64 whatever `dtype` (p·θ reaches thousands of radians), then rounded to it."""
    p = torch.arange(pos, pos + n, dtype=torch.float64)
    a = p[:, None] * theta.to(device=p.device, dtype=torch.float64)[None, :]
    return torch.cos(a).to(dtype), torch.sin(a).to(dtype)


def rotate_pairs(x: Tensor, cos: Tensor, sin: Tensor, pairs: str = "interleaved") -> Tensor:
    """x (..., dk) with its first 2m dims turned pairwise (m = cos.shape[-1]; cos, sin broadcast
    against x[..., :m]), the rest passed: pair i, (a, b) → (a cos − b sin, b cos + a sin), is
    dims (2i, 2i+1) for pairs "interleaved" (RetNet's theta_shift, performer-pytorch's
    rotate_every_two, rotary-embedding-torch) or (i, i + m) for "half" (GPT-NeoX's and Hugging
    Face's rotate_half). The one rotation of every mixer that turns q and k by position."""
    m = cos.shape[-1]
    a, rest = x[..., :2 * m], x[..., 2 * m:]
    if pairs == "interleaved":
        x0, x1 = a[..., 0::2], a[..., 1::2]
        turned = torch.stack([x0 * cos - x1 * sin, x1 * cos + x0 * sin], -1).flatten(-2)
    else:
        x0, x1 = a[..., :m], a[..., m:]
        turned = torch.cat([x0 * cos - x1 * sin, x1 * cos + x0 * sin], -1)
    return torch.cat([turned, rest], -1)


class Rotary(nn.Module):
    """Rotary position embeddings (§12) of a mixer config's "rotary" {"dims": r, "pairs",
    optional "base" (default ROTARY_BASE), "theta", "table"}: at absolute position t, pair i < r/2
    of the first r features of every head's q and k turns by t·θ_i, θ_i = base^(−2i/r)
    (rotate_pairs); the other features pass. With "theta": "stored", θ is the tensor `theta`
    [r/2] (a library's frequency buffer; initially the base's values); with "table": T, pair i at
    t < T turns by (cos, sin) = (table[t, r/2 + i], table[t, i]) of the tensor `table` [T, r]
    (a library's [sin | cos] buffer; initially the base's angles). Either is in state_dict as
    rotary.theta or rotary.table, not trained (requires_grad False); without them nothing is."""

    def __init__(self, cfg: dict):
        super().__init__()
        self.dims, self.pairs = cfg["dims"], cfg["pairs"]
        base = float(cfg.get("base", ROTARY_BASE))
        theta = torch.tensor([base ** (-2 * i / self.dims) for i in range(self.dims // 2)], dtype=torch.float64)
        self.theta_stored = cfg.get("theta", "base") == "stored"
        self.table = None
        if self.theta_stored:
            self.theta = nn.Parameter(theta.float(), requires_grad=False)
        else:
            self.theta = theta
        if "table" in cfg:
            cos, sin = rotation_angles(theta, 0, cfg["table"], torch.float32)
            self.table = nn.Parameter(torch.cat([sin, cos], -1), requires_grad=False)

    def forward(self, x: Tensor, pos: int, heads_last: bool = False) -> Tensor:
        """x (..., n, dk) (heads_last: (..., n, H, dk)) whose rows are positions pos..pos+n−1,
        turned."""
        n = x.shape[-3] if heads_last else x.shape[-2]
        if self.table is not None:
            if pos + n > len(self.table):
                raise ValueError(f"positions {pos}..{pos + n - 1} exceed the rotary table's {len(self.table)} rows")
            m = self.dims // 2
            rows = self.table[pos:pos + n].to(x.dtype)
            sin, cos = rows[:, :m], rows[:, m:]
        else:
            cos, sin = rotation_angles(self.theta, pos, n, x.dtype)
        if heads_last:
            cos, sin = cos[:, None, :], sin[:, None, :]
        return rotate_pairs(x, cos.to(x.device), sin.to(x.device), self.pairs)


def _rotate(m, x: Tensor, pos: int, heads_last: bool = False) -> Tensor:
    """x turned by m's rotary (§12), or x itself when m has none."""
    return x if m.rotary is None else m.rotary(x, pos, heads_last)

