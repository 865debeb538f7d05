"""The base class of every mixer (Mixer: the config hooks validate_mixer and state_bytes
call, the batched forms' plumbing) and two mixins of the per-stream forms: _BoundedKVCache
(a causal state that is the KV cache of every position so far, bounded by max_length: AFT-full,
GAU) and _EncoderOnly (no state, no causal form: Linformer, Reformer)."""

from typing import Dict, Optional

import torch
from torch import Tensor, nn

from . import registry
from .common import CHUNK, StateSize, _check_pos, _dtype
from .rotary import Rotary


class Mixer(nn.Module):
    """A sequence mixer: one subclass per config "type" (its module's MIXER_CLASSES; the
    package docstring says how they are found). Besides its forms, each subclass describes its
    config to validate_mixer and state_bytes through the class attributes and class methods
    below, so that no rule of one mixer lives outside its module."""
    TYPE = ""           # the config "type" it runs: a config_name of mixers.inc, or an alias
    USES_POS = False    # the per-stream forms take the absolute position of x's first row
    # The config keys besides "type": (required, optional).
    KEYS = (frozenset(), frozenset())
    # No causal form at all: "causal" defaults to false (check_config rejects true).
    ENCODER_ONLY = False
    # With "rotary" among KEYS: the key of the width the rotation turns within (each head's q, k).
    ROTARY_WIDTH = ""

    @classmethod
    def config_causal(cls, cfg: dict) -> bool:
        """is_causal(cfg): whether the config has the recurrent form; its "causal" flag by
        default (true, false for ENCODER_ONLY)."""
        return cfg.get("causal", not cls.ENCODER_ONLY)

    @classmethod
    def check_config(cls, cfg: dict, need, causal: bool) -> None:
        """The mixer's own rules for cfg, as need(ok, what) calls (what: the message, naming the
        key). validate_mixer has checked the keys against KEYS, "causal" (a bool) and the widths
        heads, dk, dv, expansion_dim and qk_dim (positive integers); it checks "scale" and
        "rotary" after. causal: config_causal(cfg)."""

    @classmethod
    def recurrent_state(cls, cfg: dict, d_model: int) -> StateSize:
        """state_bytes of a valid config with the recurrent form (config_causal), in a model of
        width d_model."""
        raise NotImplementedError(f"mixer {cls.TYPE}: {cls.__name__} gives no recurrent_state")

    def __init__(self, cfg: dict, d_model: int):
        super().__init__()
        registry.validate_mixer(cfg, d_model)
        if cfg["type"] != self.TYPE:
            raise ValueError(f"mixer: config type {cfg['type']!r} given to {type(self).__name__}")
        self.cfg = dict(cfg)
        self.d_model = d_model
        self.causal = self.config_causal(cfg)
        self.rotary = Rotary(cfg["rotary"]) if "rotary" in cfg else None   # q, k turned by position (§12)

    @property
    def has_step(self) -> bool:
        return self.causal

    def state_size(self) -> StateSize:
        return registry.state_bytes(self.cfg, self.d_model)

    def _no_rnn(self):
        why = "it is encoder-only" if self.ENCODER_ONLY else "it is non-causal (causal: false)"
        raise ValueError(f"mixer {self.TYPE}: no recurrent (step) form because {why}; use forward(x) "
                         "over the whole sequence")

    def _check_x(self, x: Tensor, dims: int):
        if x.dim() != dims or x.shape[-1] != self.d_model:
            shape = "(B, N, d_model)" if dims == 3 else "(B, d_model)"
            raise ValueError(f"mixer {self.TYPE}: expected {shape} with d_model={self.d_model}, got {tuple(x.shape)}")

    # Subclasses with a recurrent form override _initial_state and _prefill.
    def initial_state(self, batch: int, max_context: Optional[int] = None) -> dict:
        if not self.has_step:
            self._no_rnn()
        return self._initial_state(batch, max_context)

    def prefill(self, x: Tensor, state: dict):
        if not self.has_step:
            self._no_rnn()
        self._check_x(x, 3)
        return self._prefill(x, state)

    def step(self, x_t: Tensor, state: dict):
        if not self.has_step:
            self._no_rnn()
        self._check_x(x_t, 2)
        y, state = self._prefill(x_t[:, None], state)
        return y[:, 0], state

    def _steps(self, x: Tensor, state: dict):
        """Fallback prefill: N single steps (_step_one: (B, d) → (B, d))."""
        ys = []
        for t in range(x.shape[1]):
            y, state = self._step_one(x[:, t], state)
            ys.append(y)
        return torch.stack(ys, 1), state

    def _weight(self):
        for p in self.parameters():
            return p


class _BoundedKVCache:
    """The per-stream forms of a mixer whose causal state is the KV cache of every position
    so far, bounded by max_length T (AFT-full, GAU): per stream {"k" (P, kw), "v" (P, vw)}
    ({} when non-causal), batched k (B, T, kw), v (B, T, vw), pos; positions past T raise
    ValueError naming max_length. The subclass sets self.T and gives _kv_widths() → (kw, vw),
    _project(x) → (q, k, v, finish: attended rows → output) and _attend(q, K, V, t, mask)."""

    def empty_state(self, dtype: torch.dtype) -> Dict[str, Tensor]:
        """Before the first position: an empty KV cache (sorted names k, v); {} for a
        non-causal (encoder) mixer, which keeps no state."""
        if not self.causal:
            return {}
        kw, vw = self._kv_widths()
        return {"k": torch.zeros(0, kw, dtype=dtype), "v": torch.zeros(0, vw, dtype=dtype)}

    def _check(self, pos: int, n: int):
        _check_pos(pos, n, self.T, "max_length", self.TYPE)

    def _cache(self, state: Dict[str, Tensor], pos: int):
        K, V = state["k"], state["v"]
        if len(K) != pos or len(V) != pos:
            raise ValueError(f"{self.TYPE} state holds {len(K)} positions, the stream is at {pos}")
        return K, V

    def parallel(self, x: Tensor, state: Dict[str, Tensor], pos: int, chunk: int):
        """Chunked parallel form: x (N, d_model) at positions pos..pos+N−1 after the state's
        pos cached positions. A chunk of queries t0..t1 attends to the keys 0..t1, masked to
        p ≤ t; chunk ≥ N is the plain masked form. Returns (out (N, d_model), the state with
        x's keys and values appended)."""
        n = len(x)
        self._check(pos, n)
        q, k, v, finish = self._project(x)
        K0, V0 = self._cache(state, pos)
        K, V = torch.cat([K0, k]), torch.cat([V0, v])
        outs = []
        for c in range(0, n, chunk):
            end = min(c + chunk, n)
            outs.append(self._attend(q[c:end], K[:pos + end], V[:pos + end], torch.arange(pos + c, pos + end), True))
        return finish(torch.cat(outs)), {"k": K, "v": V}

    def recurrent(self, x: Tensor, state: Dict[str, Tensor], pos: int):
        """RNN form: per position t, append k_t, v_t to the cache, then attend over all of it
        (p ≤ t: no mask needed). Same arguments and result as `parallel`."""
        self._check(pos, len(x))
        q, k, v, finish = self._project(x)
        K, V = self._cache(state, pos)
        outs = []
        for i in range(len(x)):
            K, V = torch.cat([K, k[i:i + 1]]), torch.cat([V, v[i:i + 1]])
            outs.append(self._attend(q[i:i + 1], K, V, torch.tensor([pos + i]), False))
        return finish(torch.cat(outs)), {"k": K, "v": V}

    def noncausal(self, x: Tensor, state: Dict[str, Tensor], pos: int = 0):
        """Non-causal (encoder) form over x as a whole utterance (positions 0..N−1, N ≤ T; an
        encoder keeps no state, so `state` comes back unchanged): every query over every
        position, computed per block of CHUNK queries."""
        if pos != 0:
            raise ValueError(f"a non-causal {self.TYPE} mixer runs on a whole utterance from position 0")
        n = len(x)
        self._check(0, n)
        q, k, v, finish = self._project(x)
        outs = [self._attend(q[c:c + CHUNK], k, v, torch.arange(c, min(c + CHUNK, n)), False)
                for c in range(0, n, CHUNK)]
        return finish(torch.cat(outs)), state

    def _initial_state(self, batch, max_context):
        dt, dev = _dtype(self)
        kw, vw = self._kv_widths()
        return {"k": torch.zeros(batch, self.T, kw, dtype=dt, device=dev),
                "v": torch.zeros(batch, self.T, vw, dtype=dt, device=dev), "pos": torch.tensor(0)}

    @staticmethod
    def _append(state, k: Tensor, v: Tensor, pos: int):
        """Batched: copies of the state's k, v with x's rows k, v (B, N, ·) written at pos."""
        K, V = state["k"].clone(), state["v"].clone()
        K[:, pos:pos + k.shape[1]], V[:, pos:pos + v.shape[1]] = k, v
        return K, V


class _EncoderOnly:
    """Per stream, an encoder-only mixer keeps no state and has only the non-causal form;
    the subclass says why in NO_FORM_WHY."""
    NO_FORM_WHY = ""

    def empty_state(self, dtype: torch.dtype) -> Dict[str, Tensor]:
        """No state (an encoder)."""
        return {}

    def _no_form(self, *args, **kwargs):
        raise ValueError(f"mixer {self.TYPE}: no recurrent form (encoder only: {self.NO_FORM_WHY}); "
                         "use the non-causal form over a whole utterance")

    parallel = _no_form
    recurrent = _no_form
