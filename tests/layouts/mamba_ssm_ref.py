"""mamba_ssm's pure-PyTorch references of its Triton kernels, taken from the installed
package's files: importing mamba_ssm (and the modules holding these functions) pulls in
triton and its CUDA extensions, which the tests' environment leaves out
(tests/layouts/requirements.txt). Each function's source is read from its file and run
with the names those files import (torch, F, rearrange, repeat, math); nothing else of the
package runs.

    from mamba_ssm_ref import selective_state_update_ref   # one step of the SSM, heads in groups
    from mamba_ssm_ref import rms_norm_ref                 # the gated RMS norm, per group
"""
import ast
import importlib.util
import math
import os

import torch
import torch.nn.functional as F
from einops import rearrange, repeat

_spec = importlib.util.find_spec("mamba_ssm")  # the package's location, without its __init__
if _spec is None or not _spec.submodule_search_locations:
    raise ImportError("mamba-ssm is not installed (tests/layouts/requirements.txt)")
_ROOT = list(_spec.submodule_search_locations)[0]


def _function(relative, name):
    """The top-level function `name` of the package's file `relative`, defined alone."""
    path = os.path.join(_ROOT, relative)
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    nodes = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name]
    if len(nodes) != 1:
        raise ImportError(f"{relative} has no function {name}")
    namespace = {"torch": torch, "F": F, "rearrange": rearrange, "repeat": repeat, "math": math}
    exec(compile(ast.Module(body=nodes, type_ignores=[]), path, "exec"), namespace)
    return namespace[name]


selective_state_update_ref = _function("ops/triton/selective_state_update.py",
                                       "selective_state_update_ref")
rms_norm_ref = _function("ops/triton/layernorm_gated.py", "rms_norm_ref")
