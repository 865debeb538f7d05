#!/usr/bin/env python3
"""The libraries' real GPU kernels against the pure-PyTorch references recur's CPU tests use.

By hand, on a CUDA machine (not in CI). Its data folder DATA is $RECUR_GPU_KERNELS_DATA, else
build/gpu_kernels. First, where the tests' environment is (scripts/python-env.sh):

    mkdir -p build/gpu_kernels/site
    cp -r build/venv/lib/python3.*/site-packages/{fla,mamba_ssm} build/gpu_kernels/site/
    (cd tests/layouts && PYTHONPATH=../../models/reference \
        RECUR_CONVERT=../../build/release/converter/recur-convert \
        ../../build/venv/bin/python gpu_kernels/prep_mamba.py)

fla-core 0.6.0 and mamba_ssm 2.2.4 as source (Python and Triton; no CUDA extensions needed).
Then, on the GPU machine, with PyTorch and Triton (DATA carried there):

    PYTHONUNBUFFERED=1 python3 tests/layouts/gpu_kernels/gpu_kernels.py   # writes $OUT, else DATA/out
    python3 tests/layouts/gpu_kernels/report.py DATA/out/results.json     # the table

The driver starts one process per (part, precision): parts mamba, gdn, gla, rwkv7; precision
"default" (Triton's own default for fp32 tl.dot, TF32 on NVIDIA; PyTorch's defaults for cuBLAS
and cuDNN) and "ieee" (TRITON_F32_DEFAULT=ieee, cuDNN and cuBLAS TF32 off). Each prints one line
per comparison (max|Δ|, max|ref|, their ratio) and appends a JSON record to results.json.

  mamba: the three models of tests/layouts/test_mamba2.py in state-spaces' files
         (DATA/models, written by prep_mamba.py), loaded by mamba_ssm's MambaLMHeadModel in
         float32 with use_mem_eff_path False (causal_conv1d absent: nn.Conv1d), its forward
         (mamba_chunk_scan_combined, Triton gated RMSNorm, Triton fused add+RMSNorm), its
         generation step from empty states (Mamba2.step: selective_state_update) and half
         prefilled then stepped; against recur's logits and the float64 reference of
         mamba_ssm's math (DATA/cpu/*.npz, from prep_mamba.py).
  gdn/gla/rwkv7: fla's chunk and fused_recurrent Triton forms against fla's naive.py
         recurrences run in float64 (their float32 casts made float64), on the GPU.

--dry-cpu runs the fla parts on the CPU with the naive float32 functions standing in for the
kernels (checks the harness where there is no GPU).
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tarfile
import threading
import time
import traceback
import types

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
DATA = os.environ.get("RECUR_GPU_KERNELS_DATA") or os.path.join(REPO, "build", "gpu_kernels")
SITE = os.path.join(DATA, "site")
OUT = os.environ.get("OUT") or os.path.join(DATA, "out")
WORK = os.path.join(DATA, "work")
DEADLINE_S = float(os.environ.get("KERN_DEADLINE_S", "240"))   # the driver kills what is left then
LOWER_W = -0.6065306597126334   # RWKV-7's log-decay bound (fla's layer: w = LOWER_W * sigmoid(.))

import numpy as np  # noqa: E402
import torch  # noqa: E402


# ------------------------------------------------------------------------------------------
# driver
# ------------------------------------------------------------------------------------------

# Each job: one child process. rt: every Triton autotuner cut to one config (restrict_autotune):
# the kernels compile in seconds rather than minutes; for the precision diagnostics only.
# tril_ieee: gdn's chunk kernel with its solve_tril block merge (SOLVE_TRIL_DOT_PRECISION,
# 'tf32' on NVIDIA whatever TRITON_F32_DEFAULT says) set to 'ieee'.
PLANS = {
    "full": [dict(part="mamba", prec="default"), dict(part="mamba", prec="ieee"),
             dict(part="gdn", prec="default"), dict(part="gla", prec="default"),
             dict(part="rwkv7", prec="default"), dict(part="gdn", prec="ieee"),
             dict(part="gla", prec="ieee"), dict(part="rwkv7", prec="ieee")],
    # for a shorter deadline: the ieee jobs with one autotune config each, RWKV-7's forms apart
    # (Triton's compiles and fla's autotuning take most of "full"'s time: give it 600 s)
    "rest": [dict(part="mamba", prec="ieee", rt=True),
             dict(part="rwkv7", prec="default", forms="fused_recurrent_rwkv7,fused_mul_recurrent_rwkv7",
                  dtypes="fp32,bf16", tag="fused"),
             dict(part="rwkv7", prec="default", forms="chunk_rwkv7 safe_gate", dtypes="bf16", tag="chunk-bf16"),
             dict(part="rwkv7", prec="default", forms="chunk_rwkv7 safe_gate", dtypes="fp32", ts="37,1000",
                  tag="chunk-fp32"),
             dict(part="rwkv7", prec="ieee", rt=True,
                  forms="chunk_rwkv7 safe_gate,fused_recurrent_rwkv7,fused_mul_recurrent_rwkv7"),
             dict(part="gla", prec="ieee", rt=True),
             dict(part="gdn", prec="ieee", rt=True, tril_ieee=True)],
}


def job_tag(job):
    return "-".join([job["part"], job["prec"]] + (["rt"] if job.get("rt") else [])
                    + (["tril-ieee"] if job.get("tril_ieee") else []) + ([job["tag"]] if job.get("tag") else []))


def job_args(job):
    args = ["--child", job["part"], "--prec", job["prec"], "--tag", job_tag(job)]
    for key in ("forms", "dtypes", "ts", "cases"):
        if job.get(key):
            args += ["--" + key, job[key]]
    return args + (["--rt"] if job.get("rt") else []) + (["--tril-ieee"] if job.get("tril_ieee") else [])


def file_version(path, key="__version__"):
    try:
        for line in open(path, encoding="utf-8"):
            if line.startswith(key):
                return line.split("=")[1].strip().strip("\"'")
    except OSError:
        pass
    return "?"


def driver(args):
    start = time.time()
    os.makedirs(OUT, exist_ok=True)
    os.makedirs(os.path.join(WORK, "npz"), exist_ok=True)
    logf = open(os.path.join(OUT, "kern.log"), "a", encoding="utf-8")
    lock = threading.Lock()

    def emit(line):
        with lock:
            print(line, flush=True)
            logf.write(line + "\n")
            logf.flush()

    import triton
    emit(f"python {sys.version.split()[0]}  torch {torch.__version__}  triton {triton.__version__}  "
         f"cuda {torch.version.cuda}  gpu {torch.cuda.get_device_name(0)}  "
         f"fla {file_version(os.path.join(SITE, 'fla', '__init__.py'))}  "
         f"mamba_ssm {file_version(os.path.join(SITE, 'mamba_ssm', '__init__.py'))}")
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                              "--format=csv,noheader"], capture_output=True, text=True, timeout=20)
        emit(f"nvidia-smi: {smi.stdout.strip()}")
    except Exception as e:  # noqa: BLE001
        emit(f"nvidia-smi: {e!r}")
    jobs = [j for j in PLANS[args.plan] if not args.parts or j["part"] in args.parts.split(",")]
    procs = []
    for job in jobs:
        part, prec, tag = job["part"], job["prec"], job_tag(job)
        env = dict(os.environ, PYTHONUNBUFFERED="1", TRITON_CACHE_DIR=os.path.join(WORK, "triton_cache", tag),
                   PYTHONPATH=SITE + (":" + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH") else ""))
        env.pop("TRITON_F32_DEFAULT", None)
        if prec == "ieee":
            env["TRITON_F32_DEFAULT"] = "ieee"
        p = subprocess.Popen([sys.executable, os.path.abspath(__file__), *job_args(job)],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)

        def pump(p=p, tag=f"[{tag}]"):
            for line in p.stdout:
                emit(f"{tag} {line.rstrip()}")
        t = threading.Thread(target=pump, daemon=True)
        t.start()
        procs.append((tag, p, t))
    for tag, p, t in procs:
        left = DEADLINE_S - (time.time() - start)
        try:
            p.wait(timeout=max(left, 1))
        except subprocess.TimeoutExpired:
            emit(f"[{tag}] killed at the driver's deadline ({DEADLINE_S:.0f} s)")
            p.kill()
            p.wait()
        t.join(timeout=5)
        emit(f"[{tag}] exit {p.returncode}")
    records = []
    for job in jobs:
        path = os.path.join(WORK, f"{job_tag(job)}.jsonl")
        if os.path.exists(path):
            records += [json.loads(line) for line in open(path, encoding="utf-8") if line.strip()]
    with open(os.path.join(OUT, "results.json"), "w", encoding="utf-8") as f:
        json.dump(records, f, indent=1)
    npz = sorted(os.listdir(os.path.join(WORK, "npz")))
    if npz:
        with tarfile.open(os.path.join(OUT, "mamba_logits.tar"), "w") as tar:
            for name in npz:
                tar.add(os.path.join(WORK, "npz", name), arcname=name)
    emit(f"driver: {len(records)} records, {len(npz)} npz files, wall {time.time() - start:.1f} s")


# ------------------------------------------------------------------------------------------
# shared by the children
# ------------------------------------------------------------------------------------------

class Recorder:
    def __init__(self, part, prec, tag, dry=False):
        self.part, self.prec, self.tag = part, prec, tag
        os.makedirs(WORK, exist_ok=True)
        self.path = os.path.join(WORK, f"{tag}{'_dry' if dry else ''}.jsonl")
        open(self.path, "w").close()

    def compare(self, what, form, dtype, T, got, ref, **extra):
        got = torch.as_tensor(got).double().cpu()
        ref = torch.as_tensor(ref).double().cpu()
        assert got.shape == ref.shape, (what, form, tuple(got.shape), tuple(ref.shape))
        diff = (got - ref).abs().max().item()
        scale = ref.abs().max().item()
        finite = bool(torch.isfinite(got).all())
        rec = dict(part=self.part, prec=self.prec, job=self.tag, what=what, form=form, dtype=dtype, T=T,
                   shape=list(ref.shape), max_abs_diff=diff, max_ref=scale,
                   rel=diff / scale if scale else float("nan"), finite=finite, **extra)
        print(f"{what:<34} {form:<38} {dtype:<5} T={T:<5} max|Δ| {diff:.3e}  max|ref| {scale:9.4f}  "
              f"ratio {rec['rel']:.3e}{'' if finite else '  NON-FINITE'}", flush=True)
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(rec) + "\n")
        return rec


def section(name, fn, *a, **k):
    t0 = time.time()
    try:
        fn(*a, **k)
        print(f"-- {name}: done in {time.time() - t0:.1f} s", flush=True)
    except Exception:  # noqa: BLE001
        print(f"-- {name}: FAILED after {time.time() - t0:.1f} s", flush=True)
        traceback.print_exc(file=sys.stdout)
        sys.stdout.flush()


def sync(dev):
    if dev == "cuda":
        torch.cuda.synchronize()


def set_precision(prec):
    """ieee: no TF32 anywhere (Triton's fp32 dot by TRITON_F32_DEFAULT, set by the driver;
    cuBLAS and cuDNN here). default: PyTorch's defaults, left as they are."""
    if prec == "ieee":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    print(f"precision {prec}: TRITON_F32_DEFAULT={os.environ.get('TRITON_F32_DEFAULT', '(unset)')} "
          f"cuda.matmul.allow_tf32={torch.backends.cuda.matmul.allow_tf32} "
          f"cudnn.allow_tf32={torch.backends.cudnn.allow_tf32}", flush=True)


RESTRICTED = [0]


def restrict_autotune():
    """Every triton Autotuner made from here on keeps one config (the smallest by the product of
    its integer block sizes, then num_stages, then |num_warps − 4|): no benchmarking, one compile
    per kernel. Called before fla / mamba_ssm are imported (their decorators make the Autotuners).
    (Ordered by num_stages first, as an earlier version did, fla's kernels ran on an H200 but
    mamba_ssm's _chunk_state_fwd_kernel got 128×256×64 tiles, past the shared memory; this
    order has not run on a GPU yet.)"""
    from triton.runtime import autotuner
    original = autotuner.Autotuner.__init__

    def size(c):
        p = 1
        for v in c.kwargs.values():
            if isinstance(v, int) and not isinstance(v, bool):
                p *= v
        return (p, c.num_stages or 0, abs((c.num_warps or 4) - 4))

    def init(self, *a, **k):
        original(self, *a, **k)
        if len(self.configs) > 1:
            self.configs = [min(self.configs, key=size)]
            RESTRICTED[0] += 1
    autotuner.Autotuner.__init__ = init
    print("autotune restricted to one config per kernel", flush=True)


def dot_probe(rec):
    """Which precision Triton's tl.dot gives fp32 operands in this process: a 64×64×64 product
    against float64 (TF32: ~1e-3 of max; IEEE: ~1e-7)."""
    import triton
    import triton.language as tl
    try:
        from triton import knobs
        print(f"triton knobs.language.fp32_default = {knobs.language.fp32_default!r}", flush=True)
    except Exception as e:  # noqa: BLE001
        print(f"triton knobs: {e!r}", flush=True)

    @triton.jit
    def probe(a, b, c, N: tl.constexpr):
        o = tl.arange(0, N)
        x = tl.load(a + o[:, None] * N + o[None, :])
        y = tl.load(b + o[:, None] * N + o[None, :])
        tl.store(c + o[:, None] * N + o[None, :], tl.dot(x, y))

    g = torch.Generator().manual_seed(0)
    a = torch.randn(64, 64, generator=g).cuda()
    b = torch.randn(64, 64, generator=g).cuda()
    c = torch.empty(64, 64, device="cuda")
    probe[(1,)](a, b, c, N=64)
    rec.compare("tl.dot fp32 probe", "64x64x64 vs float64", "fp32", 0, c, a.double() @ b.double())


def load_naive(rel, func, subs=()):
    """A function of fla's naive.py file `rel`, read by path (as tests/layouts/fla_naive.py
    does), with the textual substitutions `subs` (to run it in float64)."""
    path = os.path.join(SITE, "fla", rel)
    src = open(path, encoding="utf-8").read()
    for a, b in subs:
        assert a in src, (rel, a)
        src = src.replace(a, b)
    ns = {"__name__": "naive_" + func}
    exec(compile(src, path, "exec"), ns)
    return ns[func]


def rnd(gen, *shape):
    return torch.randn(*shape, generator=gen, dtype=torch.float32)


def l2(x, eps=1e-6):
    """fla's l2norm kernel: x / √(Σx² + eps)."""
    return x / torch.sqrt((x * x).sum(-1, keepdim=True) + eps)


# ------------------------------------------------------------------------------------------
# fla: gated delta rule
# ------------------------------------------------------------------------------------------

B, DK, DV = 2, 64, 64
OPTS = argparse.Namespace(forms="", dtypes="", ts="", cases="", rt=False, tril_ieee=False)


def opt_ts():
    return tuple(int(t) for t in (OPTS.ts or os.environ.get("KERN_TS", "1000,37")).split(","))


def opt_dtypes(prec):
    return OPTS.dtypes.split(",") if OPTS.dtypes else ["fp32"] + (["bf16"] if prec == "default" else [])


def wanted(form):
    return not OPTS.forms or any(form.startswith(f) for f in OPTS.forms.split(","))


def naive_lines(dt_name, prec):
    """The naive float32 function (as the CPU tests run it) against float64: once, in the full plan."""
    return dt_name == "fp32" and prec == "default" and not OPTS.forms


def run_forms(rec, dev, part, forms, dt_name, T, o_ref, s_ref, shape):
    """Each wanted (form, call) of an fla part: its output and final state against the
    references, timed; a form that fails is reported and the next one runs."""
    for form, call in forms:
        if not wanted(form):
            continue
        t0 = time.time()
        try:
            with torch.no_grad():
                o, s = call()
            sync(dev)
            dt_s = time.time() - t0
            rec.compare(f"{part} {form}", "output", dt_name, T, o, o_ref, shapes=shape, seconds=dt_s)
            rec.compare(f"{part} {form}", "final state", dt_name, T, s, s_ref, shapes=shape, seconds=dt_s)
        except Exception:  # noqa: BLE001
            print(f"{part} {form} {dt_name} T={T}: FAILED", flush=True)
            traceback.print_exc(file=sys.stdout)


def gdn_inputs(T, seed):
    """[B,T,H,K] q, k (raw: the kernels normalise them), [B,T,HV,V] v, [B,T,HV] β, g (the
    layer's g = −exp(A_log)·softplus(a + dt_bias), A in [1, 16], dt from [1e-3, 1e-1]), h0."""
    H, HV = 2, 4
    g = torch.Generator().manual_seed(seed)
    q, k, v = rnd(g, B, T, H, DK), rnd(g, B, T, H, DK), rnd(g, B, T, HV, DV)
    beta = torch.sigmoid(rnd(g, B, T, HV))
    A_log = torch.log(1 + 15 * torch.rand(HV, generator=g))
    dt = torch.exp(torch.rand(HV, generator=g) * (math.log(0.1) - math.log(0.001)) + math.log(0.001))
    dt_bias = dt + torch.log(-torch.expm1(-dt))
    gate = -torch.exp(A_log) * torch.nn.functional.softplus(rnd(g, B, T, HV) + dt_bias)
    h0 = 0.5 * rnd(g, B, HV, DK, DV)
    return dict(q=q, k=k, v=v, beta=beta, g=gate, h0=h0, rep=HV // H)


def gdn_reference(naive, x, dtype):
    rep = x["rep"]
    q = l2(x["q"].to(dtype)).repeat_interleave(rep, 2)
    k = l2(x["k"].to(dtype)).repeat_interleave(rep, 2)
    return naive(q, k, x["v"].to(dtype), x["beta"].to(dtype), x["g"].to(dtype), scale=DK ** -0.5,
                 initial_state=x["h0"].to(dtype), output_final_state=True)


def run_gdn(rec, dev, prec, dry):
    naive32 = load_naive("ops/gated_delta_rule/naive.py", "naive_recurrent_gated_delta_rule")
    naive64 = load_naive("ops/gated_delta_rule/naive.py", "naive_recurrent_gated_delta_rule",
                         [("torch.float32", "torch.float64")])
    if dry:
        def chunk(q, k, v, g, beta, scale, initial_state, output_final_state, use_qk_l2norm_in_kernel):
            rep = v.shape[2] // q.shape[2]
            return naive32(l2(q).repeat_interleave(rep, 2), l2(k).repeat_interleave(rep, 2), v, beta, g,
                           scale=DK ** -0.5, initial_state=initial_state, output_final_state=True)
        fused = chunk
    else:
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule as chunk
        if OPTS.tril_ieee:
            import triton.language as tl
            import fla.ops.gated_delta_rule.chunk_fwd as chunk_fwd
            print(f"SOLVE_TRIL_DOT_PRECISION was {chunk_fwd.SOLVE_TRIL_DOT_PRECISION!r}: set to 'ieee'", flush=True)
            chunk_fwd.SOLVE_TRIL_DOT_PRECISION = tl.constexpr("ieee")
        from fla.ops.gated_delta_rule import fused_recurrent_gated_delta_rule as fused
    dtypes = opt_dtypes(prec)
    for dt_name in dtypes:
        for T in opt_ts():
            x = {k: (v.to(dev) if torch.is_tensor(v) else v) for k, v in gdn_inputs(T, 100 + T).items()}
            if dt_name == "bf16":   # the layer: q, k, v, β bf16; g float32; the state float32
                for n in ("q", "k", "v", "beta"):
                    x[n] = x[n].bfloat16()
            t0 = time.time()
            o_ref, s_ref = gdn_reference(naive64, x, torch.float64)
            sync(dev)
            print(f"   naive float64 T={T}: {time.time() - t0:.1f} s", flush=True)
            shape = f"B{B} H2 HV4 K{DK} V{DV}"
            if naive_lines(dt_name, prec):
                o32, s32 = gdn_reference(naive32, x, torch.float32)
                rec.compare("gdn naive fp32 (CPU tests' ref)", "output", dt_name, T, o32, o_ref, shapes=shape)
                rec.compare("gdn naive fp32 (CPU tests' ref)", "final state", dt_name, T, s32, s_ref, shapes=shape)
            forms = [("chunk_gated_delta_rule", lambda: chunk(
                        x["q"], x["k"], x["v"], x["g"], x["beta"], scale=None, initial_state=x["h0"].clone(),
                        output_final_state=True, use_qk_l2norm_in_kernel=True)),
                     ("fused_recurrent_gated_delta_rule", lambda: fused(
                        x["q"], x["k"], x["v"], g=x["g"], beta=x["beta"], scale=None,
                        initial_state=x["h0"].clone(), output_final_state=True, use_qk_l2norm_in_kernel=True))]
            run_forms(rec, dev, "gdn", forms, dt_name, T, o_ref, s_ref, shape)


# ------------------------------------------------------------------------------------------
# fla: GLA
# ------------------------------------------------------------------------------------------

def gla_inputs(T, seed):
    """q, k, v [B,T,H,K|V]; gk = logsigmoid(·)/16 as the layer (gate_logit_normalizer 16), its
    bias spread over [−2, 4] as test_fla_gated's; h0."""
    H = 4
    g = torch.Generator().manual_seed(seed)
    q, k, v = rnd(g, B, T, H, DK), rnd(g, B, T, H, DK), rnd(g, B, T, H, DV)
    bias = -2 + 6 * torch.rand(H, DK, generator=g)
    gk = torch.nn.functional.logsigmoid(rnd(g, B, T, H, DK) + bias) / 16
    h0 = 0.5 * rnd(g, B, H, DK, DV)
    return dict(q=q, k=k, v=v, gk=gk, h0=h0)


def run_gla(rec, dev, prec, dry):
    naive32 = load_naive("ops/gla/naive.py", "naive_recurrent_gla")
    naive64 = load_naive("ops/gla/naive.py", "naive_recurrent_gla",
                         [(".float()", ".double()"), ("torch.float32", "torch.float64")])
    if dry:
        def chunk(q, k, v, g, scale, initial_state, output_final_state):
            return naive32(q, k, v, g, initial_state=initial_state, output_final_state=True)

        def fused(q, k, v, gk, scale, initial_state, output_final_state):
            return naive32(q, k, v, gk, initial_state=initial_state, output_final_state=True)
    else:
        from fla.ops.gla import chunk_gla as chunk
        from fla.ops.gla import fused_recurrent_gla as fused
    dtypes = opt_dtypes(prec)
    for dt_name in dtypes:
        for T in opt_ts():
            x = {k: v.to(dev) for k, v in gla_inputs(T, 200 + T).items()}
            if dt_name == "bf16":   # q, k, v, gk bf16 (the layer's projections); the state float32
                for n in ("q", "k", "v", "gk"):
                    x[n] = x[n].bfloat16()
            ref = lambda naive, d: naive(x["q"].to(d), x["k"].to(d), x["v"].to(d), x["gk"].to(d),  # noqa: E731
                                         initial_state=x["h0"].to(d), output_final_state=True)
            o_ref, s_ref = ref(naive64, torch.float64)
            shape = f"B{B} H4 K{DK} V{DV}"
            if naive_lines(dt_name, prec):
                o32, s32 = ref(naive32, torch.float32)
                rec.compare("gla naive fp32 (CPU tests' ref)", "output", dt_name, T, o32, o_ref, shapes=shape)
                rec.compare("gla naive fp32 (CPU tests' ref)", "final state", dt_name, T, s32, s_ref, shapes=shape)
            forms = [("chunk_gla", lambda: chunk(x["q"], x["k"], x["v"], g=x["gk"], scale=None,
                                                 initial_state=x["h0"].clone(), output_final_state=True)),
                     ("fused_recurrent_gla", lambda: fused(x["q"], x["k"], x["v"], gk=x["gk"], scale=None,
                                                           initial_state=x["h0"].clone(),
                                                           output_final_state=True))]
            run_forms(rec, dev, "gla", forms, dt_name, T, o_ref, s_ref, shape)


# ------------------------------------------------------------------------------------------
# fla: RWKV-7 (the diagonal-plus-low-rank recurrence)
# ------------------------------------------------------------------------------------------

def rwkv7_inputs(T, seed):
    """r, k, v; w = log decay = LOWER_W·sigmoid(·) as fla's layer; κ̂ (kk) L2-normalised; a in
    (0, 1); h0. The recurrence: S ← diag(e^w) S + k vᵀ + (κ̂ ⊙ a)(−κ̂ᵀ S), o = rᵀ S (scale 1)."""
    H = 4
    g = torch.Generator().manual_seed(seed)
    r, k, v = rnd(g, B, T, H, DK), rnd(g, B, T, H, DK), rnd(g, B, T, H, DV)
    w = LOWER_W * torch.sigmoid(rnd(g, B, T, H, DK))
    kk = torch.nn.functional.normalize(rnd(g, B, T, H, DK), dim=-1)
    a = torch.sigmoid(rnd(g, B, T, H, DK))
    h0 = 0.5 * rnd(g, B, H, DK, DV)
    return dict(r=r, k=k, v=v, w=w, kk=kk, a=a, h0=h0)


def run_rwkv7(rec, dev, prec, dry):
    naive32 = load_naive("ops/generalized_delta_rule/dplr/naive.py", "dplr_recurrence")
    naive64 = load_naive("ops/generalized_delta_rule/dplr/naive.py", "dplr_recurrence",
                         [(".float()", ".double()")])

    def dplr(naive, x, d):
        """dplr_recurrence in [B,H,T,D]; it scales q by dk^-½, undone here (RWKV-7 reads with r)."""
        bhl = lambda t: t.to(d).transpose(1, 2)  # noqa: E731
        o, s = naive(bhl(x["r"]) * DK ** 0.5, bhl(x["k"]), bhl(x["v"]), bhl(x["alpha"]), bhl(x["beta"]),
                     bhl(x["w"]), initial_state=x["h0"].to(d), output_final_state=True)
        return o.transpose(1, 2), s

    if dry:
        def chunk(r, w, k, v, a, b, scale, initial_state, output_final_state, **kw):
            return dplr(naive32, dict(r=r, w=w, k=k, v=v, alpha=a, beta=b, h0=initial_state), torch.float32)
        fused = chunk

        def fused_mul(r, w, k, v, kk, a, scale, initial_state, output_final_state):
            return chunk(r, w, k, v, -kk, kk * a, scale, initial_state, output_final_state)
    else:
        from fla.ops.rwkv7 import chunk_rwkv7 as chunk
        from fla.ops.rwkv7 import fused_mul_recurrent_rwkv7 as fused_mul
        from fla.ops.rwkv7 import fused_recurrent_rwkv7 as fused
    dtypes = opt_dtypes(prec)
    for dt_name in dtypes:
        for T in opt_ts():
            x = {k: v.to(dev) for k, v in rwkv7_inputs(T, 300 + T).items()}
            if dt_name == "bf16":   # the layer's r, w, k, v, κ̂, a in bf16 (and −κ̂, κ̂·a made there); state float32
                for n in ("r", "w", "k", "v", "kk", "a"):
                    x[n] = x[n].bfloat16()
            x["alpha"], x["beta"] = -x["kk"], x["kk"] * x["a"]
            o_ref, s_ref = dplr(naive64, x, torch.float64)
            shape = f"B{B} H4 K{DK} V{DV}"
            if naive_lines(dt_name, prec):
                o32, s32 = dplr(naive32, x, torch.float32)
                rec.compare("rwkv7 naive fp32 (CPU tests' ref)", "output", dt_name, T, o32, o_ref, shapes=shape)
                rec.compare("rwkv7 naive fp32 (CPU tests' ref)", "final state", dt_name, T, s32, s_ref, shapes=shape)
            common = dict(scale=1.0, output_final_state=True)
            forms = [("chunk_rwkv7 safe_gate chunk64 (layer)", lambda: chunk(
                        x["r"], x["w"], x["k"], x["v"], a=x["alpha"], b=x["beta"], initial_state=x["h0"].clone(),
                        safe_gate=True, chunk_size=64, **common)),
                     ("chunk_rwkv7 (defaults)", lambda: chunk(
                        x["r"], x["w"], x["k"], x["v"], a=x["alpha"], b=x["beta"], initial_state=x["h0"].clone(),
                        **common)),
                     ("fused_recurrent_rwkv7", lambda: fused(
                        x["r"], x["w"], x["k"], x["v"], a=x["alpha"], b=x["beta"], initial_state=x["h0"].clone(),
                        **common)),
                     ("fused_mul_recurrent_rwkv7 (layer)", lambda: fused_mul(
                        x["r"], x["w"], x["k"], x["v"], kk=x["kk"], a=x["a"], initial_state=x["h0"].clone(),
                        **common))]
            run_forms(rec, dev, "rwkv7", forms, dt_name, T, o_ref, s_ref, shape)


# ------------------------------------------------------------------------------------------
# mamba_ssm: whole models
# ------------------------------------------------------------------------------------------

def import_mamba():
    """mamba_ssm 2.2.4 without its CUDA extensions: selective_scan_cuda (imported at the top of
    selective_scan_interface, unused by Mamba2) is stubbed; transformers 5 dropped names that
    mamba_ssm.utils.generation imports (aliased here)."""
    sys.modules.setdefault("selective_scan_cuda", types.ModuleType("selective_scan_cuda"))
    try:
        import transformers.generation as tg
        for name in ("GreedySearchDecoderOnlyOutput", "SampleDecoderOnlyOutput"):
            try:
                getattr(tg, name)
            except Exception:  # noqa: BLE001
                setattr(tg, name, tg.GenerateDecoderOnlyOutput)
                print(f"aliased transformers.generation.{name} = GenerateDecoderOnlyOutput", flush=True)
    except Exception as e:  # noqa: BLE001
        print(f"transformers.generation: {e!r}", flush=True)
    try:
        from mamba_ssm.models.mixer_seq_simple import MambaLMHeadModel  # noqa: F401
    except Exception:  # noqa: BLE001
        traceback.print_exc(file=sys.stdout)
        print("retrying with mamba_ssm.utils.generation / .hf stubbed", flush=True)
        for k in [k for k in sys.modules if k.startswith("mamba_ssm")]:
            del sys.modules[k]
        from dataclasses import dataclass, field
        gen = types.ModuleType("mamba_ssm.utils.generation")

        @dataclass
        class InferenceParams:
            max_seqlen: int
            max_batch_size: int
            seqlen_offset: int = 0
            batch_size_offset: int = 0
            key_value_memory_dict: dict = field(default_factory=dict)
            lengths_per_sample: object = None
        gen.InferenceParams, gen.GenerationMixin = InferenceParams, type("GenerationMixin", (), {})
        hf = types.ModuleType("mamba_ssm.utils.hf")
        hf.load_config_hf = hf.load_state_dict_hf = None
        sys.modules["mamba_ssm.utils.generation"], sys.modules["mamba_ssm.utils.hf"] = gen, hf
        from mamba_ssm.models.mixer_seq_simple import MambaLMHeadModel  # noqa: F401
    import mamba_ssm.modules.mamba2 as m2
    print(f"mamba2 module: causal_conv1d_fn={m2.causal_conv1d_fn} causal_conv1d_update={m2.causal_conv1d_update} "
          f"selective_state_update={getattr(m2.selective_state_update, '__module__', None)}", flush=True)
    assert m2.causal_conv1d_fn is None and m2.causal_conv1d_update is None and m2.selective_state_update is not None


def run_mamba(rec, prec):
    import_mamba()
    from mamba_ssm.models.config_mamba import MambaConfig
    from mamba_ssm.models.mixer_seq_simple import MambaLMHeadModel
    from mamba_ssm.utils.generation import InferenceParams
    for name in (OPTS.cases.split(",") if OPTS.cases else ("long", "grouped", "odd")):
        t_case = time.time()
        try:
            folder = os.path.join(DATA, "models", name, "state_spaces")
            cfg = json.load(open(os.path.join(folder, "config.json")))
            cfg["ssm_cfg"] = dict(cfg["ssm_cfg"], use_mem_eff_path=False)
            model = MambaLMHeadModel(MambaConfig(**cfg), device="cuda", dtype=torch.float32).eval()
            sd = torch.load(os.path.join(folder, "pytorch_model.bin"), map_location="cuda", weights_only=True)
            model.load_state_dict(sd)
            assert model.backbone.fused_add_norm and not model.backbone.layers[0].mixer.use_mem_eff_path
            xs = np.load(os.path.join(DATA, "models", name, "tokens.npy"))
            ids = torch.from_numpy(xs).long().cuda()
            Bn, T = ids.shape
            cpu = np.load(os.path.join(DATA, "cpu", f"{name}.npz"))
            out = {}
            with torch.no_grad():
                t0 = time.time()
                out["forward"] = model(ids).logits.float()
                sync("cuda")
                print(f"   {name}: forward {time.time() - t0:.1f} s", flush=True)
                t0 = time.time()
                ip = InferenceParams(max_seqlen=T, max_batch_size=Bn)
                ip.key_value_memory_dict = model.allocate_inference_cache(Bn, T, dtype=torch.float32)
                ip.seqlen_offset = 1   # every token through Mamba2.step, from empty states
                out["steps"] = torch.stack([model(ids[:, t:t + 1], inference_params=ip).logits[:, -1]
                                            for t in range(T)], 1).float()
                sync("cuda")
                print(f"   {name}: steps {time.time() - t0:.1f} s", flush=True)
                t0 = time.time()
                half = T // 2
                ip = InferenceParams(max_seqlen=T, max_batch_size=Bn)
                ip.key_value_memory_dict = model.allocate_inference_cache(Bn, T, dtype=torch.float32)
                first = model(ids[:, :half], inference_params=ip).logits   # chunked, keeps the states
                ip.seqlen_offset = half
                rest = [model(ids[:, t:t + 1], inference_params=ip).logits[:, -1] for t in range(half, T)]
                out["prefill_half_then_steps"] = torch.cat([first, torch.stack(rest, 1)], 1).float()
                sync("cuda")
                print(f"   {name}: prefill+steps {time.time() - t0:.1f} s", flush=True)
            out = {k: v.cpu().numpy() for k, v in out.items()}
            np.savez_compressed(os.path.join(WORK, "npz", f"mamba_{prec}_{name}.npz"), **out)
            dims = f"B{Bn} {cfg['n_layer']} layers, d_model {cfg['d_model']}, ssm {cfg['ssm_cfg']}"
            lim = " (dt_limit: mamba_ssm's step applies none)" if "dt_limit" in cfg["ssm_cfg"] else ""
            for form in ("forward", "steps", "prefill_half_then_steps"):
                rec.compare(f"mamba {name}: GPU {form}", "vs float64 ref (mamba_ssm math)", "fp32", T,
                            out[form], cpu["ref64"], model=dims)
            rec.compare(f"mamba {name}: recur prefill", "vs GPU forward", "fp32", T, cpu["recur_prefill"], out["forward"])
            rec.compare(f"mamba {name}: recur step", "vs GPU steps" + lim, "fp32", T, cpu["recur_step"], out["steps"])
            rec.compare(f"mamba {name}: recur step", "vs GPU prefill_half_then_steps", "fp32", T,
                        cpu["recur_step"], out["prefill_half_then_steps"])
            rec.compare(f"mamba {name}: GPU steps", "vs GPU forward" + lim, "fp32", T, out["steps"], out["forward"])
            print(f"-- mamba {name}: done in {time.time() - t_case:.1f} s", flush=True)
        except Exception:  # noqa: BLE001
            print(f"-- mamba {name}: FAILED after {time.time() - t_case:.1f} s", flush=True)
            traceback.print_exc(file=sys.stdout)


# ------------------------------------------------------------------------------------------

def child(args):
    dev = "cpu" if args.dry_cpu else "cuda"
    global OPTS
    OPTS = args
    rec = Recorder(args.child, args.prec, args.tag or f"{args.child}-{args.prec}", dry=args.dry_cpu)
    t0 = time.time()
    if args.rt:
        restrict_autotune()
    if not args.dry_cpu:
        set_precision(args.prec)
        section("tl.dot probe", dot_probe, rec)
    if args.child == "mamba":
        section("mamba", run_mamba, rec, args.prec)
    else:
        if not args.dry_cpu:
            t1 = time.time()
            try:
                import fla.ops  # noqa: F401   (imports every op; the Triton kernels compile on first call)
            except Exception:  # noqa: BLE001
                traceback.print_exc(file=sys.stdout)
                print("fla.ops/__init__ failed: fla.ops stubbed, its subpackages imported alone", flush=True)
                import fla
                for k in [k for k in sys.modules if k.startswith("fla.ops")]:
                    del sys.modules[k]
                stub = types.ModuleType("fla.ops")
                stub.__path__ = [os.path.join(os.path.dirname(fla.__file__), "ops")]
                sys.modules["fla.ops"] = stub
            import fla
            print(f"   import fla.ops: {time.time() - t1:.1f} s  (fla from {os.path.dirname(fla.__file__)})", flush=True)
        fn = {"gdn": run_gdn, "gla": run_gla, "rwkv7": run_rwkv7}[args.child]
        section(args.child, fn, rec, dev, args.prec, args.dry_cpu)
    print(f"-- child {rec.tag}: {time.time() - t0:.1f} s"
          f"{f', {RESTRICTED[0]} autotuners cut to one config' if args.rt else ''}", flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--child")
    p.add_argument("--prec", default="default")
    p.add_argument("--parts", default="", help="comma-separated subset of mamba,gdn,gla,rwkv7")
    p.add_argument("--plan", default="full", choices=sorted(PLANS))
    p.add_argument("--tag", default="")
    p.add_argument("--forms", default="", help="comma-separated prefixes of the fla forms to run")
    p.add_argument("--dtypes", default="", help="fp32,bf16")
    p.add_argument("--ts", default="", help="sequence lengths, e.g. 1000,37")
    p.add_argument("--cases", default="", help="mamba cases: long,grouped,odd")
    p.add_argument("--rt", action="store_true", help="restrict every Triton autotuner to one config")
    p.add_argument("--tril-ieee", action="store_true", help="gdn chunk: SOLVE_TRIL_DOT_PRECISION 'ieee'")
    p.add_argument("--dry-cpu", action="store_true")
    args = p.parse_args()
    if args.child:
        child(args)
    else:
        driver(args)


if __name__ == "__main__":
    main()
