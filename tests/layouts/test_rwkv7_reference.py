"""The reference's RWKV-7 (models/reference/recur_ref/rwkv7.py) against BlinkDL's
`rwkv` package itself (RWKV_x070, its CPU path): models with the package's own
tensor names and shapes and trained-like magnitudes, saved as .pth in float32 and
bfloat16 and loaded by the package as a user does (`RWKV(path, "cpu fp32")`),
token by token and as one sequence, within 1e-4 + 1e-5·|y| of the reference's
float64 logits. The runtime is held to the reference by the parity tests."""
import os
import sys

import pytest
import torch

os.environ["RWKV_V7_ON"] = "1"
os.environ["RWKV_CUDA_ON"] = "0"

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "models", "reference"))
from recur_ref.rwkv7 import Rwkv7  # noqa: E402

ATOL, RTOL = 1e-4, 1e-5

# (layers, C, head size, vocab, decay / a / v / gate low-rank dims, positions)
CASES = [
    (2, 64, 16, 97, 16, 16, 8, 32, 40),
    (3, 128, 64, 301, 32, 32, 16, 64, 24),
    (2, 64, 32, 50, 16, 16, 8, 16, 1000),  # a long run: the state's sums over 1,000 positions
]


def random_state_dict(layers, c, n, vocab, d_w, d_a, d_v, d_g, seed):
    """BlinkDL's names and shapes (the .pth of RWKV-LM's RWKV-v7 trainer), with
    magnitudes like a trained model's: decays spread over (e^{-e^{-0.5}}, 1),
    token-shift mixes in (0, 1), low-rank paths that move their sigmoids."""
    g = torch.Generator().manual_seed(seed)
    u = lambda *shape, lo=-1.0, hi=1.0: lo + (hi - lo) * torch.rand(*shape, generator=g)
    nrm = lambda *shape, std=1.0: std * torch.randn(*shape, generator=g)
    h = c // n
    sd = {"emb.weight": nrm(vocab, c, std=0.5)}
    for i in range(layers):
        b, att, ffn = f"blocks.{i}.", f"blocks.{i}.att.", f"blocks.{i}.ffn."
        if i == 0:
            sd[b + "ln0.weight"], sd[b + "ln0.bias"] = u(c, lo=0.8, hi=1.2), u(c, lo=-0.1, hi=0.1)
        for ln in ("ln1", "ln2"):
            sd[b + ln + ".weight"], sd[b + ln + ".bias"] = u(c, lo=0.8, hi=1.2), u(c, lo=-0.1, hi=0.1)
        for m in ("x_r", "x_w", "x_k", "x_v", "x_a", "x_g"):
            sd[att + m] = u(1, 1, c, lo=0.0, hi=1.0)
        sd[att + "w0"] = u(1, 1, c, lo=-6.0, hi=1.0)
        sd[att + "w1"], sd[att + "w2"] = nrm(c, d_w, std=0.1), nrm(d_w, c, std=0.1)
        sd[att + "a0"] = u(1, 1, c, lo=-1.0, hi=1.0)
        sd[att + "a1"], sd[att + "a2"] = nrm(c, d_a, std=0.1), nrm(d_a, c, std=0.1)
        if i > 0:  # layer 0's v0, v1, v2 exist in the files but the package ignores them
            sd[att + "v0"] = u(1, 1, c, lo=-1.0, hi=1.0)
            sd[att + "v1"], sd[att + "v2"] = nrm(c, d_v, std=0.1), nrm(d_v, c, std=0.1)
        sd[att + "g1"], sd[att + "g2"] = nrm(c, d_g, std=0.1), nrm(d_g, c, std=0.1)
        sd[att + "k_k"] = u(1, 1, c, lo=0.7, hi=1.0)
        sd[att + "k_a"] = u(1, 1, c, lo=0.8, hi=1.2)
        sd[att + "r_k"] = nrm(h, n, std=0.3)
        for name in ("receptance", "key", "value", "output"):
            sd[att + name + ".weight"] = nrm(c, c, std=c ** -0.5)
        sd[att + "ln_x.weight"], sd[att + "ln_x.bias"] = u(c, lo=0.5, hi=1.5), u(c, lo=-0.1, hi=0.1)
        sd[ffn + "x_k"] = u(1, 1, c, lo=0.0, hi=1.0)
        sd[ffn + "key.weight"] = nrm(4 * c, c, std=c ** -0.5)
        sd[ffn + "value.weight"] = nrm(c, 4 * c, std=(4 * c) ** -0.5)
    sd["ln_out.weight"], sd["ln_out.bias"] = u(c, lo=0.8, hi=1.2), u(c, lo=-0.1, hi=0.1)
    sd["head.weight"] = nrm(vocab, c, std=c ** -0.5)
    return sd


def load_with_rwkv(path):
    """The package's RWKV_x070 on the CPU in float32. It calls torch.load(...,
    mmap=True), which this PyTorch (1.13) lacks: the keyword is dropped here."""
    from rwkv import model as rwkv_model
    load = torch.load

    def load_without_mmap(*args, mmap=None, **kwargs):
        return load(*args, **kwargs)

    rwkv_model.torch.load = load_without_mmap
    try:
        return rwkv_model.RWKV(model=path[: -len(".pth")], strategy="cpu fp32")
    finally:
        rwkv_model.torch.load = load


def check(got, want, what):
    bound = ATOL + RTOL * want.abs()
    worst = ((got - want).abs() - bound).max().item()
    assert worst <= 0, f"{what}: max |Δ| {(got - want).abs().max().item():.3e} past 1e-4 + 1e-5·|y|"
    return (got - want).abs().max().item()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("case", CASES)
def test_reference_matches_rwkv_package(case, dtype, tmp_path):
    layers, c, n, vocab, d_w, d_a, d_v, d_g, positions = case
    sd = random_state_dict(layers, c, n, vocab, d_w, d_a, d_v, d_g, seed=layers * 1000 + c)
    sd = {k: v.to(dtype) for k, v in sd.items()}
    path = str(tmp_path / "rwkv7.pth")
    torch.save(sd, path)
    package = load_with_rwkv(path)
    reference = Rwkv7(torch.load(path))  # the file's values, as the package read them
    tokens = torch.randint(0, vocab, (positions,), generator=torch.Generator().manual_seed(5)).tolist()
    want, _ = reference.forward(tokens)
    assert want.abs().max().item() > 0.5  # logits that are not all tiny

    with torch.no_grad():
        whole, _ = package.forward(tokens, None, full_output=True)
        check(whole.double(), want, "the package's sequence form")
        state, steps = None, []
        for t in tokens:
            logits, state = package.forward([t], state)
            steps.append(logits.double())
        check(torch.stack(steps), want, "the package's token-by-token form")
