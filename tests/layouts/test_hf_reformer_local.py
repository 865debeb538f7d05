"""The reference's block_local mixer (BlockLocalAttention, docs/attention-math.md §14)
against Hugging Face transformers' Reformer LocalSelfAttention itself, at the
mixer: the same query, key and value weights (zero biases), every length
from 1 to 26 with the padding ReformerModel adds (pad rows of any content,
masked through attention_mask), float64. Covers the cyclic look-around, a
chunk listed twice (m ≤ chunks_before + chunks_after), the causal mask with
chunks after, and padding to a multiple above a threshold."""
import os
import sys

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
from transformers import ReformerConfig  # noqa: E402
from transformers.models.reformer.modeling_reformer import LocalSelfAttention  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "models", "reference"))
from recur_ref import mixers  # noqa: E402

# (chunk, chunks_before, chunks_after, causal, pad_multiple, pad_above)
CASES = [(4, 1, 0, True, 4, 4), (4, 1, 1, False, 4, 4), (4, 2, 1, True, 8, 2), (3, 0, 0, False, 6, 1),
         (4, 3, 2, False, 4, 4), (8, 1, 0, True, 8, 8), (4, 1, 1, True, 4, 4)]


@pytest.mark.parametrize("chunk,before,after,causal,pad_multiple,pad_above", CASES)
def test_matches_local_self_attention(chunk, before, after, causal, pad_multiple, pad_above):
    torch.manual_seed(chunk * 100 + before * 10 + after)
    heads, dk, d = 2, 3, 10
    config = ReformerConfig(attn_layers=["local"], hidden_size=d, num_attention_heads=heads,
                            attention_head_size=dk, local_attn_chunk_length=chunk,
                            local_num_chunks_before=before, local_num_chunks_after=after,
                            is_decoder=causal, local_attention_probs_dropout_prob=0.0)
    library = LocalSelfAttention(config).double().eval()
    ours = mixers.BlockLocalAttention(
        {"type": "block_local", "heads": heads, "dk": dk, "dv": dk, "chunk": chunk, "chunks_before": before,
         "chunks_after": after, "causal": causal, "pad_multiple": pad_multiple, "pad_above": pad_above},
        d).double()
    with torch.no_grad():
        for name in ("query", "key", "value"):
            getattr(ours, name).weight.copy_(getattr(library, name).weight)
            getattr(ours, name).bias.zero_()
    for T in range(1, 27):
        x = torch.randn(2, T, d, dtype=torch.float64)
        n = ours.padded_length(T)
        padded = torch.cat([x, torch.randn(2, n - T, d, dtype=torch.float64)], 1)
        mask = torch.cat([torch.ones(2, T), torch.zeros(2, n - T)], 1).long() if n > T else None
        with torch.no_grad():
            want = library(padded, attention_mask=mask).hidden_states[:, :T]
            q, k, v = ours._qkv(x)
            got = ours.full(q, k, v).transpose(1, 2).reshape(2, T, -1)
        assert (want - got).abs().max().item() < 1e-12, f"T={T}"
