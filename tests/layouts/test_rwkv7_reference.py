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
from fla_naive import dplr_recurrence  # noqa: E402
from recur_ref.rwkv7 import Rwkv7, favour_continuation, random_state_dict, wkv_step  # noqa: E402

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


@pytest.mark.parametrize("heads,n,positions", [(2, 16, 50), (1, 64, 300)])
def test_state_update_matches_fla_dplr_recurrence(heads, n, positions):
    """The reference's state update (wkv_step) against flash-linear-attention's pure-PyTorch
    diagonal-plus-low-rank recurrence (fla-core's dplr/naive.py, float32): its S is the
    transpose (keys × values), it scales q by N^-1/2 (undone here: RWKV-7 reads with r
    unscaled), and RWKV-7 is its α = −κ̂, β = κ̂ ⊙ a, gk = log w."""
    g = torch.Generator().manual_seed(heads * 100 + n)
    t = lambda: torch.randn(positions, heads, n, generator=g, dtype=torch.float64)  # noqa: E731
    r, k, v = t(), t(), t()
    w = torch.exp(-0.606531 * torch.sigmoid(t()))
    kk = torch.nn.functional.normalize(t(), dim=-1)
    a = torch.sigmoid(t())
    s = torch.zeros(heads, n, n, dtype=torch.float64)
    ys = []
    for i in range(positions):
        y, s = wkv_step(s, r[i].reshape(-1), w[i].reshape(-1), k[i].reshape(-1), v[i].reshape(-1),
                        kk[i].reshape(-1), a[i].reshape(-1))
        ys.append(y.view(heads, n))
    want = torch.stack(ys)                                                  # (T, H, N)
    bhl = lambda x: x.permute(1, 0, 2)[None].float()  # noqa: E731  (T, H, N) → (1, H, T, N)
    o, state = dplr_recurrence(bhl(r) * n ** 0.5, bhl(k), bhl(v), bhl(-kk), bhl(kk * a), bhl(torch.log(w)))
    got = o[0].permute(1, 0, 2).double()
    check(got, want, "fla's dplr_recurrence: outputs")
    check(state[0].transpose(-1, -2).double(), s, "fla's dplr_recurrence: final state")


def test_favour_continuation():
    """The head favour_continuation gives (the llama.cpp parity models' head) makes the
    reference continue the prompt with the chosen tokens, greedily, with the top two logits
    apart by the gap it reports; it changes the head's rows of those tokens only."""
    sd = random_state_dict(2, 128, 64, 1000, 32, 32, 32, 64, seed=2)
    text = torch.randint(1, 1000, (88,), generator=torch.Generator().manual_seed(7)).tolist()
    favoured, gap = favour_continuation(sd, text, 24)
    model = Rwkv7(favoured)
    state, generated, gaps = model.zero_state(), [], []
    for t in text[:24]:
        logits, state = model.step(t, state)
    for _ in range(64):
        top2 = logits.topk(2)
        gaps.append(float(top2.values[0] - top2.values[1]) / float(logits.abs().max()))
        generated.append(int(top2.indices[0]))
        logits, state = model.step(generated[-1], state)
    assert generated == text[24:]
    assert gap > 0.05 and min(gaps) > 0.9 * gap, (gap, min(gaps))
    changed = (favoured["head.weight"] != sd["head.weight"]).any(dim=1).nonzero().view(-1).tolist()
    assert set(changed) == set(text[24:])
    assert all(torch.equal(favoured[k], sd[k]) for k in sd if k != "head.weight")
