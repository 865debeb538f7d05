"""RWKV-7 GGUF files as llama.cpp's converter writes them, from a BlinkDL state dict, and
back: the layout tests' and the llama.cpp benchmark's files.

write_gguf follows llama.cpp's conversion of Hugging Face RWKV-7 checkpoints
(conversion/rwkv.py, class Rwkv7Model, and ModelBase.prepare_tensors in the sources of
llama.cpp's convert_hf_to_gguf.py): llama.cpp's names through the gguf package's own
name map, the low-rank matrices transposed, the six token-shift mixes fused into one
(6, 1, 1, C) tensor, r_k flattened, layer 0's unused value-residual tensors written as
copies of its a0, a1, a2, the metadata keys; Q4_0 as llama-quantize --pure leaves it.
blinkdl_from_gguf reads a file back, dequantised, under BlinkDL's names.
Needs the `gguf` package (0.19.0)."""
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
    where split) gives a tensor for --outtype f32/f16/bf16/q8_0, or llama-quantize --pure
    for Q4_0 (from an F32 file: src/llama-quant.cpp's tensor_allows_quantization keeps
    norms, 1-D tensors and the RWKV low-rank and mix tensors as they are)."""
    if data.ndim <= 1 or name.endswith("_norm.weight") or not name.endswith(".weight"):
        return Q.F32
    if any(k in name for k in ("time_mix_w1", "time_mix_w2", "time_mix_lerp_fused")):
        return Q.F32
    if outtype == Q.Q4_0:
        skip = ("time_mix_w0", "time_mix_v0", "time_mix_v1", "time_mix_v2", "time_mix_a0",
                "time_mix_a1", "time_mix_a2", "time_mix_g1", "time_mix_g2")
        return Q.F32 if any(k in name for k in skip) else Q.Q4_0
    if outtype == Q.Q8_0 and data.shape[-1] % 32 != 0:
        return Q.F16  # gguf.QuantError: the script falls back to F16
    return outtype


def write_gguf(path, sd, outtype, layers, c, n, d_w, d_a, d_v, d_g, eps=1e-5):
    """A GGUF file of BlinkDL state dict `sd`, as Rwkv7Model's set_gguf_parameters and
    modify_tensors and prepare_tensors write it."""
    w = gguf.GGUFWriter(str(path), arch="rwkv7")
    # No vocabulary (llama.cpp's tokenizer model "none" with the vocabulary's size), so that
    # llama.cpp loads the file too; recur reads the size from token_embd.
    w.add_tokenizer_model("none")
    w.add_vocab_size(sd["emb.weight"].shape[0])
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
    w.add_file_type({Q.F32: 0, Q.F16: 1, Q.Q4_0: 2, Q.Q8_0: 7, Q.BF16: 32}[outtype])
    w.add_head_count(0)
    types = {}
    for name, data in llama_cpp_tensors(hf_names(sd), layers):
        qtype = types[name] = file_type(name, data, outtype)
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
