"""llama.cpp through llama-cpp-python's low-level bindings (ctypes over libllama.so, as
built by benchmarks/llama-cpp-setup.sh): a GGUF's logits at every position and its greedy
continuation, for the parity checks of benchmarks/llama_cpp_bench.py.

    peer = llama_peer.load(DIR)              # DIR: llama-cpp-setup.sh's folder
    with peer.Model(path, threads=1) as m:
        logits = m.logits(tokens)            # (len(tokens), vocab) float32
        ids = m.greedy(prompt, 64)           # 64 token ids
        ids = m.tokenize(b"text")            # its tokenizer, where the file has one
"""
import ctypes
import importlib
import os
import sys
import types

import numpy as np


def load(folder: str):
    """This module's Model bound to the llama.cpp built in `folder` (bin/, python/)."""
    os.environ["LLAMA_CPP_LIB_PATH"] = os.path.join(folder, "bin")
    # Only the bindings module: the package's __init__ imports its high-level API and that
    # API's dependencies (diskcache, jinja2), which the bindings do not need.
    package = types.ModuleType("llama_cpp")
    package.__path__ = [os.path.join(folder, "python", "llama_cpp")]
    sys.modules.setdefault("llama_cpp", package)
    ll = importlib.import_module("llama_cpp.llama_cpp")   # loads libllama.so from LLAMA_CPP_LIB_PATH

    quiet = ll.llama_log_callback(lambda level, text, user: None)
    ll.llama_log_set(quiet, ctypes.c_void_p())
    ll.llama_backend_init()

    class Model:
        """One GGUF with one context of one sequence; `threads` for decode and batches."""

        def __init__(self, path: str, threads: int = 1, n_ctx: int = 4096):
            self._quiet = quiet   # the callback must outlive the library's use of it
            mp = ll.llama_model_default_params()
            self.model = ll.llama_model_load_from_file(path.encode(), mp)
            if not self.model:
                raise RuntimeError(f"llama.cpp cannot load {path}")
            cp = ll.llama_context_default_params()
            cp.n_ctx, cp.n_batch, cp.n_ubatch, cp.n_seq_max = n_ctx, n_ctx, 512, 1
            cp.n_threads = cp.n_threads_batch = threads
            self.ctx = ll.llama_init_from_model(self.model, cp)
            if not self.ctx:
                raise RuntimeError(f"llama.cpp cannot make a context for {path}")
            self.vocab = ll.llama_vocab_n_tokens(ll.llama_model_get_vocab(self.model))

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            ll.llama_free(self.ctx)
            ll.llama_model_free(self.model)

        def _reset(self):
            ll.llama_memory_clear(ll.llama_get_memory(self.ctx), True)

        def _decode(self, tokens, start: int, want_all: bool):
            batch = ll.llama_batch_init(len(tokens), 0, 1)
            try:
                for i, t in enumerate(tokens):
                    batch.token[i] = int(t)
                    batch.pos[i] = start + i
                    batch.n_seq_id[i] = 1
                    batch.seq_id[i][0] = 0
                    batch.logits[i] = want_all or i == len(tokens) - 1
                batch.n_tokens = len(tokens)
                rc = ll.llama_decode(self.ctx, batch)
                if rc != 0:
                    raise RuntimeError(f"llama_decode returned {rc}")
            finally:
                ll.llama_batch_free(batch)

        def logits(self, tokens) -> np.ndarray:
            """(len(tokens), vocab) float32: the logits after each position, from the empty state."""
            self._reset()
            self._decode(tokens, 0, True)
            return np.stack([np.ctypeslib.as_array(ll.llama_get_logits_ith(self.ctx, i), (self.vocab,)).copy()
                             for i in range(len(tokens))])

        def tokenize(self, text: bytes):
            """llama.cpp's token ids of `text` (no special tokens added or parsed)."""
            vocab = ll.llama_model_get_vocab(self.model)
            buf = (ll.llama_token * (len(text) + 8))()
            n = ll.llama_tokenize(vocab, text, len(text), buf, len(buf), False, False)
            if n < 0:
                raise RuntimeError(f"llama_tokenize returned {n}")
            return list(buf[:n])

        def token_bytes(self, token: int) -> bytes:
            """The bytes llama.cpp writes for `token`."""
            vocab = ll.llama_model_get_vocab(self.model)
            buf = ctypes.create_string_buffer(256)
            n = ll.llama_token_to_piece(vocab, token, buf, len(buf), 0, False)
            if n < 0:
                raise RuntimeError(f"llama_token_to_piece returned {n}")
            return buf.raw[:n]

        def greedy(self, prompt, n: int):
            """n token ids, each the argmax of the logits after the prompt and the ids before it."""
            self._reset()
            self._decode(prompt, 0, False)
            out = []
            for i in range(n):
                row = np.ctypeslib.as_array(ll.llama_get_logits_ith(self.ctx, -1), (self.vocab,))
                out.append(int(np.argmax(row)))
                self._decode([out[-1]], len(prompt) + i, False)
            return out

    return Model
