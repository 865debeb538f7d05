"""What the training recipes share: seeding, the learning-rate schedule, resumable
checkpoints, progress lines and the export to the converter's input."""

import argparse
import json
import math
import os
import time
from typing import Callable, Tuple

import torch
from torch import Tensor

from . import batched, checkpoint
from .model import REFERENCE_VERSION, RecurModel


def learning_rate(step: int, total: int, peak: float, warmup: int) -> float:
    """Linear warm-up to `peak`, then cosine decay to peak/10 at `total`."""
    if step < warmup:
        return peak * (step + 1) / warmup
    t = min(1.0, (step - warmup) / max(1, total - warmup))
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * t)))


class Checkpoint:
    """DIR/checkpoint.pt: model, optimizer, step, the torch RNG and the recipe's
    arguments; written atomically so an interrupted run resumes from the last one."""

    def __init__(self, work_dir: str):
        os.makedirs(work_dir, exist_ok=True)
        self.path = os.path.join(work_dir, "checkpoint.pt")

    def exists(self) -> bool:
        return os.path.exists(self.path)

    def save(self, model: RecurModel, optimizer, step: int, args: dict, extra: dict) -> None:
        tmp = self.path + ".tmp"
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step,
                    "rng": torch.get_rng_state(), "args": args, "extra": extra}, tmp)
        os.replace(tmp, self.path)

    def load(self, model: RecurModel, optimizer, args: dict):
        """Restores model, optimizer and RNG → (step, extra). ValueError if the recipe's
        arguments that shape the run differ from the checkpoint's."""
        saved = torch.load(self.path)
        for key in ("config", "seed", "batch", "precision", "init"):
            if saved["args"].get(key) != args.get(key):
                raise ValueError(f"{self.path} was written with {key}={saved['args'].get(key)!r}, "
                                 f"this run has {key}={args.get(key)!r}; use another --work dir")
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        torch.set_rng_state(saved["rng"])
        return saved["step"], saved["extra"]


class Progress:
    """One line every `every` steps: step, running loss, throughput, elapsed time."""

    def __init__(self, total: int, every: int, unit: str):
        self.total, self.every, self.unit = total, every, unit
        self.start = time.time()
        self.loss, self.count, self.items = 0.0, 0, 0
        self.last = self.start

    def update(self, step: int, loss: float, items: int, label: str) -> None:
        self.loss += loss
        self.count += 1
        self.items += items
        if (step + 1) % self.every and step + 1 != self.total:
            return
        now = time.time()
        print(f"step {step + 1}/{self.total}  {label} {self.loss / self.count:.4f}  "
              f"{self.items / (now - self.last):.1f} {self.unit}/s  elapsed {now - self.start:.0f} s", flush=True)
        self.loss, self.count, self.items, self.last = 0.0, 0, 0, now


def export(out_dir: str, model: RecurModel, config: dict, notes: dict) -> None:
    """The converter's input: out_dir/weights.safetensors + config.json, with the
    recipe's notes (command, data, steps, metrics) in the safetensors metadata."""
    metadata = {"format": "pt", "layout": "recur",
                "producer": f"recur reference (models/reference) v{REFERENCE_VERSION}"}
    metadata.update({k: str(v) for k, v in notes.items()})
    checkpoint.save(out_dir, model, config, metadata)


def add_arguments(p: argparse.ArgumentParser, batch: int, lr: float, warmup: int) -> None:
    """The options every recipe takes (the defaults given are the recipe's)."""
    p.add_argument("--config", required=True)
    p.add_argument("--work", required=True, help="checkpoint and export directory")
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--batch", type=int, default=batch)
    p.add_argument("--lr", type=float, default=lr)
    p.add_argument("--warmup", type=int, default=warmup)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0: torch's default)")
    p.add_argument("--minutes", type=float, default=0, help="stop after this wall-clock budget (0: none)")
    p.add_argument("--checkpoint-every", type=int, default=100)
    p.add_argument("--stop-after", type=int, default=0,
                   help="stop (after a checkpoint) once this run has made N steps, as an interruption would")
    p.add_argument("--init", default="",
                   help="start from the weights of this checkpoint.pt (a run of the same config) with a fresh "
                        "optimizer and schedule: fine-tuning, or training on past an earlier run's end")
    p.add_argument("--device", default="cpu")
    p.add_argument("--precision", choices=("bf16", "f32"), default="bf16",
                   help="training matmuls: bf16 runs the forward under torch.autocast (float32 weights and "
                        "optimizer; twice as fast on a CPU with AVX512-BF16/AMX)")


def build(p: argparse.ArgumentParser, args):
    """(config, model) of a recipe's --config: torch threads set, seeded, on --device, and
    runnable by recur_ref.batched (else a usage error naming the block)."""
    if args.threads:
        torch.set_num_threads(args.threads)
    with open(args.config) as f:
        config = json.load(f)
    torch.manual_seed(args.seed)
    model = RecurModel(config).to(args.device)
    try:
        batched.check_supported(model)
    except ValueError as e:
        p.error(str(e))
    return config, model


def autocast(args):
    """The context a recipe runs its forward in: bfloat16 matrix products for --precision bf16."""
    if args.precision == "bf16" and args.device == "cpu" and onednn_capped_below_avx512():
        # PyTorch sends bf16 matrix products to oneDNN by the CPU's own flags; oneDNN, capped
        # below AVX-512, then has no kernel for them. A CPU without AVX-512 runs them on
        # PyTorch's own kernels: so does the reference under the cap.
        torch.backends.mkldnn.enabled = False
    return torch.autocast(args.device, dtype=torch.bfloat16, enabled=args.precision == "bf16")


def onednn_capped_below_avx512() -> bool:
    """Whether ONEDNN_MAX_CPU_ISA holds oneDNN below AVX-512 (running as a smaller CPU:
    docs/testing.md, "Running as another CPU")."""
    cap = os.environ.get("ONEDNN_MAX_CPU_ISA", "").upper()
    return cap != "" and cap != "ALL" and "AVX512" not in cap and "AMX" not in cap


def train(p: argparse.ArgumentParser, args, model: RecurModel, loss_of_step: Callable[[int], Tuple[Tensor, int]],
          label: str, unit: str, scale: float = 1.0) -> Tuple[int, float]:
    """The loop every recipe shares: AdamW with learning_rate(), gradients clipped to 1,
    progress lines, a checkpoint every
    --checkpoint-every steps and at the end, resume from WORK/checkpoint.pt.
    loss_of_step(step) → (loss, items in the batch); the printed loss is loss·scale.
    Returns (steps done, training seconds over every run)."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.98), weight_decay=0.01)
    ckpt = Checkpoint(args.work)
    run_args = {"config": model.config, "seed": args.seed, "batch": args.batch, "precision": args.precision}
    if args.init:
        run_args["init"] = args.init
    step, extra = 0, {"seconds": 0.0}
    if args.init and not ckpt.exists():
        try:
            init = torch.load(args.init, map_location=args.device)
            if init.get("args", {}).get("config") != model.config:
                raise ValueError("it was written for another model config")
            model.load_state_dict(init["model"])
            extra["seconds"] = init["extra"]["seconds"]
        except (OSError, KeyError, ValueError, RuntimeError) as e:
            p.error(f"--init {args.init}: {e}")
        print(f"initialised from {args.init} (step {init['step']}, {extra['seconds']:.0f} s of training)")
    if ckpt.exists():
        try:
            step, extra = ckpt.load(model, optimizer, run_args)
        except ValueError as e:
            p.error(str(e))
        print(f"resumed from {ckpt.path} at step {step}")
    n_params = sum(t.numel() for t in model.parameters())
    print(f"{n_params} parameters; torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"device {args.device}, {args.precision}", flush=True)
    progress = Progress(args.steps, 20, unit)
    start = run_start = time.time()
    first_step = step
    model.train()
    while step < args.steps:
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(step, args.steps, args.lr, args.warmup)
        loss, items = loss_of_step(step)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        progress.update(step, loss.item() * scale, items, label)
        step += 1
        stop = (args.minutes and (time.time() - run_start) / 60 >= args.minutes) or \
            (args.stop_after and step - first_step >= args.stop_after)
        if step % args.checkpoint_every == 0 or step == args.steps or stop:
            extra["seconds"] += time.time() - start
            start = time.time()
            ckpt.save(model, optimizer, step, run_args, extra)
        if stop:
            print(f"stopping at step {step} (--minutes or --stop-after)")
            break
    model.eval()
    return step, extra["seconds"]
