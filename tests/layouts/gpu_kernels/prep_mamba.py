"""CPU side, before the GPU run: the three Mamba2 models of tests/layouts/test_mamba2.py
(make_model(case)) written in state-spaces' format (config.json + pytorch_model.bin, by the
test's own state_spaces_files) with the token inputs, into DATA/models/<case>/; then
recur's logits on them (recur-convert as the test runs it; prefill in one pass and token by
token) and the test's float64 reference of mamba_ssm's math (mamba_ssm_logits), into
DATA/cpu/<case>.npz (DATA: gpu_kernels.py's data folder).

Run from tests/layouts with build/venv/bin/python, PYTHONPATH=../../models/reference,
RECUR_CONVERT=../../build/release/converter/recur-convert (gpu_kernels.py's docstring).
"""
import os
import pathlib
import shutil
import sys

import numpy as np
import torch

REPO = pathlib.Path(__file__).resolve().parents[3]
DATA = pathlib.Path(os.environ.get("RECUR_GPU_KERNELS_DATA") or REPO / "build" / "gpu_kernels")
sys.path.insert(0, os.getcwd())
from layout_harness import recur_convert, tokens  # noqa: E402
from test_mamba2 import CASES, make_model, mamba_ssm_logits, state_spaces_files  # noqa: E402

import recur  # noqa: E402

BATCH = 2


def main():
    models, cpu = DATA / "models", DATA / "cpu"
    cpu.mkdir(parents=True, exist_ok=True)
    for case in CASES:
        name, positions, vocab = case[0], case[9], case[8]
        root = models / name
        if root.exists():
            shutil.rmtree(root)
        root.mkdir(parents=True)
        model = make_model(case)
        folder = state_spaces_files(model, case, root)       # root/state_spaces/
        xs = tokens(positions + 1, BATCH, positions, vocab)   # as test_state_spaces_against_mamba_ssm
        np.save(root / "tokens.npy", xs)
        out = cpu / f"{name}.recur"
        rc, err = recur_convert(folder / "pytorch_model.bin", "--config", folder / "config.json", "-o", out)
        assert rc == 0, err
        m = recur.Model(str(out))
        with m.session(batch=BATCH) as s:
            prefill = s.prefill(xs)
        with m.session(batch=BATCH) as s:
            step = np.stack([s.step(xs[:, t]) for t in range(positions)], axis=1)
        with torch.no_grad():
            ref = mamba_ssm_logits(folder, xs)
        np.savez(cpu / f"{name}.npz", recur_prefill=prefill, recur_step=step, ref64=ref, tokens=xs)
        print(f"{name}: tokens {xs.shape}, logits {prefill.shape}, max|ref| {np.abs(ref).max():.3f}, "
              f"recur prefill vs ref64 {np.abs(prefill - ref).max():.2e}, "
              f"recur step vs ref64 {np.abs(step - ref).max():.2e}")


if __name__ == "__main__":
    main()
