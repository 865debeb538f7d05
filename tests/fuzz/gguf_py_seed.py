# Writes tests/fuzz/gguf_seeds/gguf_py.gguf with llama.cpp's own writer (the
# gguf package, 0.19.0): metadata of several types and arrays, and F32, F16,
# Q8_0, Q4_0 and Q4_K tensors. The converter tests read it back (gguf_test.cc).
#   python3 tests/fuzz/gguf_py_seed.py tests/fuzz/gguf_seeds/gguf_py.gguf
import sys
import numpy as np
import gguf
from gguf import GGUFWriter, GGMLQuantizationType as Q
from gguf import quants

out = sys.argv[1]
w = GGUFWriter(out, arch="llama")
w.add_uint32("llama.context_length", 128)
w.add_float32("llama.attention.layer_norm_rms_epsilon", 1e-5)
w.add_bool("tokenizer.ggml.add_bos_token", True)
w.add_int32("i32", -7)
w.add_uint64("u64", 1 << 40)
w.add_float64("f64", 0.125)
w.add_string("general.name", "tiny")
w.add_array("tokenizer.ggml.tokens", ["<s>", "</s>", "hello"])
w.add_array("tokenizer.ggml.scores", [0.0, -1.5, 2.25])
w.add_array("tokenizer.ggml.token_type", [1, 3, 1])
rng = np.random.default_rng(0)
f32 = rng.standard_normal((2, 3)).astype(np.float32)   # ne = [3, 2]
w.add_tensor("f32", f32)
f16 = rng.standard_normal((4,)).astype(np.float16)
w.add_tensor("f16", f16)
x = rng.standard_normal((2, 64)).astype(np.float32)
q8 = quants.quantize(x, Q.Q8_0)
w.add_tensor("q8_0", q8, raw_shape=q8.shape, raw_dtype=Q.Q8_0)
q4 = quants.quantize(x, Q.Q4_0)
w.add_tensor("q4_0", q4, raw_shape=q4.shape, raw_dtype=Q.Q4_0)
q4k = rng.integers(0, 256, size=(1, 144), dtype=np.uint8)   # one Q4_K block: ne = [256, 1]
w.add_tensor("q4_k", q4k, raw_shape=q4k.shape, raw_dtype=Q.Q4_K)
w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()

