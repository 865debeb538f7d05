#!/usr/bin/python3
"""OpenBLAS's core type for the CPU the benchmarks run on.

Debian's OpenBLAS (under PyTorch and numpy) picks its kernels itself, but on
some virtual machines it misreads the CPU and runs slow generic ones, so the
benchmarks name the core type (OPENBLAS_CORETYPE, read when the library
loads). The name must be one the CPU can run: SkylakeX's kernels are AVX-512
and die with SIGILL on an AVX2-only CPU. choose() reads the CPU's flags
(/proc/cpuinfo) and returns "SkylakeX" where AVX-512 (F, CD, BW, DQ, VL) is
there, "Haswell" where AVX2 and FMA are, and None (leave it to OpenBLAS)
otherwise; RECUR_MAX_SIMD_TARGET does not enter: it caps recur, not OpenBLAS.

    /usr/bin/python3 benchmarks/openblas_coretype.py             # prints the choice here
    /usr/bin/python3 benchmarks/openblas_coretype.py --self-test
"""
import os
import sys

AVX512 = {"avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl"}
# Core types whose kernels need AVX-512.
AVX512_CORES = {"skylakex", "cooperlake", "sapphirerapids"}


def cpu_flags(cpuinfo="/proc/cpuinfo"):
    try:
        with open(cpuinfo) as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def choose(flags):
    if AVX512 <= flags:
        return "SkylakeX"
    if {"avx2", "fma"} <= flags:
        return "Haswell"
    return None


def set_environment(flags=None):
    """Sets OPENBLAS_CORETYPE for this process and its children before
    OpenBLAS loads: keeps a value already set unless it names AVX-512
    kernels on a CPU without AVX-512. Returns the value in force (or None)."""
    flags = cpu_flags() if flags is None else flags
    current = os.environ.get("OPENBLAS_CORETYPE")
    if current and (current.lower() not in AVX512_CORES or AVX512 <= flags):
        return current
    chosen = choose(flags)
    if chosen:
        os.environ["OPENBLAS_CORETYPE"] = chosen
    else:
        os.environ.pop("OPENBLAS_CORETYPE", None)
    return chosen


def self_test():
    zen3 = {"sse4_2", "avx", "avx2", "fma", "f16c", "bmi2"}  # an AMD EPYC Zen 3's, no AVX-512
    zen4 = zen3 | AVX512 | {"avx512_vnni", "avx512_bf16"}
    assert choose(zen3) == "Haswell", choose(zen3)
    assert choose(zen4) == "SkylakeX", choose(zen4)
    assert choose({"sse4_2", "avx"}) is None
    assert choose(zen3 | {"avx512f"}) == "Haswell"  # AVX-512 F alone is not SkylakeX's set
    saved = os.environ.get("OPENBLAS_CORETYPE")
    try:
        os.environ["OPENBLAS_CORETYPE"] = "SkylakeX"
        assert set_environment(zen3) == "Haswell" and os.environ["OPENBLAS_CORETYPE"] == "Haswell"
        os.environ["OPENBLAS_CORETYPE"] = "Zen"
        assert set_environment(zen3) == "Zen"  # a value the CPU runs is kept
        os.environ.pop("OPENBLAS_CORETYPE")
        assert set_environment(zen4) == "SkylakeX"
        os.environ.pop("OPENBLAS_CORETYPE")
        assert set_environment({"sse4_2"}) is None and "OPENBLAS_CORETYPE" not in os.environ
    finally:
        os.environ.pop("OPENBLAS_CORETYPE", None)
        if saved is not None:
            os.environ["OPENBLAS_CORETYPE"] = saved
    print("openblas_coretype: 4 CPUs, 4 environments: ok")


if __name__ == "__main__":
    if sys.argv[1:] == ["--self-test"]:
        self_test()
    else:
        print(choose(cpu_flags()) or "(OpenBLAS's own choice)")
