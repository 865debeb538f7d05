#!/bin/sh
# The virtual environment of benchmarks/peers.py: ExecuTorch, LiteRT and ONNX Runtime
# with their exporters and quantisers, pinned. Not part of the build or the tests.
#
#   benchmarks/peers-setup.sh [VENV]        # default build/peers-venv (ignored by git)
#
# The exporters need a newer torch than Debian's (python3-torch 1.13): PyPI's torch for
# x86-64 Linux is its CUDA build, so this pulls torch with its NVIDIA libraries
# (about 6 GB installed; see docs/performance.md, "Peers side by side"). Needs
# python3-venv. Everything comes from PyPI by the ordinary pip client.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
venv=${1:-"$repo/build/peers-venv"}

if ! /usr/bin/python3 -c 'import venv, ensurepip' 2>/dev/null; then
  echo "peers-setup: python3-venv is missing (apt-get install python3-venv)" >&2
  exit 1
fi
[ -x "$venv/bin/python" ] || /usr/bin/python3 -m venv "$venv"

# One resolver run, so that pip picks one torch for all of them. Each exporter's own
# torch range: litert-torch 0.10 takes torch >=2.4,<2.15; ExecuTorch 1.5.1 is built
# against torch 2.14 (its Python extension links libtorch of that release). onnx-ir is
# what ONNX Runtime's MatMulNBits quantiser imports; typing-extensions is held below
# 4.13 for litert-torch's xdsl, and cattrs (coremltools, from ExecuTorch) at a
# release that accepts it.
"$venv/bin/pip" install \
  torch==2.14.1 \
  executorch==1.5.1 torchao==0.18.0 \
  litert-torch==0.10.0 ai-edge-litert==2.3.0 ai-edge-quantizer==0.10.0 \
  onnxruntime==1.31.1 onnx==1.23.2 onnx-ir==1.1.0 \
  typing-extensions==4.12.2 cattrs==25.1.1
"$venv/bin/pip" check

"$venv/bin/python" - <<'EOF'
import importlib
from importlib import metadata
for dist, module in (("torch", "torch"), ("executorch", "executorch"), ("torchao", "torchao"),
                     ("litert-torch", "litert_torch"), ("ai-edge-litert", "ai_edge_litert"),
                     ("ai-edge-quantizer", "ai_edge_quantizer"), ("onnxruntime", "onnxruntime"),
                     ("onnx", "onnx")):
    try:
        importlib.import_module(module)
        print(f"peers-setup: {dist} {metadata.version(dist)}")
    except Exception as e:  # say which peer will not run, and why
        print(f"peers-setup: {dist} does not import: {type(e).__name__}: {e}")
EOF
du -sh "$venv"
