"""flash-linear-attention's pure-PyTorch references (fla-core's naive.py files), loaded by
file path: importing the fla package pulls in triton, which the tests' environment leaves
out (tests/layouts/requirements.txt). Only these files are read; they need torch and einops.

    from fla_naive import dplr_recurrence   # S ← S·diag(e^gk) + kvᵀ + β(αᵀS), o = (q/√dk) S
    from fla_naive import naive_recurrent_gated_delta_rule   # S ← e^g S; S += k (β(v − Sᵀk))ᵀ
    from fla_naive import naive_recurrent_gla   # S ← diag(e^gk) S + kᵀv, o = (q/√dk) S
"""
import importlib.util
import os

_spec = importlib.util.find_spec("fla")  # the package's location, without running its __init__
if _spec is None or not _spec.submodule_search_locations:
    raise ImportError("fla-core is not installed (tests/layouts/requirements.txt)")
_ROOT = list(_spec.submodule_search_locations)[0]


def _load(relative, name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(_ROOT, relative))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


dplr_recurrence = _load("ops/generalized_delta_rule/dplr/naive.py", "fla_dplr_naive").dplr_recurrence
naive_recurrent_gated_delta_rule = _load("ops/gated_delta_rule/naive.py",
                                         "fla_gated_delta_rule_naive").naive_recurrent_gated_delta_rule
naive_recurrent_gla = _load("ops/gla/naive.py", "fla_gla_naive").naive_recurrent_gla
