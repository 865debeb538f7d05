"""The reference's Reformer in the transformers form (models/reference/recur_ref,
docs/attention-math.md §8) against Hugging Face transformers' LSHSelfAttention
and ReformerSelfOutput themselves, mixer against mixer: the same projections,
rotations and padding, in float64 (to 1e-10), and float32 transformers within
the bound every layout is held to except where the attention-math page says it
may not be (a query whose only unmasked key is itself). The runtime is held to
the reference by the parity tests (tests/parity)."""
import os
import sys

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
from transformers import ReformerConfig  # noqa: E402
from transformers.models.reformer import modeling_reformer  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "models", "reference"))
from recur_ref.mixers import Reformer  # noqa: E402

# (d_model, heads, head size, chunk, n_buckets, rounds, chunks before, after, is_decoder, T)
CASES = [
    (16, 2, 8, 8, 4, 2, 1, 0, False, 300),   # 4 pads
    (16, 2, 8, 8, 16, 2, 1, 0, False, 296),  # no pads
    (16, 2, 8, 8, 8, 3, 1, 1, True, 96),     # decoder, one chunk ahead, 3 rounds
    (16, 2, 8, 8, 8, 3, 1, 1, True, 93),     # and 3 pads
    (16, 3, 4, 4, 6, 1, 2, 1, False, 37),    # one round: no logsumexp weights
    (16, 2, 4, 4, 4, 1, 3, 2, False, 8),     # offsets past the 2 chunks (Python's slices clamp)
    (16, 2, 4, 4, 4, 2, 5, 0, True, 12),
    (16, 2, 8, 8, 4, 2, 1, 0, False, 7),     # n ≤ chunk: no hashing
    (16, 2, 8, 8, 4, 2, 1, 0, True, 8),
]
ATOL, RTOL = 1e-4, 1e-5


def pair(d, heads, size, chunk, nb, rounds, before, after, decoder, seed):
    """transformers' attention and output dense, and the reference mixer with their weights;
    rotations: the ones transformers draws from hash_seed (in float32, whatever the dtype)."""
    conf = ReformerConfig(hidden_size=d, num_attention_heads=heads, attention_head_size=size,
                          lsh_attn_chunk_length=chunk, num_buckets=nb, num_hashes=rounds,
                          lsh_num_chunks_before=before, lsh_num_chunks_after=after, is_decoder=decoder,
                          hash_seed=seed, lsh_attention_probs_dropout_prob=0.0, hidden_dropout_prob=0.0,
                          attn_layers=["lsh"])
    torch.manual_seed(seed)
    lsh = modeling_reformer.LSHSelfAttention(conf).eval()
    dense = modeling_reformer.ReformerSelfOutput(conf).eval()
    torch.manual_seed(seed)
    rotations = torch.randn(heads, size, rounds, nb // 2)
    cfg = {"type": "reformer", "form": "transformers", "heads": heads, "dk": size, "dv": size,
           "n_buckets": nb, "chunk": chunk, "rounds": rounds, "chunks_before": before, "chunks_after": after,
           "causal_mask": decoder, "pad_multiple": chunk, "pad_above": chunk}
    ref = Reformer(cfg, d)
    with torch.no_grad():
        ref.query.weight.copy_(lsh.query_key.weight)
        ref.value.weight.copy_(lsh.value.weight)
        ref.out.weight.copy_(dense.dense.weight)
        for b in (ref.query.bias, ref.value.bias, ref.out.bias):
            b.zero_()
        ref.rotations.copy_(rotations)
    return lsh, dense, ref


def library(lsh, dense, x, n, dtype, monkeypatch):
    """transformers' output for x (T, d) padded to n slots as ReformerModel pads (attention mask
    0 on the pads), the pads dropped."""
    randn = torch.randn

    def randn_f32(*args, dtype=None, **kwargs):   # its rotations, drawn in float32 for float64 too
        return randn(*args, dtype=torch.float32, **kwargs).to(dtype or torch.float32)

    monkeypatch.setattr(modeling_reformer.torch, "randn", randn_f32)
    t = len(x)
    h = torch.cat([x, torch.ones(n - t, x.shape[1])]).to(dtype)[None]
    mask = None if n == t else torch.cat([torch.ones(t), torch.zeros(n - t)]).long()[None]
    with torch.no_grad():
        out = dense.to(dtype)(lsh.to(dtype)(h, attention_mask=mask).hidden_states)[0, :t]
    monkeypatch.undo()
    return out


@pytest.mark.parametrize("case", CASES, ids=[f"T{c[-1]}_c{c[3]}_r{c[5]}_b{c[6]}a{c[7]}" +
                                               ("_decoder" if c[8] else "") for c in CASES])
def test_reformer_attention_equals_transformers(case, monkeypatch):
    *shape, t = case
    lsh, dense, ref = pair(*shape, seed=3)
    x = torch.randn(t, shape[0], generator=torch.Generator().manual_seed(4))
    n = ref.padded_length(t)
    assert n == (t if t % shape[3] == 0 or t <= shape[3] else t + shape[3] - t % shape[3])
    ours = ref.double().noncausal(x.double(), {})[0]
    lib64 = library(lsh, dense, x, n, torch.float64, monkeypatch)
    assert float((ours - lib64).abs().max()) <= 1e-10
    lib32 = library(lsh, dense, x, n, torch.float32, monkeypatch).double()
    bad = (ours - lib32).abs() > ATOL + RTOL * lib32.abs()
    if not shape[8]:   # no decoder: every query has a key other than itself
        assert not bad.any()
    else:              # transformers' float32 exp(s − lse) with lse ≈ −1e5: §8's ~2e−3
        assert float((ours - lib32).abs().max()) <= 5e-3
