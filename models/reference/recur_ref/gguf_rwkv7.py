"""RWKV-7 GGUF files as llama.cpp's converter writes them, from a BlinkDL state dict, and
back: the layout tests' and the llama.cpp benchmark's files.

write_gguf follows llama.cpp's conversion of Hugging Face RWKV-7 checkpoints
(conversion/rwkv.py, class Rwkv7Model, and ModelBase.prepare_tensors in the sources of
llama.cpp's convert_hf_to_gguf.py): llama.cpp's names through the gguf package's own
name map, the low-rank matrices transposed, the six token-shift mixes fused into one
(6, 1, 1, C) tensor, r_k flattened, layer 0's unused value-residual tensors written as
copies of its a0, a1, a2, the metadata keys; Q4_0 as llama-quantize --pure leaves it;
Q4_K, Q5_K and Q6_K as llama-quantize's Q4_K_M, Q5_K_M and Q6_K choose them for an RWKV-7,
with blocks of a simple quantiser of its own (quantize_k: the gguf package quantises no
K-quant); no vocabulary (tokenizer model "none"), or one in the rwkv package's text
format as llama.cpp's _set_vocab_rwkv_world writes it (tokenizer model "rwkv").
blinkdl_from_gguf reads a file back, dequantised, under BlinkDL's names.
Needs the `gguf` package (0.19.0)."""
import ast

import gguf
import numpy as np
import torch
from gguf import GGMLQuantizationType as Q

from .rwkv7 import PUBLISHED_SHAPES, published_widths, random_state_dict

MIXES = ["r", "w", "k", "v", "a", "g"]  # convert_hf_to_gguf.py's lerp_list: the fused tensor's rows
LORAS = [f"time_mix_{p}{i}.weight" for p in "wavg" for i in (1, 2)]


def hf_names(sd):
    """BlinkDL's names as the Hugging Face RWKV-7 checkpoints that convert_hf_to_gguf.py
    reads without fla's lora modules have them (model.layers.<i>.attention.w1, ...)."""
    out = {}
    for name, t in sd.items():
        if name == "emb.weight":
            name = "model.embeddings.weight"
        elif name.startswith("ln_out."):
            name = "model." + name
        elif name.startswith("blocks.0.ln0."):
            name = "model.layers.0.pre_norm." + name.split(".")[-1]
        elif name.startswith("blocks."):
            _, i, rest = name.split(".", 2)
            rest = rest.replace("att.", "attention.").replace("ffn.", "feed_forward.")
            name = f"model.layers.{i}.{rest}"
        out[name] = t
    return out


def llama_cpp_tensors(hf, layers):
    """The tensors of llama.cpp's convert_hf_to_gguf.py, class Rwkv7Model, modify_tensors
    (conversion/rwkv.py where the script is split into modules), for a checkpoint with
    BlinkDL's low-rank layout (lora_needs_transpose stays True): (GGUF name, float32
    array) in the order the script yields them."""
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.RWKV7, layers)
    map_name = lambda n: names.get_name(n, try_suffixes=(".weight", ".bias"))  # noqa: E731
    lerp, out = {}, []
    for name, data in hf.items():
        bid = int(name.split(".")[2]) if name.startswith("model.layers.") else None
        if "attention.v" in name and "value" not in map_name(name) and bid == 0:
            continue  # layer 0's v0, v1, v2: unused, dropped
        if bid is not None and "attention.x_" in name:
            lerp.setdefault(bid, {})[name] = data
            if all(f"model.layers.{bid}.attention.x_{i}" in lerp[bid] for i in MIXES):
                fused = torch.stack([lerp[bid][f"model.layers.{bid}.attention.x_{i}"] for i in MIXES],
                                    dim=0)  # six (1, 1, C): (6, 1, 1, C)
                out.append((f"blk.{bid}.time_mix_lerp_fused.weight", fused.numpy()))
            continue
        data = data.squeeze()
        new = map_name(name)
        if not (new.endswith(".weight") or new.endswith(".bias")):
            new += ".weight"
        if any(new.endswith(t) for t in LORAS):
            data = data.transpose(0, 1)
        if "r_k" in new:
            data = data.flatten()
        if bid == 0 and "time_mix_a" in new:  # layer 0's dummy v0, v1, v2 for llama.cpp's loader
            out.append((new.replace("time_mix_a", "time_mix_v"), data.contiguous().numpy()))
        out.append((new, data.contiguous().numpy()))
    return out


def file_type(name, data, outtype):
    """The ggml type convert_hf_to_gguf.py (ModelBase.prepare_tensors, conversion/base.py
    where split) gives a tensor for --outtype f32/f16/bf16/q8_0, or llama-quantize for
    Q4_0 (--pure), Q4_K (the Q4_K_M mix), Q5_K (Q5_K_M) and Q6_K (from an F32 file:
    src/llama-quant.cpp's tensor_allows_quantization keeps norms, 1-D tensors and the
    RWKV low-rank and mix tensors as they are; Q4_K_M and Q5_K_M store output.weight in
    Q6_K and, since no RWKV-7 name is one of their attn_v or ffn_down categories, every
    other quantised matrix in Q4_K or Q5_K)."""
    if data.ndim <= 1 or name.endswith("_norm.weight") or not name.endswith(".weight"):
        return Q.F32
    if any(k in name for k in ("time_mix_w1", "time_mix_w2", "time_mix_lerp_fused")):
        return Q.F32
    if outtype in (Q.Q4_0, Q.Q4_K, Q.Q5_K, Q.Q6_K):
        skip = ("time_mix_w0", "time_mix_v0", "time_mix_v1", "time_mix_v2", "time_mix_a0",
                "time_mix_a1", "time_mix_a2", "time_mix_g1", "time_mix_g2")
        if any(k in name for k in skip):
            return Q.F32
        if outtype in (Q.Q4_K, Q.Q5_K) and name == "output.weight":
            return Q.Q6_K
        return outtype
    if outtype in (Q.Q8_0, Q.Q5_0, Q.Q4_1) and data.shape[-1] % 32 != 0:
        return Q.F16  # gguf.QuantError: the script falls back to F16
    return outtype


def _f16_bytes(v):
    """float32 values (blocks,) as f16, rounded to nearest, as (blocks, 2) bytes."""
    return np.asarray(v, dtype=np.float32).astype(np.float16).reshape(-1, 1).view(np.uint8)


def _pack_scales_q4k(ls, lm):
    """ggml's packing of 8 six-bit scales and mins per block (quantize_row_q4_K_ref): the
    12 scale bytes, (blocks, 12)."""
    out = np.zeros((ls.shape[0], 12), dtype=np.uint8)
    out[:, 0:4] = ls[:, 0:4] | ((ls[:, 4:8] >> 4) << 6)
    out[:, 4:8] = lm[:, 0:4] | ((lm[:, 4:8] >> 4) << 6)
    out[:, 8:12] = (ls[:, 4:8] & 0xF) | ((lm[:, 4:8] & 0xF) << 4)
    return out


def quantize_k(data, qtype):
    """A float32 matrix (rows, cols), cols a multiple of 256, as ggml's Q4_K, Q5_K or
    Q6_K blocks, (rows, cols / 256 · block bytes) uint8, by a simple round-to-nearest
    quantiser (not llama-quantize's search): Q4_K and Q5_K with each sub-block of 32
    between its min (≤ 0) and max, Q6_K symmetric in sub-blocks of 16."""
    rows, cols = data.shape
    x = np.asarray(data, dtype=np.float32).reshape(-1, 256).astype(np.float64)
    nb = x.shape[0]
    if qtype in (Q.Q4_K, Q.Q5_K):
        top = 15 if qtype == Q.Q4_K else 31
        sub = x.reshape(nb, 8, 32)
        mins = np.maximum(-sub.min(axis=2), 0.0)                # m·dmin, subtracted
        scales = (sub.max(axis=2) + mins) / top
        d = _f16_bytes(scales.max(axis=1) / 63.0)
        dmin = _f16_bytes(mins.max(axis=1) / 63.0)
        d32 = d.view(np.float16).astype(np.float64)
        dmin32 = dmin.view(np.float16).astype(np.float64)
        with np.errstate(divide="ignore", invalid="ignore"):
            ls = np.where(d32 > 0, np.rint(scales / d32), 0).clip(0, 63).astype(np.uint8)
            lm = np.where(dmin32 > 0, np.rint(mins / dmin32), 0).clip(0, 63).astype(np.uint8)
            step = (d32 * ls)[:, :, None]
            q = np.where(step > 0, np.rint((sub + (dmin32 * lm)[:, :, None]) / step), 0)
        q = q.clip(0, top).astype(np.uint8).reshape(nb, 4, 2, 32)  # chunks of 64: low, high
        lo = q & 0xF
        qs = (lo[:, :, 0, :] | (lo[:, :, 1, :] << 4)).reshape(nb, 128)
        parts = [d, dmin, _pack_scales_q4k(ls, lm)]
        if qtype == Q.Q5_K:  # fifth bits: chunk c's low nibbles bit 2c of qh[l], high 2c + 1
            hi = (q >> 4).astype(np.uint8)
            qh = np.zeros((nb, 32), dtype=np.uint8)
            for c in range(4):
                qh |= (hi[:, c, 0, :] << (2 * c)) | (hi[:, c, 1, :] << (2 * c + 1))
            parts.append(qh)
        blocks = np.concatenate(parts + [qs], axis=1)
    elif qtype == Q.Q6_K:
        sub = x.reshape(nb, 16, 16)
        scales = np.abs(sub).max(axis=2) / 31.0
        d = _f16_bytes(scales.max(axis=1) / 127.0)
        d32 = d.view(np.float16).astype(np.float64)
        with np.errstate(divide="ignore", invalid="ignore"):
            ls = np.where(d32 > 0, np.rint(scales / d32), 0).clip(-128, 127).astype(np.int8)
            step = (d32 * ls)[:, :, None]
            q = np.where(step != 0, np.rint(sub / step), 0)
        q = (q.clip(-32, 31) + 32).astype(np.uint8).reshape(nb, 2, 4, 32)  # halves, quarters
        lo = q & 0xF
        ql = np.concatenate([lo[:, :, 0] | (lo[:, :, 2] << 4), lo[:, :, 1] | (lo[:, :, 3] << 4)],
                            axis=2).reshape(nb, 128)
        qh = ((q[:, :, 0] >> 4) | ((q[:, :, 1] >> 4) << 2) | ((q[:, :, 2] >> 4) << 4)
              | ((q[:, :, 3] >> 4) << 6)).reshape(nb, 64)
        blocks = np.concatenate([ql, qh, ls.view(np.uint8), d], axis=1)
    else:
        raise ValueError(f"quantize_k: {qtype.name} is not Q4_K, Q5_K or Q6_K")
    return np.ascontiguousarray(blocks.reshape(rows, -1))


def add_rwkv_world_vocab(w, vocab_path, vocab_size):
    """The vocabulary of the rwkv package's text file `vocab_path` (its
    rwkv_vocab_v20230424.txt, or one of that format) as llama.cpp's
    _set_vocab_rwkv_world writes it: "<s>" (a control token) at id 0, each token as
    repr(bytes)[2:-1], "[PAD<i>]" (unused) up to vocab_size, tokenizer model "rwkv",
    bos and eos 0 and eot 261 ("\\n\\n")."""
    tokens = ["<s>".encode("utf-8")]
    toktypes = [gguf.TokenType.CONTROL]
    with open(vocab_path, "r", encoding="utf-8") as f:
        for line in f.readlines():
            parts = line.split(" ")
            assert len(parts) >= 3
            token, token_len = ast.literal_eval(" ".join(parts[1:-1])), int(parts[-1])
            token = token.encode("utf-8") if isinstance(token, str) else token
            assert isinstance(token, bytes)
            assert len(token) == token_len
            tokens.append(repr(token)[2:-1].encode("utf-8"))  # "b'\\xff'" -> "\\xff"
            toktypes.append(gguf.TokenType.NORMAL)
    assert vocab_size >= len(tokens)
    for i in range(len(tokens), vocab_size):
        tokens.append(f"[PAD{i}]".encode("utf-8"))
        toktypes.append(gguf.TokenType.UNUSED)
    w.add_tokenizer_model("rwkv")
    w.add_token_list(tokens)
    w.add_token_types(toktypes)
    w.add_bos_token_id(0)
    w.add_eos_token_id(0)
    w.add_eot_token_id(261)


def add_gpt2_vocab(w, tokenizer_json, vocab_size):
    """The byte-level BPE of a Hugging Face `tokenizer_json` (a path) as llama.cpp's
    convert_hf_to_gguf.py writes a GPT-2-like one (get_vocab_base): normal tokens in the
    byte-level alphabet, added ones as their text (control when special, user defined
    otherwise), "[PAD<i>]" (unused) up to vocab_size, merges as "left right", tokenizer
    model "gpt2", pre-tokenizer "gpt-2", bos and eos 0."""
    import json
    with open(tokenizer_json, encoding="utf-8") as f:
        spec = json.load(f)
    by_id = {i: t for t, i in spec["model"]["vocab"].items()}
    added = {a["id"]: a for a in spec["added_tokens"]}
    tokens, types = [], []
    for i in range(vocab_size):
        if i in added:
            tokens.append(added[i]["content"])
            types.append(gguf.TokenType.CONTROL if added[i]["special"] else gguf.TokenType.USER_DEFINED)
        elif i in by_id:
            tokens.append(by_id[i])
            types.append(gguf.TokenType.NORMAL)
        else:
            tokens.append(f"[PAD{i}]")
            types.append(gguf.TokenType.UNUSED)
    merges = [m if isinstance(m, str) else " ".join(m) for m in spec["model"]["merges"]]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(0)
    w.add_eos_token_id(0)


def add_vocab_of(w, gguf_path):
    """The vocabulary of another GGUF file (llama.cpp's models/ggml-vocab-*.gguf, say): its
    tokenizer.ggml.* keys, copied."""
    reader = gguf.GGUFReader(str(gguf_path))
    keys = {k: v.contents() for k, v in reader.fields.items() if k.startswith("tokenizer.ggml.")}
    w.add_tokenizer_model(keys["tokenizer.ggml.model"])
    if "tokenizer.ggml.pre" in keys:
        w.add_tokenizer_pre(keys["tokenizer.ggml.pre"])
    w.add_token_list(keys["tokenizer.ggml.tokens"])
    if "tokenizer.ggml.token_type" in keys:
        w.add_token_types(keys["tokenizer.ggml.token_type"])
    if "tokenizer.ggml.merges" in keys:
        w.add_token_merges(keys["tokenizer.ggml.merges"])
    for k in ("bos", "eos"):
        if f"tokenizer.ggml.{k}_token_id" in keys:
            getattr(w, f"add_{k}_token_id")(keys[f"tokenizer.ggml.{k}_token_id"])


def add_vocab(w, vocab, rows):
    """The vocabulary at path `vocab` for an embedding of `rows`: a Hugging Face
    tokenizer.json of a byte-level BPE (add_gpt2_vocab), another GGUF file (add_vocab_of),
    or one in the rwkv package's text format (add_rwkv_world_vocab)."""
    if str(vocab).endswith(".json"):
        add_gpt2_vocab(w, vocab, rows)
    elif str(vocab).endswith(".gguf"):
        add_vocab_of(w, vocab)
    else:
        add_rwkv_world_vocab(w, vocab, rows)


def write_gguf(path, sd, outtype, layers, c, n, d_w, d_a, d_v, d_g, eps=1e-5, vocab=None):
    """A GGUF file of BlinkDL state dict `sd`, as Rwkv7Model's set_gguf_parameters and
    modify_tensors and prepare_tensors write it. vocab: None, or the path of the
    vocabulary the file carries: a Hugging Face tokenizer.json of a byte-level BPE
    (add_gpt2_vocab), another GGUF file (add_vocab_of), or one in the rwkv package's text
    format (add_rwkv_world_vocab)."""
    w = gguf.GGUFWriter(str(path), arch="rwkv7")
    if vocab is None:
        # No vocabulary (llama.cpp's tokenizer model "none" with the vocabulary's size), so
        # that llama.cpp loads the file too; recur reads the size from token_embd.
        w.add_tokenizer_model("none")
        w.add_vocab_size(sd["emb.weight"].shape[0])
    else:
        add_vocab(w, vocab, sd["emb.weight"].shape[0])
    w.add_context_length(1048576)
    w.add_embedding_length(c)
    w.add_block_count(layers)
    w.add_layer_norm_eps(eps)
    w.add_wkv_head_size(n)
    w.add_decay_lora_rank(d_w)
    w.add_iclr_lora_rank(d_a)
    w.add_value_residual_mix_lora_rank(d_v)
    w.add_gate_lora_rank(d_g)
    w.add_feed_forward_length(sd["blocks.0.ffn.key.weight"].shape[0])
    # llama.cpp's LLAMA_FTYPE: Q4_K stands for MOSTLY_Q4_K_M (15), Q5_K for MOSTLY_Q5_K_M
    # (17), Q6_K for MOSTLY_Q6_K (18).
    w.add_file_type({Q.F32: 0, Q.F16: 1, Q.Q4_0: 2, Q.Q4_1: 3, Q.Q5_0: 8, Q.Q8_0: 7, Q.Q4_K: 15, Q.Q5_K: 17,
                     Q.Q6_K: 18, Q.BF16: 32}[outtype])
    w.add_head_count(0)
    types = {}
    for name, data in llama_cpp_tensors(hf_names(sd), layers):
        qtype = types[name] = file_type(name, data, outtype)
        if qtype in (Q.Q4_K, Q.Q5_K, Q.Q6_K):
            q = quantize_k(data.astype(np.float32), qtype)
        else:
            q = gguf.quants.quantize(data.astype(np.float32), qtype)
        if qtype in (Q.F32, Q.F16):
            w.add_tensor(name, q)
        else:
            w.add_tensor(name, q, raw_shape=q.shape, raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return types


def blinkdl_from_gguf(path, heads, n):
    """The file's tensors, dequantised to float32 and renamed back to BlinkDL's names and
    shapes: the weights the converted model must compute with."""
    sd = {}
    for t in gguf.GGUFReader(str(path)).tensors:
        data = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        data = torch.from_numpy(data.reshape([int(d) for d in reversed(t.shape)]).copy())
        name = t.name
        if name == "token_embd.weight":
            sd["emb.weight"] = data
        elif name == "output.weight":
            sd["head.weight"] = data
        elif name.startswith("output_norm."):
            sd["ln_out." + name.split(".")[-1]] = data
        elif name.startswith("token_embd_norm."):
            sd["blocks.0.ln0." + name.split(".")[-1]] = data
        else:
            _, i, rest = name.split(".", 2)
            b, att, ffn = f"blocks.{i}.", f"blocks.{i}.att.", f"blocks.{i}.ffn."
            part, suffix = rest.rsplit(".", 1)
            vec = data.reshape(1, 1, -1)
            if part in ("time_mix_v0", "time_mix_v1", "time_mix_v2") and i == "0":
                continue  # copies of a0, a1, a2; the package ignores layer 0's v0, v1, v2
            if part == "attn_norm":
                sd[b + "ln1." + suffix] = data
            elif part == "attn_norm_2":
                sd[b + "ln2." + suffix] = data
            elif part == "time_mix_lerp_fused":
                for k, m in enumerate(MIXES):
                    sd[att + "x_" + m] = data[k].reshape(1, 1, -1)
            elif part in ("time_mix_w0", "time_mix_a0", "time_mix_v0"):
                sd[att + part[-2:]] = vec
            elif part[:-1] in ("time_mix_w", "time_mix_a", "time_mix_v", "time_mix_g"):
                sd[att + part[-2:]] = data.T.contiguous()
            elif part in ("time_mix_k_k", "time_mix_k_a"):
                sd[att + part[-3:]] = vec
            elif part == "time_mix_r_k":
                sd[att + "r_k"] = data.reshape(heads, n)
            elif part == "time_mix_ln":
                sd[att + "ln_x." + suffix] = data
            elif part in ("time_mix_key", "time_mix_value", "time_mix_receptance"):
                sd[att + part[9:] + ".weight"] = data
            elif part == "time_mix_output":
                sd[att + "output.weight"] = data
            elif part == "channel_mix_lerp_k":
                sd[ffn + "x_k"] = vec
            elif part in ("channel_mix_key", "channel_mix_value"):
                sd[ffn + part[12:] + ".weight"] = data
            else:
                raise AssertionError(f"unexpected tensor {name}")
    return sd


def write_random_gguf(path, shape, outtype=Q.F16, seed=1):
    """A random RWKV-7 at a published shape (PUBLISHED_SHAPES: layers, C; head size 64,
    vocabulary 65,536, FFN 4C) as a GGUF file; returns its parameter count."""
    layers, c = PUBLISHED_SHAPES[shape]
    d_w, d_a, d_v, d_g = published_widths(c)
    sd = random_state_dict(layers, c, 64, 65536, d_w, d_a, d_v, d_g, seed=seed)
    write_gguf(path, sd, outtype, layers, c, 64, d_w, d_a, d_v, d_g)
    return sum(v.numel() for v in sd.values())
