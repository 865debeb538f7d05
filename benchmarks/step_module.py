"""One recurrent step of B streams as a plain PyTorch module, for benchmarks.

The reference model (models/reference/recur_ref) steps one stream with its own
State object; the benchmarks need the same step batched over streams, with the
recurrent state as explicit tensors, so that PyTorch can run it directly and
exporters (ONNX, ExecuTorch, LiteRT) can trace it into a graph whose inputs and
outputs are the state. Used by bench_vs_torch.py and peers.py; runs on Debian's
torch 1.13 and on newer torch alike.

Only linear-attention models (the paper-MNIST-sized benchmark model) are covered:
per layer the state is S (B, H, dk, dv) and z (B, H, dk), as in RecurModel.step.
"""
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models" / "reference"))
from recur_ref.checkpoint import export, load  # noqa: E402  (re-exported for the benchmarks)

__all__ = ["BatchedStep", "FlatStep", "state_shapes", "zero_state", "embed", "check_against_step",
           "export", "load"]


class BatchedStep(torch.nn.Module):
    """One RNN step of B independent streams, written with the reference's
    modules (the same math as RecurModel.step, batched over streams)."""

    def __init__(self, model):
        super().__init__()
        self.m = model
        self.pre = model.config["norm_placement"] == "pre"

    def mixer(self, att, h, S, z):
        b = h.shape[0]
        q = (F.elu(att.query(h)) + 1).view(b, att.heads, att.dk)     # (B, H, dk)
        k = (F.elu(att.key(h)) + 1).view(b, att.heads, att.dk)
        v = att.value(h).view(b, att.heads, att.dv)                   # (B, H, dv)
        S = S + k.unsqueeze(-1) * v.unsqueeze(-2)                     # (B, H, dk, dv)
        z = z + k                                                     # (B, H, dk)
        num = torch.matmul(q.unsqueeze(-2), S).squeeze(-2)            # (B, H, dv)
        den = (q * z).sum(-1, keepdim=True) + att.eps
        return att.out((num / den).reshape(b, -1)), S, z

    def forward(self, x, S: list, z: list):
        # x: (B, d_model) embedded input
        newS, newz = [], []
        for blk, S_l, z_l in zip(self.m.blocks, S, z):
            if self.pre:
                a, S_l, z_l = self.mixer(blk.mixer, blk.norm1(x), S_l, z_l)
                x = x + a
                x = x + blk.ffn(blk.norm2(x))
            else:
                a, S_l, z_l = self.mixer(blk.mixer, x, S_l, z_l)
                x = blk.norm1(x + a)
                x = blk.norm2(x + blk.ffn(x))
            newS.append(S_l)
            newz.append(z_l)
        if self.m.final_norm is not None:
            x = self.m.final_norm(x)
        if self.m.head is not None:
            x = self.m.head(x)
            if self.m.head_activation == "softmax":
                x = torch.softmax(x, -1)
            elif self.m.head_activation == "log_softmax":
                x = torch.log_softmax(x, -1)
        return x, newS, newz


class FlatStep(torch.nn.Module):
    """BatchedStep with flat tensor arguments, the form exporters take:
    forward(x, S_0, z_0, S_1, z_1, ...) -> (y, S_0', z_0', S_1', z_1', ...)."""

    def __init__(self, model):
        super().__init__()
        self.step = BatchedStep(model)

    def forward(self, x, *state):
        y, S, z = self.step(x, list(state[0::2]), list(state[1::2]))
        out = [y]
        for S_l, z_l in zip(S, z):
            out += [S_l, z_l]
        return tuple(out)


def state_shapes(config, batch):
    """Shapes of FlatStep's state arguments, in order: S_0, z_0, S_1, z_1, ..."""
    m = config["mixer"]
    shapes = []
    for _ in range(config["n_layers"]):
        shapes += [(batch, m["heads"], m["dk"], m["dv"]), (batch, m["heads"], m["dk"])]
    return shapes


def zero_state(config, batch):
    """(S, z): per-layer lists of zero tensors, BatchedStep's state before the first step."""
    m = config["mixer"]
    S = [torch.zeros(batch, m["heads"], m["dk"], m["dv"]) for _ in range(config["n_layers"])]
    z = [torch.zeros(batch, m["heads"], m["dk"]) for _ in range(config["n_layers"])]
    return S, z


def embed(model, batch):
    cfg = model.config
    if cfg["input"]["kind"] == "tokens":
        ids = torch.randint(0, cfg["input"]["vocab_size"], (batch,))
        return model.input(ids, 0)
    return model.input(torch.randn(batch, cfg["input"]["feature_width"]), 0)


def check_against_step(model, step, atol=1e-5):
    """Asserts that `step` (a BatchedStep) computes model.step for one stream."""
    cfg = model.config
    if cfg["input"]["kind"] == "tokens":
        x_t = torch.tensor(3)
        x1 = model.input(x_t.reshape(1), 0)
    else:
        x_t = torch.randn(cfg["input"]["feature_width"])
        x1 = model.input(x_t.reshape(1, -1), 0)
    S0, z0 = zero_state(cfg, 1)
    want, _, _ = model.step(x_t, model.init_state())
    got = step(x1, S0, z0)[0][0]
    assert torch.allclose(got, want, atol=atol), "batched step differs from model.step"
