#!/usr/bin/env python3
"""Smoke check of the libraries of tests/layouts/requirements.txt in build/venv.

Imports each library that recur's converter imports models from, builds tiny
models of it with random weights on the CPU and runs them; prints one line per
library (its version and "ok", or what failed) and exits 1 on any failure.
Nothing is downloaded: the Hugging Face models are built from configs, and the
hub is switched off. Run it with build/venv/bin/python (scripts/python-env.sh).
"""

import contextlib
import importlib.metadata
import io
import os
import sys
import traceback

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import torch  # noqa: E402  (after the offline switches)

B, L = 2, 16  # batch and sequence length of every check


def check_finite(name, t):
    if not torch.isfinite(t).all():
        raise AssertionError(f"{name}: non-finite output")


def fast_transformers_check():
    from fast_transformers.builders import RecurrentEncoderBuilder, TransformerEncoderBuilder
    from fast_transformers.masking import TriangularCausalMask

    # The CPU extensions, all of them (an import error here: a broken build).
    import fast_transformers.aggregate.aggregate_cpu  # noqa: F401
    import fast_transformers.causal_product.causal_product_cpu  # noqa: F401
    import fast_transformers.clustering.hamming.cluster_cpu  # noqa: F401
    import fast_transformers.hashing.hash_cpu  # noqa: F401
    import fast_transformers.local_product.local_product_cpu  # noqa: F401
    import fast_transformers.sparse_product.clustered_sparse_product_cpu  # noqa: F401
    import fast_transformers.sparse_product.sparse_product_cpu  # noqa: F401

    dims = dict(n_layers=2, n_heads=2, query_dimensions=8, value_dimensions=8, feed_forward_dimensions=32)
    x = torch.randn(B, L, 16)
    causal = TriangularCausalMask(L)
    for attention, extra, mask in [("linear", {}, None), ("causal-linear", {}, causal), ("full", {}, None),
                                   ("local", {"local_context": 5}, None),
                                   ("reformer", {"chunk_size": 4, "rounds": 2}, None)]:
        encoder = TransformerEncoderBuilder.from_kwargs(attention_type=attention, **dims, **extra).get().eval()
        with torch.no_grad():
            y = encoder(x, attn_mask=mask)
        assert y.shape == x.shape, (attention, y.shape)
        check_finite(attention, y)
        if attention == "causal-linear":
            batch_encoder, batch_y = encoder, y

    # The recurrent form, one step at a time, with the weights of the causal-linear
    # encoder (the same state dict names): it must give the batch form's output.
    recurrent = RecurrentEncoderBuilder.from_kwargs(attention_type="causal-linear", **dims).get().eval()
    recurrent.load_state_dict(batch_encoder.state_dict())
    state, steps = None, []
    with torch.no_grad():
        for i in range(L):
            y_i, state = recurrent(x[:, i], state=state)
            steps.append(y_i)
    diff = (torch.stack(steps, dim=1) - batch_y).abs().max().item()
    if diff > 1e-4:
        raise AssertionError(f"recurrent causal-linear differs from the batch form by {diff}")


def performer_check():
    from performer_pytorch import Performer, PerformerLM

    x = torch.randn(B, L, 32)
    tokens = torch.randint(0, 50, (B, L))
    # The causal form without fast-transformers' CUDA extension prints a notice
    # and falls back to its PyTorch form: keep the output one line per library.
    with contextlib.redirect_stdout(io.StringIO()):
        for causal in (False, True):
            model = Performer(dim=32, depth=2, heads=2, dim_head=16, causal=causal, nb_features=16).eval()
            with torch.no_grad():
                y = model(x)
            assert y.shape == x.shape
            check_finite(f"Performer causal={causal}", y)
            # The LM, with local attention heads (local-attention) and the axial
            # positional embedding (axial-positional-embedding) too.
            for kwargs in ({}, {"local_attn_heads": 1, "local_window_size": 4,
                                "rotary_position_emb": False, "axial_position_emb": True,
                                "axial_position_shape": (4, 8)}):
                lm = PerformerLM(num_tokens=50, max_seq_len=32, dim=32, depth=2, heads=2, dim_head=16,
                                 causal=causal, nb_features=16, **kwargs).eval()
                with torch.no_grad():
                    logits = lm(tokens)
                assert logits.shape == (B, L, 50)
                check_finite(f"PerformerLM causal={causal} {kwargs}", logits)


def linformer_check():
    from linformer import Linformer, LinformerLM

    model = Linformer(dim=32, seq_len=L, depth=2, k=8, heads=2).eval()
    x = torch.randn(B, L, 32)
    lm = LinformerLM(num_tokens=50, dim=32, seq_len=L, depth=2, k=8, heads=2).eval()
    with torch.no_grad():
        y = model(x)
        logits = lm(torch.randint(0, 50, (B, L)))
    assert y.shape == x.shape and logits.shape == (B, L, 50)
    check_finite("Linformer", y)
    check_finite("LinformerLM", logits)


def flash_check():
    # FLASH-pytorch has no GAUTransformer (no release has): GAU is its
    # attention layer, FLASH the grouped one, FLASHTransformer the LM of FLASH.
    from flash_pytorch import FLASH, GAU, FLASHTransformer

    x = torch.randn(B, L, 32)
    tokens = torch.randint(0, 50, (B, L))
    for causal in (False, True):
        lm = FLASHTransformer(num_tokens=50, dim=32, depth=2, causal=causal, group_size=8, query_key_dim=16).eval()
        gau = GAU(dim=32, query_key_dim=16, causal=causal).eval()
        flash = FLASH(dim=32, group_size=8, query_key_dim=16, causal=causal).eval()
        with torch.no_grad():
            logits, y_gau, y_flash = lm(tokens), gau(x), flash(x)
        assert logits.shape == (B, L, 50) and y_gau.shape == x.shape and y_flash.shape == x.shape
        for name, t in (("FLASHTransformer", logits), ("GAU", y_gau), ("FLASH", y_flash)):
            check_finite(f"{name} causal={causal}", t)


def transformers_check():
    from transformers import (LongformerConfig, LongformerModel, ReformerConfig, ReformerModel,
                              ReformerModelWithLMHead)
    from transformers.utils import logging

    logging.set_verbosity_error()
    tokens = torch.randint(0, 50, (B, L))

    config = LongformerConfig(vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                              intermediate_size=64, attention_window=4, max_position_embeddings=64)
    model = LongformerModel(config).eval()
    with torch.no_grad():
        y = model(tokens).last_hidden_state
    assert y.shape == (B, L, 32), y.shape
    check_finite("LongformerModel", y)

    config = ReformerConfig(vocab_size=50, hidden_size=32, num_attention_heads=2, attention_head_size=16,
                            attn_layers=["local", "lsh"], feed_forward_size=64, axial_pos_embds=True,
                            axial_pos_shape=[4, 8], axial_pos_embds_dim=[16, 16], max_position_embeddings=32,
                            local_attn_chunk_length=4, lsh_attn_chunk_length=4, num_buckets=4, num_hashes=1,
                            is_decoder=True, pad_token_id=0, eos_token_id=1)
    for cls in (ReformerModelWithLMHead, ReformerModel):
        model = cls(config).eval()
        with torch.no_grad():
            out = model(tokens)
        y = out.logits if cls is ReformerModelWithLMHead else out.last_hidden_state
        # ReformerModel's output is the concatenation of its two reversible streams.
        assert y.shape == (B, L, 50 if cls is ReformerModelWithLMHead else 64), (cls.__name__, y.shape)
        check_finite(cls.__name__, y)


def safetensors_check():
    # transformers' dependency (save_pretrained); recur's own writer is
    # models/reference/recur_ref/safetensors.py.
    from safetensors.torch import load, save

    t = {"w": torch.randn(3, 4), "b": torch.arange(5, dtype=torch.int64)}
    back = load(save(t))
    assert all(torch.equal(t[k], back[k]) for k in t)


def rwkv_check():
    # BlinkDL's package: its RWKV-7 (RWKV_x070) is chosen when the module loads.
    os.environ["RWKV_V7_ON"] = "1"
    with contextlib.redirect_stdout(io.StringIO()):  # it prints a banner
        from rwkv import model

    assert hasattr(model, "RWKV_x070") and model.RWKV is model.RWKV_x070


def fla_check():
    # Only the pure-PyTorch references, by file path (the package's import needs triton).
    from fla_naive import dplr_recurrence

    q, k, v = (torch.randn(1, 2, 5, 4) for _ in range(3))
    a, b = torch.randn(1, 2, 5, 4), torch.randn(1, 2, 5, 4)
    o, s = dplr_recurrence(q, k, v, a, b, -torch.rand(1, 2, 5, 4))
    check_finite("fla dplr_recurrence", o)
    assert tuple(s.shape) == (1, 2, 4, 4)


def mamba_ssm_check():
    # Only the pure-PyTorch references of its kernels, read from its files (the package's
    # import needs triton and its CUDA extensions).
    from mamba_ssm_ref import rms_norm_ref, selective_state_update_ref

    state = torch.zeros(1, 4, 3, 5)
    x, dt, z = torch.randn(1, 4, 3), torch.randn(1, 4, 3), torch.randn(1, 12)
    y = selective_state_update_ref(state, x, dt, -torch.rand(4, 3, 5), torch.randn(1, 2, 5),
                                   torch.randn(1, 2, 5), torch.randn(4, 3), dt_softplus=True)
    y = rms_norm_ref(y.reshape(1, 12), torch.ones(12), None, z=z, group_size=6,
                     norm_before_gate=False)
    check_finite("mamba_ssm references", y)
    assert state.abs().sum() > 0, "selective_state_update_ref updates the state in place"


def gguf_check():
    # llama.cpp's GGUF writer, reader and quantisers (pure Python over numpy).
    import tempfile

    import gguf
    import numpy as np

    x = np.random.default_rng(0).standard_normal((2, 64)).astype(np.float32)
    q = gguf.quants.quantize(x, gguf.GGMLQuantizationType.Q4_0)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "t.gguf")
        w = gguf.GGUFWriter(path, arch="rwkv7")
        w.add_embedding_length(64)
        w.add_tensor("q", q, raw_shape=q.shape, raw_dtype=gguf.GGMLQuantizationType.Q4_0)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        (t,) = gguf.GGUFReader(path).tensors
        back = gguf.quants.dequantize(t.data, t.tensor_type).reshape(2, 64)
    assert np.abs(back - x).max() <= np.abs(x).max() / 7, "Q4_0 round trip"


CHECKS = [
    ("pytorch-fast-transformers", fast_transformers_check),
    ("performer-pytorch", performer_check),
    ("linformer", linformer_check),
    ("FLASH-pytorch", flash_check),
    ("transformers", transformers_check),
    ("safetensors", safetensors_check),
    ("rwkv", rwkv_check),
    ("fla-core", fla_check),
    ("mamba-ssm", mamba_ssm_check),
    ("gguf", gguf_check),
]


def main():
    torch.manual_seed(0)
    print(f"torch {torch.__version__} (from {os.path.dirname(torch.__file__)})")
    failed = 0
    for dist, check in CHECKS:
        try:
            version = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            version = "(not installed)"
        try:
            check()
            print(f"{dist} {version} ok")
        except Exception:
            failed += 1
            print(f"{dist} {version} FAILED")
            traceback.print_exc(file=sys.stdout)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
