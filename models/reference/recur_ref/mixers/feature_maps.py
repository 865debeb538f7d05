"""The feature maps φ of linear attention (§3): their names, the random-feature maps of
fast-transformers and performer-pytorch transcribed, and C, the width of φ(x), of a
linear_attention config."""

import math
from typing import Optional

import torch
from torch import Tensor, nn

FEATURE_MAPS = ("elu_plus_one", "relu", "favor", "poly2", "favor_stabilized", "generalized_relu",
                "random_fourier", "smoothed_random_fourier")
# fast-transformers' RandomFourierFeatures / SmoothedRandomFourierFeatures: ω (dk, m//2),
# features cos and sin of ωᵀx̃ (and the constant `smoothing`).
FOURIER_MAPS = ("random_fourier", "smoothed_random_fourier")
# performer-pytorch's kernels (favor_stabilized: its softmax kernel; generalized_relu: its
# generalized kernel with relu): ω (dk, m) like 'favor', and ε added to every feature.
PERFORMER_MAPS = {"favor_stabilized": 1e-4, "generalized_relu": 1e-3}
FAVOR_LAYOUTS = ("performer", "fast_transformers")


def feature_dim(cfg: dict) -> int:
    """C, the width of φ(x) of a linear_attention mixer."""
    fm, dk = cfg["feature_map"], cfg["dk"]
    if fm == "poly2":
        return dk * dk
    if fm == "favor":
        m = cfg["n_features"]
        return m if cfg.get("favor_layout", "performer") == "performer" else 2 * (m // 2)
    if fm in PERFORMER_MAPS:
        return cfg["n_features"]
    if fm in FOURIER_MAPS:
        return 2 * (cfg["n_features"] // 2) + (fm == "smoothed_random_fourier")
    return dk


def orthogonal_random_matrix_(w: Tensor, generator: Optional[torch.Generator] = None) -> Tensor:
    """Fill w (rows, columns) in place with blocks of orthogonal columns whose norms are
    chi(rows)-distributed, after fast-transformers' orthogonal_random_matrix_
    (idiap/fast-transformers fast_transformers/feature_maps/fourier_features.py), plus the
    sign fix of the QR factor. Only an initialisation: runs use the stored ω."""
    rows, columns = w.shape
    start = 0
    with torch.no_grad():
        while start < columns:
            end = min(start + rows, columns)
            block = torch.randn(rows, rows, generator=generator, dtype=torch.float64)
            norms = torch.sqrt(torch.einsum("ab,ab->a", block, block))
            Q, R = torch.linalg.qr(block)
            Q = Q * torch.sign(torch.diagonal(R))[None, :]   # Haar-uniform directions (the library
            #                                                     omits this sign fix: biased columns)
            w[:, start:end] = (Q[:, :end - start] * norms[None, :end - start]).to(w.dtype)
            start += rows
    return w


def performer_favor(x: Tensor, omega: Tensor, softmax_temp: float) -> Tensor:
    """Our FAVOR+ (Performer positive random features, docs/attention-math.md §3):

        x̃ = x·√softmax_temp,  φ(x)_j = exp(ω_jᵀx̃ − ‖x̃‖²/2) / √m,   j = 1..m

    omega (dk, m): column j is ω_j. φ(q)·φ(k) is an unbiased estimate of
    exp(softmax_temp · qᵀk) (softmax_temp = 1/√dk: the softmax kernel of §2)."""
    m = omega.shape[1]
    x = x * math.sqrt(softmax_temp)
    return torch.exp(x @ omega - 0.5 * (x * x).sum(-1, keepdim=True)) / math.sqrt(m)


def fast_transformers_favor(x: Tensor, omega: Tensor, n_dims: Optional[int] = None,
                            softmax_temp: Optional[float] = None, stabilize: bool = False) -> Tensor:
    """fast-transformers' `Favor.forward`, transcribed exactly from
    idiap/fast-transformers, fast_transformers/feature_maps/fourier_features.py
    (class Favor(RandomFourierFeatures); omega is the buffer registered by
    RandomFourierFeatures.__init__ as torch.zeros(query_dimensions, self.n_dims//2)):

        self.softmax_temp = 1/sqrt(query_dimensions) if softmax_temp is None else softmax_temp
        x = x * sqrt(self.softmax_temp)
        norm_x_squared = torch.einsum("...d,...d->...", x, x).unsqueeze(-1)
        u = x.unsqueeze(-2).matmul(self.omega).squeeze(-2)
        offset = norm_x_squared * 0.5 + 0.5 * log(self.n_dims)
        if self.stabilize:
            offset = offset + norm_x_squared.max(1, keepdim=True)[0]
        exp_u1 = torch.exp(u - offset)
        exp_u2 = torch.exp(-u - offset)
        phi = torch.cat([exp_u1, exp_u2], dim=-1)

    i.e. φ(x) = [exp(ωᵀx̃ − ‖x̃‖²/2), exp(−ωᵀx̃ − ‖x̃‖²/2)] / √n_dims (hyperbolic positive
    random features, width 2·(n_dims//2)), x̃ = x·√softmax_temp. x: (..., query_dimensions);
    omega: (query_dimensions, n_dims//2); n_dims defaults to 2·omega.shape[1] (the library's
    n_dims, which appears only in the log term, may be odd). `stabilize` subtracts the max of
    ‖x̃‖² over dim 1 (the library assumes (N, L, H, D): the sequence axis) — sequence-global,
    so it has no causal/RNN form; recur's mixer uses stabilize=False (the factor it applies is
    a per-(batch, head) constant that cancels between numerator and denominator up to ε).
    """
    query_dimensions = x.shape[-1]
    if n_dims is None:
        n_dims = 2 * omega.shape[1]
    if softmax_temp is None:
        softmax_temp = 1 / math.sqrt(query_dimensions)
    x = x * math.sqrt(softmax_temp)
    norm_x_squared = torch.einsum("...d,...d->...", x, x).unsqueeze(-1)
    u = x.unsqueeze(-2).matmul(omega).squeeze(-2)
    offset = norm_x_squared * 0.5 + 0.5 * math.log(n_dims)
    if stabilize:
        offset = offset + norm_x_squared.max(1, keepdim=True)[0]
    exp_u1 = torch.exp(u - offset)
    exp_u2 = torch.exp(-u - offset)
    return torch.cat([exp_u1, exp_u2], dim=-1)


def random_fourier(x: Tensor, omega: Tensor, n_dims: int, softmax_temp: float,
                   smoothing: Optional[float] = None) -> Tensor:
    """fast-transformers' `RandomFourierFeatures.forward` (and, with `smoothing`,
    `SmoothedRandomFourierFeatures.forward`), fast_transformers/feature_maps/fourier_features.py:

        x = x * sqrt(self.softmax_temp)
        u = x.unsqueeze(-2).matmul(self.omega).squeeze(-2)
        phi = torch.cat([torch.cos(u), torch.sin(u)], dim=-1)
        return phi * sqrt(2/self.n_dims)

    then [phi, smoothing] for the smoothed map. omega (dk, n_dims//2); n_dims is the
    RandomFourierFeatures' own (the smoothed map's constructor passes it its n_dims − 1).
    The features can be negative: φ(q)·φ(k) estimates exp(−t·‖q − k‖²/2) (+ smoothing²)."""
    u = (x * math.sqrt(softmax_temp)) @ omega
    phi = torch.cat([torch.cos(u), torch.sin(u)], dim=-1) * math.sqrt(2 / n_dims)
    if smoothing is None:
        return phi
    return torch.cat([phi, torch.full(phi.shape[:-1] + (1,), float(smoothing), dtype=phi.dtype)], dim=-1)


def poly2(x: Tensor) -> Tensor:
    """Degree-2 polynomial feature map: φ(x) = vec(x xᵀ) (C = dk², row-major:
    φ_{a·dk+b} = x_a x_b), so φ(q)·φ(k) = (qᵀk)² exactly."""
    return (x.unsqueeze(-1) * x.unsqueeze(-2)).flatten(-2)


class _FeatureMapParams(nn.Module):
    """Holds the FAVOR+ projection: buffer `omega` (dk, columns), exported in state_dict."""

    def __init__(self, dk: int, columns: int):
        super().__init__()
        self.register_buffer("omega", orthogonal_random_matrix_(torch.zeros(dk, columns)))
