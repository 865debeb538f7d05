#!/usr/bin/python3
"""Step latency of recur vs the PyTorch reference, side by side in one run.

    /usr/bin/python3 tests/bench/bench_vs_torch.py --config models/configs/paper_mnist.json \
        --recur-convert build/release/converter/recur-convert \
        --recur-bench build/release/examples/recur-bench [--batch 1 64] [--steps 300]

Exports the config's reference model (seed 1), converts it, then for each
batch size times (a) PyTorch eager: one recurrent step of B streams with the
reference's own modules, (b) the same step under TorchScript (torch.jit.trace),
and (c) recur-bench, all single-threaded, alternating so machine noise hits
all of them alike. Prints medians and the ratios PyTorch / recur.

PyTorch gets its best settings here: one intra-op thread (like recur),
torch.inference_mode(), Debian's OpenBLAS (libopenblas0-openmp) with
OPENBLAS_CORETYPE=SkylakeX on AVX-512 machines (set before torch loads).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_CORETYPE", "SkylakeX")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "models" / "reference"))
from recur_ref.checkpoint import export, load  # noqa: E402


class BatchedStep(torch.nn.Module):
    """One RNN step of B independent streams, written with the reference's
    modules (the same math as RecurModel.step, batched over streams)."""

    def __init__(self, model):
        super().__init__()
        self.m = model
        self.pre = model.config["norm_placement"] == "pre"

    def mixer(self, att, h, S, z):
        b = h.shape[0]
        q = F.elu(att.query(h)).add_(1).view(b, att.heads, att.dk)    # (B, H, dk)
        k = F.elu(att.key(h)).add_(1).view(b, att.heads, att.dk)
        v = att.value(h).view(b, att.heads, att.dv)                   # (B, H, dv)
        S = S + k.unsqueeze(-1) * v.unsqueeze(-2)                     # (B, H, dk, dv)
        z = z + k                                                     # (B, H, dk)
        num = torch.einsum("bhc,bhcm->bhm", q, S)
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


def embed(model, batch):
    cfg = model.config
    if cfg["input"]["kind"] == "tokens":
        ids = torch.randint(0, cfg["input"]["vocab_size"], (batch,))
        return model.input(ids, 0)
    return model.input(torch.randn(batch, cfg["input"]["feature_width"]), 0)


def time_torch(fn, x, S, z, steps, warmup=20):
    times = []
    for i in range(warmup + steps):
        t0 = time.perf_counter()
        _, S2, z2 = fn(x, S, z)
        t1 = time.perf_counter()
        if i >= warmup:
            times.append((t1 - t0) * 1e6)
    return statistics.median(times)


def recur_bench(binary, model_path, batch, steps):
    out = subprocess.run([binary, model_path, "--batch", str(batch), "--steps", str(steps),
                          "--json"], check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", required=True)
    ap.add_argument("--recur-convert", required=True)
    ap.add_argument("--recur-bench", required=True)
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 64])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds; medians of rounds")
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)

    with tempfile.TemporaryDirectory() as tmp:
        with open(args.config) as f:
            export(json.load(f), seed=1, out_dir=tmp)
        model_path = os.path.join(tmp, "model.recur")
        subprocess.run([args.recur_convert, os.path.join(tmp, "weights.safetensors"), "--config",
                        os.path.join(tmp, "config.json"), "-o", model_path], check=True,
                       capture_output=True)
        model, _ = load(tmp)
        model.eval()
        step = BatchedStep(model).eval()
        cfg = model.config
        m = cfg["mixer"]
        print(f"config {args.config}: {sum(p.numel() for p in model.parameters()):,} parameters; "
              f"torch {torch.__version__}, 1 thread, OPENBLAS_CORETYPE="
              f"{os.environ.get('OPENBLAS_CORETYPE')}")
        rows = []
        with torch.inference_mode():
            # The batched step must be the reference's step: check one stream.
            if cfg["input"]["kind"] == "tokens":
                x_t = torch.tensor(3)
                x1 = model.input(x_t.reshape(1), 0)
            else:
                x_t = torch.randn(cfg["input"]["feature_width"])
                x1 = model.input(x_t.reshape(1, -1), 0)
            S0 = [torch.zeros(1, m["heads"], m["dk"], m["dv"]) for _ in range(cfg["n_layers"])]
            z0 = [torch.zeros(1, m["heads"], m["dk"]) for _ in range(cfg["n_layers"])]
            want, _, _ = model.step(x_t, model.init_state())
            got = step(x1, S0, z0)[0][0]
            assert torch.allclose(got, want, atol=1e-5), "batched step differs from model.step"
            for batch in args.batch:
                x = embed(model, batch)
                S = [torch.zeros(batch, m["heads"], m["dk"], m["dv"]) for _ in range(cfg["n_layers"])]
                z = [torch.zeros(batch, m["heads"], m["dk"]) for _ in range(cfg["n_layers"])]
                traced = torch.jit.trace(step, (x, S, z), check_trace=False)
                eager_t, script_t, recur_t = [], [], []
                for _ in range(args.rounds):
                    eager_t.append(time_torch(step, x, S, z, args.steps))
                    script_t.append(time_torch(traced, x, S, z, args.steps))
                    recur_t.append(recur_bench(args.recur_bench, model_path, batch,
                                               args.steps)["median_us"])
                rows.append((batch, statistics.median(eager_t), statistics.median(script_t),
                             statistics.median(recur_t)))
    print(f"{'batch':>5} {'torch eager us':>15} {'torchscript us':>15} {'recur us':>10} "
          f"{'eager/recur':>12} {'script/recur':>13}")
    for batch, e, s, r in rows:
        print(f"{batch:>5} {e:>15.1f} {s:>15.1f} {r:>10.1f} {e / r:>11.2f}x {s / r:>12.2f}x")


if __name__ == "__main__":
    main()
