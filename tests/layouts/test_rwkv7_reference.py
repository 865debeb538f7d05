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
from recur_ref.rwkv7 import Rwkv7, random_state_dict  # noqa: E402

ATOL, RTOL = 1e-4, 1e-5

# (layers, C, head size, vocab, decay / a / v / gate low-rank dims, positions)
CASES = [
    (2, 64, 16, 97, 16, 16, 8, 32, 40),
    (3, 128, 64, 301, 32, 32, 16, 64, 24),
    (2, 64, 32, 50, 16, 16, 8, 16, 1000),  # a long run: the state's sums over 1,000 positions
]


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
