#!/usr/bin/python3
"""recur beside the edge runtimes: the same model's recurrent step, timed in one run.

    benchmarks/peers-setup.sh            # once: the peers' virtual environment (build/peers-venv)
    /usr/bin/python3 benchmarks/peers.py --config models/configs/paper_mnist.json \
        --recur-convert build/release/converter/recur-convert \
        --recur-bench build/release/benchmarks/recur-bench --recur-run build/release/tools/recur-run \
        [--venv build/peers-venv] [--batch 1 64] [--threads 1 2] [--steps 200] [--rounds 3]

Exports the config's reference model (seed 1) and converts it for recur with f32,
int8 and int4 weights. Builds one recurrent step of B streams with the state as
explicit inputs and outputs (benchmarks/step_module.py: per layer S (B,H,dk,dv)
and z (B,H,dk), plus the embedded input; the logits and the new state out) and
hands it to each peer:

  PyTorch       eager and TorchScript (torch.jit.trace) on Debian's torch (this
                process): f32; int8 by quantize_dynamic (per-channel weights, fbgemm)
  ONNX Runtime  f32; int8 (quantize_dynamic, per-channel s8 weights, activations
                quantised per step); int4 (MatMulNBits: symmetric groups of 32,
                accuracy_level 4 = int8 activations)
  ExecuTorch    XNNPACK delegate: f32; torchao's dynamic-activation configs:
                8da8w (int8 weights per channel) as int8, 8da4w (groups of 32)
                as int4, activations quantised to int8 per token
  LiteRT        litert-torch conversion, XNNPACK delegate: f32; ai-edge-quantizer's
                dynamic-range int8 (per channel) and blockwise int4 (groups of 32)

Every peer first runs 16 steps of B streams of random tokens from the zero state,
feeding its own state outputs back, and its logits are compared with the
reference model run in float64 (max|Δ| and ‖Δ‖/‖ref‖; the tolerance for each
precision is printed, recur's own error on the same streams beside it). A peer
that fails the check is not timed; one whose exporter or quantiser is missing or
fails is listed with its error.

Timing: per (runtime, precision, batch, threads) the median over --steps steps
(after warm-up) of one step, the state fed back each step as a user would; the
variants are alternated within each of --rounds rounds, and the table shows the
median over rounds. recur is timed by recur-bench (same steps, default options).
The peers run in worker processes under the venv's Python (they need a newer
torch than Debian's); each is timed through its own Python binding, whose per-call
cost is part of its numbers. The load average before and after timing is printed:
on a shared machine, rows timed under load say so.
"""
import argparse
import copy
import json
import os
import platform
import queue
import statistics
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
TAG = "@@peers "           # worker replies on stdout start with this; other lines are library noise
CHECK_STEPS = 16
GROUP = 32                 # int4 group size, recur's default and every peer's
# Tolerances of the output check against the float64 reference: max|Δ| for f32,
# ‖Δ‖/‖ref‖ for narrow weights (quantisation noise differs between schemes; these
# are a few times recur's own error, docs/performance.md).
TOL = {"f32": ("max", 1e-3), "int8": ("rel", 0.05), "int4": ("rel", 0.3)}


def say(msg):
    print(msg, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------
# Workers: each peer runs in its own process, prepares its variants, checks them, then
# times the one named on each request line.
# --------------------------------------------------------------------------------------

def reply(obj):
    sys.stdout.write(TAG + json.dumps(obj) + "\n")
    sys.stdout.flush()


def median_step_us(step_once, steps, warmup=20, budget_s=15.0):
    """Median µs of `steps` steps after `warmup`; stops early (after at least 10) once
    the budget is spent, so that a variant slowed by a loaded machine cannot stall a run."""
    times = []
    start = time.perf_counter()
    for i in range(warmup + steps):
        t0 = time.perf_counter()
        step_once()
        t1 = time.perf_counter()
        if i >= warmup:
            times.append((t1 - t0) * 1e6)
        if len(times) >= 10 and t1 - start > budget_s:
            break
    return statistics.median(times)


class OrtRunner:
    """ONNX Runtime: one session per (precision, threads); the state ping-pongs between
    two sets of OrtValues bound with IOBinding, so no step copies it."""

    def __init__(self, work, precision, batch, threads, shapes, d_model, out_width):
        import numpy as np
        import onnxruntime as ort
        self.np = np
        path = ort_model(work, precision)
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        so.add_session_config_entry("session.intra_op.allow_spinning", "1")
        self.sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
        names_in = [i.name for i in self.sess.get_inputs()]
        names_out = [o.name for o in self.sess.get_outputs()]
        self.x = ort.OrtValue.ortvalue_from_numpy(np.zeros((batch, d_model), np.float32))
        sets = [[ort.OrtValue.ortvalue_from_numpy(np.zeros(s, np.float32)) for s in shapes]
                for _ in range(2)]
        self.y = ort.OrtValue.ortvalue_from_numpy(np.zeros((batch, out_width), np.float32))
        self.bindings = []
        for k in range(2):
            b = self.sess.io_binding()
            b.bind_ortvalue_input(names_in[0], self.x)
            for name, v in zip(names_in[1:], sets[k]):
                b.bind_ortvalue_input(name, v)
            b.bind_ortvalue_output(names_out[0], self.y)
            for name, v in zip(names_out[1:], sets[1 - k]):
                b.bind_ortvalue_output(name, v)
            self.bindings.append(b)
        self.sets, self.i = sets, 0
        self.version = f"onnxruntime {ort.__version__}"

    def reset(self):
        for s in self.sets:
            for v in s:
                v.update_inplace(self.np.zeros(v.shape(), self.np.float32))
        self.i = 0

    def step(self, x=None):
        if x is not None:
            self.x.update_inplace(x)
        self.sess.run_with_iobinding(self.bindings[self.i & 1])
        self.i += 1

    def output(self):
        return self.y.numpy().copy()


def ort_model(work, precision):
    """The ONNX file of a precision, quantised here from the f32 export on first use."""
    f32 = work / "step_f32.onnx"
    path = work / f"step_{precision}.onnx"
    if precision == "f32" or path.exists():
        return f32 if precision == "f32" else path
    import onnx
    if precision == "int8":
        from onnxruntime.quantization import QuantType, quantize_dynamic
        quantize_dynamic(str(work / "step_f32_matmul.onnx"), str(path), per_channel=True,
                         weight_type=QuantType.QInt8, op_types_to_quantize=["MatMul"])
    else:
        from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer
        m = onnx.load(str(work / "step_f32_matmul.onnx"))
        q = MatMulNBitsQuantizer(m, block_size=GROUP, is_symmetric=True, accuracy_level=4)
        q.process()
        q.model.save_model_to_file(str(path))
    return path


def gemm_to_matmul(src, dst):
    """Rewrites the Gemm nodes of torch's ONNX export (nn.Linear on 2-D input) as MatMul +
    Add, the form ONNX Runtime's quantisers take; ORT fuses them back for f32."""
    import onnx
    from onnx import helper, numpy_helper
    m = onnx.load(str(src))
    inits = {i.name: i for i in m.graph.initializer}
    nodes = []
    for n in m.graph.node:
        attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}
        if n.op_type != "Gemm" or attrs.get("transA", 0) or attrs.get("alpha", 1.0) != 1.0 \
                or attrs.get("beta", 1.0) != 1.0 or n.input[1] not in inits:
            nodes.append(n)
            continue
        w = numpy_helper.to_array(inits[n.input[1]])
        if attrs.get("transB", 0):
            w = w.T.copy()
        wname = n.input[1] + "_kn"
        m.graph.initializer.append(numpy_helper.from_array(w, wname))
        mm_out = n.output[0] + "_mm" if len(n.input) > 2 else n.output[0]
        nodes.append(helper.make_node("MatMul", [n.input[0], wname], [mm_out], name=n.name + "_mm"))
        if len(n.input) > 2:
            nodes.append(helper.make_node("Add", [mm_out, n.input[2]], [n.output[0]], name=n.name + "_add"))
    del m.graph.node[:]
    m.graph.node.extend(nodes)
    used = {i for n in m.graph.node for i in n.input}
    keep = [i for i in m.graph.initializer if i.name in used]
    del m.graph.initializer[:]
    m.graph.initializer.extend(keep)
    onnx.save(m, str(dst))


class EtRunner:
    """ExecuTorch with the XNNPACK delegate: one .pte per (precision, batch); the state
    outputs are fed back as the next step's inputs."""

    def __init__(self, work, precision, batch, threads, shapes, d_model, out_width):
        import torch
        from executorch.extension.pybindings import portable_lib
        self.torch = torch
        self.pl = portable_lib
        path = et_model(work, precision, batch)
        self.threads = threads
        self.module = portable_lib._load_for_executorch(str(path))
        self.shapes, self.batch, self.d_model = shapes, batch, d_model
        self.x = torch.zeros(batch, d_model)
        self.reset()
        from executorch.version import __version__
        self.version = f"executorch {__version__}"

    @staticmethod
    def process_threads(threads):
        # ExecuTorch's XNNPACK threadpool is process-wide, and resetting it under loaded
        # programs crashes them: each thread count gets a worker process of its own, which
        # sets it once, before loading any program.
        from executorch.extension.pybindings import portable_lib
        portable_lib._unsafe_reset_threadpool(threads)

    def reset(self):
        self.state = [self.torch.zeros(s) for s in self.shapes]
        self.out = None

    def step(self, x=None):
        if x is not None:
            self.x = self.torch.from_numpy(x)
        out = self.module.forward((self.x, *self.state))
        self.out, self.state = out[0], list(out[1:])

    def output(self):
        return self.out.numpy().copy()


def et_model(work, precision, batch):
    path = work / f"step_{precision}_b{batch}.pte"
    if path.exists():
        return path
    import torch
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower
    module, args = flat_step_module(work, batch)
    if precision != "f32":
        # torchao's dynamic-activation configs, which the XNNPACK partitioner lowers to its
        # qd8 kernels: int8 activations per token, int4 weights per group (8da4w) or int8
        # weights per output channel (8da8w).
        from torchao.quantization import quantize_
        from torchao.quantization.granularity import PerAxis, PerGroup
        from torchao.quantization.quant_api import Int8DynamicActivationIntxWeightConfig
        wdt, gran = (torch.int4, PerGroup(GROUP)) if precision == "int4" else (torch.int8, PerAxis(0))
        quantize_(module, Int8DynamicActivationIntxWeightConfig(weight_dtype=wdt, weight_granularity=gran))
    with torch.no_grad():
        ep = torch.export.export(module, args)
        prog = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()]).to_executorch()
    path.write_bytes(prog.buffer)
    return path


def flat_step_module(work, batch):
    import torch
    sys.path.insert(0, str(HERE))
    from step_module import FlatStep, load, state_shapes
    model, _ = load(str(work / "weights"))
    model.eval()
    module = FlatStep(model).eval()
    cfg = model.config
    args = (torch.zeros(batch, cfg["d_model"]),) + tuple(
        torch.rand(s) for s in state_shapes(cfg, batch))
    return module, args


class LiteRtRunner:
    """LiteRT (the TFLite interpreter, XNNPACK delegate by default): one .tflite per
    (precision, batch); each step copies the state outputs into the state inputs
    (the interpreter has no way to bind one tensor as both)."""

    def __init__(self, work, precision, batch, threads, shapes, d_model, out_width):
        import numpy as np
        from ai_edge_litert.interpreter import Interpreter
        self.np = np
        path = litert_model(work, precision, batch)
        self.interp = Interpreter(model_path=str(path), num_threads=threads)
        self.interp.allocate_tensors()
        ins = self.interp.get_input_details()
        outs = self.interp.get_output_details()
        # Match inputs and outputs by position in the signature (args_0.. / output_0..).
        sig = self.interp.get_signature_runner()
        sin, sout = sig.get_input_details(), sig.get_output_details()
        order_in = sorted(sin, key=lambda k: int(k.rsplit("_", 1)[-1]))
        order_out = sorted(sout, key=lambda k: int(k.rsplit("_", 1)[-1]))
        self.in_idx = [sin[k]["index"] for k in order_in]
        self.out_idx = [sout[k]["index"] for k in order_out]
        del ins, outs, sig
        self.reset()
        import ai_edge_litert
        self.version = f"ai-edge-litert {getattr(ai_edge_litert, '__version__', '')}".strip()

    def reset(self):
        for idx in self.in_idx[1:]:
            self.interp.tensor(idx)()[...] = 0

    def step(self, x=None):
        if x is not None:
            self.interp.tensor(self.in_idx[0])()[...] = x
        self.interp.invoke()
        for i, o in zip(self.in_idx[1:], self.out_idx[1:]):
            self.np.copyto(self.interp.tensor(i)(), self.interp.tensor(o)())

    def output(self):
        return self.interp.tensor(self.out_idx[0])().copy()


def litert_model(work, precision, batch):
    path = work / f"step_{precision}_b{batch}.tflite"
    if path.exists():
        return path
    f32 = work / f"step_f32_b{batch}.tflite"
    if not f32.exists():
        import litert_torch
        module, args = flat_step_module(work, batch)
        litert_torch.convert(module, args).export(str(f32))
    if precision == "f32":
        return f32
    from ai_edge_quantizer import quantizer, recipe
    # Dynamic-range recipes: weights int8 per channel, or int4 in blocks of 32 along the
    # input; activations quantised per step by the kernels (XNNPACK's qd8 paths).
    assert GROUP == 32
    rcp = recipe.dynamic_wi8_afp32() if precision == "int8" else recipe.dynamic_wi4b32_afp32()
    qt = quantizer.Quantizer(str(f32))
    qt.load_quantization_recipe(rcp)
    qt.quantize().export_model(str(path))
    return path


RUNNERS = {"onnxruntime": OrtRunner, "executorch": EtRunner, "litert": LiteRtRunner}


def worker(spec_path):
    """Entry of a worker process (under the venv's Python)."""
    import numpy as np
    spec = json.loads(Path(spec_path).read_text())
    work = Path(spec["work"])
    cls = RUNNERS[spec["runtime"]]
    if hasattr(cls, "process_threads"):
        cls.process_threads(spec["threads"])
    runners = {}
    for v in spec["variants"]:
        key = f"{v['precision']}/{v['batch']}/{v['threads']}"
        try:
            shapes = [tuple(s) for s in v["state_shapes"]]
            r = cls(work, v["precision"], v["batch"], v["threads"], shapes, spec["d_model"],
                    spec["out_width"])
            check = np.load(work / f"check_x_b{v['batch']}.npy")          # (T, B, d_model)
            outs = []
            for t in range(check.shape[0]):
                r.step(np.ascontiguousarray(check[t]))
                outs.append(r.output())
            out_path = work / f"out_{spec['runtime']}_{v['precision']}_b{v['batch']}_t{v['threads']}.npy"
            np.save(out_path, np.stack(outs))
            r.reset()
            r.step(np.ascontiguousarray(check[0]))
            runners[key] = r
            reply({"variant": key, "ok": True, "check": str(out_path), "version": r.version})
        except Exception as e:  # an exporter, quantiser or runtime that cannot do the step
            tb = traceback.format_exc().strip().splitlines()
            reply({"variant": key, "ok": False, "error": f"{type(e).__name__}: {e}".splitlines()[0][:300],
                   "where": tb[-3:] if len(tb) > 3 else tb})
    reply({"ready": True})
    for line in sys.stdin:
        req = json.loads(line)
        r = runners[req["variant"]]
        reply({"variant": req["variant"], "median_us": median_step_us(r.step, req["steps"])})


# --------------------------------------------------------------------------------------
# The orchestrating run (Debian's torch): reference, recur, PyTorch, and the workers.
# --------------------------------------------------------------------------------------

class Worker:
    def __init__(self, python, name, spec, log):
        self.runtime = name
        spec_path = Path(spec["work"]) / f"spec_{name}.json"
        spec_path.write_text(json.dumps(spec))
        env = dict(os.environ, PYTHONUNBUFFERED="1", TF_CPP_MIN_LOG_LEVEL="2")
        self.log = open(log, "w")
        self.proc = subprocess.Popen([python, str(Path(__file__).resolve()), "--worker", str(spec_path)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log,
                                     text=True, env=env, cwd=str(REPO))
        self.lines = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self):
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def read(self, timeout=3600):
        end = time.time() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(1.0, end - time.time()))
            except queue.Empty:
                line = None
            if line is None:
                break
            if line.startswith(TAG):
                return json.loads(line[len(TAG):])
            self.log.write(line)
        raise RuntimeError(f"{self.runtime} worker exited or hung (code {self.proc.poll()}); "
                           f"see {self.log.name}")

    def time(self, variant, steps):
        self.proc.stdin.write(json.dumps({"variant": variant, "steps": steps}) + "\n")
        self.proc.stdin.flush()
        return self.read()["median_us"]

    def close(self):
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(timeout=60)
        self.log.close()


def cpu_model():
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


def compare(got, want, precision):
    import numpy as np
    d = got.astype(np.float64) - want
    max_abs = float(np.abs(d).max())
    rel = float(np.linalg.norm(d) / np.linalg.norm(want))
    kind, tol = TOL[precision]
    ok = (max_abs if kind == "max" else rel) <= tol
    return max_abs, rel, ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--config", default=str(REPO / "models/configs/paper_mnist.json"))
    ap.add_argument("--recur-convert", default=str(REPO / "build/release/converter/recur-convert"))
    ap.add_argument("--recur-bench", default=str(REPO / "build/release/benchmarks/recur-bench"))
    ap.add_argument("--recur-run", default=str(REPO / "build/release/tools/recur-run"))
    ap.add_argument("--venv", default=str(REPO / "build/peers-venv"),
                    help="the peers' virtual environment (benchmarks/peers-setup.sh)")
    ap.add_argument("--work", default=str(REPO / "build/peers"), help="exported models and logs")
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 64])
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--precisions", nargs="+", default=["f32", "int8", "int4"])
    ap.add_argument("--runtimes", nargs="+",
                    default=["pytorch", "torchscript", "onnxruntime", "executorch", "litert"])
    ap.add_argument("--steps", type=int, default=200, help="timed steps per variant and round")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds; medians of rounds")
    ap.add_argument("--keep-exports", action="store_true",
                    help="reuse the peers' exported files in --work from an earlier run (same weights: "
                         "the export is seeded)")
    args = ap.parse_args()
    if args.worker:
        return worker(args.worker)

    sys.path.insert(0, str(HERE))
    import openblas_coretype
    openblas_coretype.set_environment()  # the CPU's own: SkylakeX's kernels die on AVX2-only CPUs
    import numpy as np
    import torch
    from step_module import BatchedStep, FlatStep, check_against_step, export, load, state_shapes, zero_state

    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    if not args.keep_exports:     # exports are made anew, from this run's weights
        for stale in list(work.glob("step_*")) + list(work.glob("out_*")):
            stale.unlink()
    cfg_json = json.loads(Path(args.config).read_text())
    wdir = work / "weights"
    export(cfg_json, seed=1, out_dir=str(wdir))
    model, _ = load(str(wdir))
    model.eval()
    cfg = model.config
    d_model, out_width = cfg["d_model"], cfg["head"]["out"]
    bmax = max(args.batch)

    # Models for recur.
    recur_models = {}
    for p in args.precisions:
        recur_models[p] = work / f"model_{p}.recur"
        subprocess.run([args.recur_convert, str(wdir / "weights.safetensors"), "--config",
                        str(wdir / "config.json"), "--dtype", p, "-o", str(recur_models[p])],
                       check=True, capture_output=True)

    # The check: bmax streams of CHECK_STEPS random tokens; batch B takes the first B.
    g = torch.Generator().manual_seed(7)
    tokens = torch.randint(0, cfg["input"]["vocab_size"], (bmax, CHECK_STEPS), generator=g)
    with torch.no_grad():
        m64 = load(str(wdir))[0].double().eval()
        want = np.stack([m64(tokens[s]).numpy() for s in range(bmax)], axis=1)   # (T, bmax, out)
        x_all = model.input(tokens.T.reshape(-1), 0).reshape(CHECK_STEPS, bmax, d_model).numpy()
    for b in args.batch:
        np.save(work / f"check_x_b{b}.npy", np.ascontiguousarray(x_all[:, :b]))
    # recur's own error on the same streams (recur-run: one stream at a time).
    recur_err = {}
    for p in args.precisions:
        outs = []
        for s in range(bmax):
            np.save(work / "recur_in.npy", tokens[s].numpy().astype(np.int32))
            subprocess.run([args.recur_run, str(recur_models[p]), "--input", str(work / "recur_in.npy"),
                            "--output", str(work / "recur_out.npy")], check=True, capture_output=True)
            outs.append(np.load(work / "recur_out.npy"))
        recur_err[p] = compare(np.stack(outs, axis=1), want, p)

    # Variants.
    notes = []            # (runtime, precision, message): what could not run
    versions = {}
    checks = {}           # (runtime, precision, batch, threads) -> (max_abs, rel, ok)
    timers = {}           # same key -> callable(steps) -> median µs

    # PyTorch, this process: eager and TorchScript; f32, and int8 as torch's dynamic
    # quantisation (per-channel int8 weights, activations quantised per step: fbgemm).
    # Debian's torch 1.13 has no int4 weight kernels for the CPU.
    versions["pytorch"] = versions["torchscript"] = f"torch {torch.__version__} (Debian)"
    torch_rt = [r for r in ("pytorch", "torchscript") if r in args.runtimes]
    torch_models = {}
    for p in args.precisions:
        if p == "f32":
            torch_models[p] = model
        elif p == "int8":
            from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic
            torch_models[p] = quantize_dynamic(copy.deepcopy(model),
                                               {torch.nn.Linear: per_channel_dynamic_qconfig},
                                               dtype=torch.qint8).eval()
        else:
            for rt in torch_rt:
                notes.append((rt, p, f"not run: torch {torch.__version__} has no CPU kernels for "
                              "int4 weights"))
    with torch.inference_mode():
        check_against_step(model, BatchedStep(model).eval())
        for p, m_p in torch_models.items():
            step = BatchedStep(m_p).eval()
            for b in args.batch:
                S, z = zero_state(cfg, b)
                x = torch.from_numpy(np.load(work / f"check_x_b{b}.npy"))
                traced = torch.jit.trace(step, (x[0], S, z), check_trace=False)
                for rt in torch_rt:
                    fn = step if rt == "pytorch" else traced
                    for t in args.threads:
                        torch.set_num_threads(t)
                        S, z = zero_state(cfg, b)
                        outs = []
                        for i in range(CHECK_STEPS):
                            y, S, z = fn(x[i], S, z)
                            outs.append(y.numpy().copy())
                        checks[(rt, p, b, t)] = compare(np.stack(outs), want[:, :b], p)

                        def timer(steps, fn=fn, x0=x[0], S0=S, z0=z, t=t):
                            torch.set_num_threads(t)
                            st = [S0, z0]

                            def once():
                                _, st[0], st[1] = fn(x0, st[0], st[1])
                            with torch.inference_mode():
                                return median_step_us(once, steps)
                        timers[(rt, p, b, t)] = timer

    # ONNX export (Debian torch) for ONNX Runtime.
    peers = [r for r in ("onnxruntime", "executorch", "litert") if r in args.runtimes]
    if "onnxruntime" in peers:
        flat = FlatStep(model).eval()
        shapes = state_shapes(cfg, 1)
        names_in = ["x"] + [f"{k}{i}" for i in range(cfg["n_layers"]) for k in ("S", "z")]
        names_out = ["y"] + [f"{k}{i}_out" for i in range(cfg["n_layers"]) for k in ("S", "z")]
        dyn = {n: {0: "batch"} for n in names_in + names_out}
        with torch.no_grad():
            torch.onnx.export(flat, (torch.zeros(1, d_model),) + tuple(torch.zeros(s) for s in shapes),
                              str(work / "step_f32.onnx"), input_names=names_in, output_names=names_out,
                              dynamic_axes=dyn, opset_version=17, do_constant_folding=True)

    python = str(Path(args.venv) / "bin" / "python")
    workers = {}
    spec_base = {"work": str(work), "d_model": d_model, "out_width": out_width}
    for rt in peers:
        if not Path(python).exists():
            for p in args.precisions:
                notes.append((rt, p, f"not run: no venv at {args.venv} (run benchmarks/peers-setup.sh)"))
            continue
        if rt == "onnxruntime":
            # The quantisers need MatMul nodes: rewrite torch's Gemm nodes in the venv (onnx).
            subprocess.run([python, "-c", "import sys; sys.path.insert(0, sys.argv[1]); import peers; "
                            "peers.gemm_to_matmul(sys.argv[2], sys.argv[3])", str(HERE),
                            str(work / "step_f32.onnx"), str(work / "step_f32_matmul.onnx")], check=True)
        # One worker per runtime; ExecuTorch one per thread count (its threadpool is global).
        groups = [[t] for t in args.threads] if rt == "executorch" else [args.threads]
        for group in groups:
            name = rt if len(groups) == 1 else f"{rt}-t{group[0]}"
            variants = [{"precision": p, "batch": b, "threads": t, "state_shapes": state_shapes(cfg, b)}
                        for p in args.precisions for b in args.batch for t in group]
            say(f"preparing {name}: {len(variants)} variants (export, quantise, check) ...")
            w = Worker(python, name, {**spec_base, "runtime": rt, "threads": group[0],
                                      "variants": variants}, work / f"{name}.log")
            try:
                while True:
                    msg = w.read()
                    if msg.get("ready"):
                        break
                    p, b, t = msg["variant"].split("/")
                    key = (rt, p, int(b), int(t))
                    if msg["ok"]:
                        versions[rt] = msg["version"]
                        checks[key] = compare(np.load(msg["check"]), want[:, :int(b)], p)
                        timers[key] = (lambda steps, w=w, v=msg["variant"]: w.time(v, steps))
                    elif not any(n[0] == rt and n[1] == p for n in notes):
                        notes.append((rt, p, f"failed: {msg['error']}"))
                        say(f"{rt} {p}: {msg['error']} ({' | '.join(msg['where'])})")
                workers[name] = w
            except RuntimeError as e:
                for p in args.precisions:
                    notes.append((rt, p, f"failed: {e}"))

    # Only variants whose outputs match are timed.
    for key, (mx, rel, ok) in checks.items():
        if not ok:
            kind, tol = TOL[key[1]]
            timers.pop(key, None)
            notes.append((key[0], key[1], f"batch {key[2]} threads {key[3]}: outputs differ from the "
                          f"reference (max|Δ| {mx:.2e}, rel {rel:.2e}; tolerance {kind} {tol:g}); not timed"))

    # Timing, alternating all variants within each round.
    keys = sorted(timers)
    times = {k: [] for k in keys}
    recur_t = {(p, b, t): [] for p in args.precisions for b in args.batch for t in args.threads}
    simd = ""
    batches = ",".join(map(str, args.batch))
    threads = ",".join(map(str, args.threads))
    # The table: rows (runtime, precision, batch, threads), ratios to recur.
    def table(out, rounds_done):
        def row(rt, p, b, t, med, ratio, err):
            kind, tol = TOL[p]
            mx, rel = err[0], err[1]
            print(f"{rt:<12} {p:<9} {b:>5} {t:>7} {med:>10.1f} {ratio:>8} {mx:>9.2e} {rel:>9.2e} "
                  f"{kind + ' ' + format(tol, 'g'):>10}", file=out)
        print(f"CPU: {cpu_model()} ({os.cpu_count()} logical CPUs); recur SIMD target {simd}", file=out)
        print(f"load average (1 min) {load_before:.2f} before timing, {os.getloadavg()[0]:.2f} now; "
              f"started {started}", file=out)
        print(f"model: {args.config}, seed 1, {sum(p.numel() for p in model.parameters()):,} parameters; "
              f"check: {CHECK_STEPS} steps of the streams against the float64 reference; "
              f"timing: median of {rounds_done} of {args.rounds} rounds x {args.steps} steps", file=out)
        print("versions: " + "; ".join(f"{k}: {v}" for k, v in versions.items()), file=out)
        hdr = f"{'runtime':<12} {'precision':<9} {'batch':>5} {'threads':>7} {'median us':>10} " \
              f"{'x recur':>8} {'max|d|':>9} {'rel':>9} {'tolerance':>10}"
        print(hdr + "\n" + "-" * len(hdr), file=out)
        order = [r for r in ("pytorch", "torchscript", "onnxruntime", "executorch", "litert")
                 if r in args.runtimes]
        for p in args.precisions:
            for b in args.batch:
                for t in args.threads:
                    if not recur_t[(p, b, t)]:
                        continue
                    base = statistics.median(recur_t[(p, b, t)])
                    row("recur", p, b, t, base, "1.00", recur_err[p])
                    for rt in order:
                        k = (rt, p, b, t)
                        if times.get(k):
                            med = statistics.median(times[k])
                            row(rt, p, b, t, med, f"{med / base:.2f}", checks[k])
        if notes:
            print("\nnot timed:", file=out)
            seen = set()
            for rt, p, msg in notes:
                if (rt, p, msg) not in seen:
                    seen.add((rt, p, msg))
                    print(f"  {rt} {p}: {msg}", file=out)
        out.flush()

    load_before = os.getloadavg()[0]
    started = time.strftime("%Y-%m-%d %H:%M")
    for r in range(args.rounds):
        say(f"round {r + 1}/{args.rounds}")
        for p in args.precisions:
            out = subprocess.run([args.recur_bench, str(recur_models[p]), "--batch", batches, "--threads",
                                  threads, "--steps", str(args.steps), "--json"],
                                 check=True, capture_output=True, text=True).stdout
            for line in out.splitlines():
                row = json.loads(line)
                if row["test"] == "step":
                    recur_t[(p, row["batch"], row["threads"])].append(row["median_us"])
                    simd = row["simd_target"]
            for k in keys:
                if k[1] == p and k in timers:
                    try:
                        times[k].append(timers[k](args.steps))
                    except (RuntimeError, OSError) as e:   # a worker that died while timing
                        notes.append((k[0], k[1], f"batch {k[2]} threads {k[3]}: died while timed: {e}"))
                        timers.pop(k)
        with open(work / "table.txt", "w") as f:    # the table so far, should a run be cut short
            table(f, r + 1)
    for w in workers.values():
        w.close()
    table(sys.stdout, args.rounds)


if __name__ == "__main__":
    sys.exit(main())
