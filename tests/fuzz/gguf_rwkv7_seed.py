# Writes tests/fuzz/gguf_seeds/rwkv7_q4_0.gguf: a tiny RWKV-7 (2 blocks, C 32 in
# 2 heads, FFN 64, vocabulary 16, low-rank widths 8) as llama.cpp's
# convert_hf_to_gguf.py and llama-quantize --pure write it, with llama.cpp's gguf
# package (0.19.0): the layout tests' writer (recur_ref/gguf_rwkv7.py), its
# weight matrices in Q4_0 and the rest F32. The fuzz target maps it to a model.
#   build/venv/bin/python tests/fuzz/gguf_rwkv7_seed.py tests/fuzz/gguf_seeds/rwkv7_q4_0.gguf
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "models", "reference"))

from gguf import GGMLQuantizationType as Q  # noqa: E402
from recur_ref.gguf_rwkv7 import write_gguf  # noqa: E402
from recur_ref.rwkv7 import random_state_dict  # noqa: E402

layers, c, n, vocab, d = 2, 32, 16, 16, 8
sd = random_state_dict(layers, c, n, vocab, d, d, d, d, seed=1, d_ff=64)
write_gguf(sys.argv[1], sd, Q.Q4_0, layers, c, n, d, d, d, d)
