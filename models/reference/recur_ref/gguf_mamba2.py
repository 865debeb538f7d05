"""Mamba2 GGUF files as llama.cpp's converter writes them: the layout tests' and the llama.cpp
benchmark's files.

write_gguf follows llama.cpp's convert_hf_to_gguf.py (Mamba2Model: set_gguf_parameters,
modify_tensors): llama.cpp's names, conv1d squeezed to (W, K), A = −exp(A_log) and D as
(H, 1), the gated norm's weight as (G, I/G), no output.weight when the head is the
embedding; the weight matrices (2-D, not the norms, A, D or the convolution) in the file's
type, the rest F32. write_random_gguf writes a random model at a published shape of
state-spaces' Mamba2 checkpoints (PUBLISHED_SHAPES). Needs the `gguf` package (0.19.0) and
numpy only.
"""
import gguf
import numpy as np
from gguf import GGMLQuantizationType as Q

# state-spaces/mamba2-*: (d_model, layers); d_state 128, head dim 64, expand 2, one group,
# kernel 4, GPT-NeoX's vocabulary of 50,277 padded to a multiple of 16, tied head.
PUBLISHED_SHAPES = {"130M": (768, 24), "370M": (1024, 48), "780M": (1536, 48),
                    "1.3B": (2048, 48), "2.7B": (2560, 64)}
PUBLISHED_VOCAB = 50288


def write_gguf(path, tensors, *, hidden, layers, heads, head_dim, state, groups, kernel, vocab,
               eps=1e-5, outtype=Q.F32, tokenizer=None):
    """Writes `tensors` ({llama.cpp name: float array of the shape llama.cpp stores}) as a
    GGUF of architecture mamba2; `tokenizer(writer)` may add a vocabulary (else tokenizer
    model "none")."""
    inner = heads * head_dim
    w = gguf.GGUFWriter(str(path), arch="mamba2")
    if tokenizer is None:
        w.add_tokenizer_model("none")
    else:
        tokenizer(w)
    w.add_vocab_size(vocab)
    w.add_context_length(2 ** 20)
    w.add_embedding_length(hidden)
    w.add_feed_forward_length(0)
    w.add_head_count(0)
    w.add_block_count(layers)
    w.add_ssm_conv_kernel(kernel)
    w.add_ssm_inner_size(inner)
    w.add_ssm_state_size(state)
    w.add_ssm_time_step_rank(heads)
    w.add_ssm_group_count(groups)
    w.add_layer_norm_rms_eps(eps)
    w.add_file_type({Q.F32: 0, Q.F16: 1, Q.Q8_0: 7}[outtype])  # llama_ftype
    for name, data in tensors.items():
        matrix = data.ndim == 2 and not name.endswith(("ssm_a", "ssm_d", "_norm.weight", "conv1d.weight"))
        qtype = outtype if matrix else Q.F32
        raw = None if qtype in (Q.F32, Q.F16) else qtype
        w.add_tensor(name, gguf.quants.quantize(np.asarray(data, np.float32), qtype), raw_dtype=raw)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def random_tensors(hidden, layers, vocab, *, heads, head_dim=64, state=128, groups=1, kernel=4,
                   seed=1):
    """A random Mamba2 under llama.cpp's names: matrices of standard deviation 1/√fan-in,
    Δ's bias giving softplus(bias) in [0.001, 0.1], A in [−16, −1], norms and D near 1."""
    rng = np.random.default_rng(seed)
    inner = heads * head_dim
    conv = inner + 2 * groups * state
    f32 = np.float32

    def matrix(rows, cols):
        return (rng.standard_normal((rows, cols), dtype=f32) / np.sqrt(cols)).astype(f32)

    def near_one(*shape):
        return (1 + 0.1 * rng.standard_normal(shape, dtype=f32)).astype(f32)

    out = {"token_embd.weight": rng.standard_normal((vocab, hidden), dtype=f32),
           "output_norm.weight": near_one(hidden)}
    for i in range(layers):
        b = f"blk.{i}."
        dt = np.exp(rng.uniform(np.log(1e-3), np.log(1e-1), heads))
        out[b + "attn_norm.weight"] = near_one(hidden)
        out[b + "ssm_in.weight"] = matrix(2 * inner + 2 * groups * state + heads, hidden)
        out[b + "ssm_conv1d.weight"] = (rng.standard_normal((conv, kernel), dtype=f32) / np.sqrt(kernel)).astype(f32)
        out[b + "ssm_conv1d.bias"] = (0.1 * rng.standard_normal(conv, dtype=f32)).astype(f32)
        out[b + "ssm_dt.bias"] = (dt + np.log(-np.expm1(-dt))).astype(f32)  # softplus⁻¹(dt)
        out[b + "ssm_a"] = -rng.uniform(1, 16, (heads, 1)).astype(f32)
        out[b + "ssm_d"] = near_one(heads, 1)
        out[b + "ssm_norm.weight"] = near_one(groups, inner // groups)
        out[b + "ssm_out.weight"] = matrix(hidden, inner)
    return out


def write_random_gguf(path, shape, outtype=Q.F16, seed=1, vocab=PUBLISHED_VOCAB):
    """A random Mamba2 at a published shape (PUBLISHED_SHAPES) as a GGUF file; returns its
    parameter count."""
    hidden, layers = PUBLISHED_SHAPES[shape]
    heads = 2 * hidden // 64
    tensors = random_tensors(hidden, layers, vocab, heads=heads, seed=seed)
    write_gguf(path, tensors, hidden=hidden, layers=layers, heads=heads, head_dim=64, state=128,
               groups=1, kernel=4, vocab=vocab, outtype=outtype)
    return sum(t.size for t in tensors.values())
