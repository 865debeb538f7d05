"""The sequence mixers of the reference, one class per mixer (float64-capable ground
truth for the C++ parity tests). Math: docs/attention-math.md §2 (softmax), §3 (linear
attention feature maps), §4 (AFT), §5 (Longformer windows), §6 (GAU / FLASH), §7
(Linformer), §8 (Reformer), §11 (RetNet retention), §14 (block-local), §16 (RWKV-7).

Every mixer is an `nn.Module` built as `build_mixer(cfg, d_model)` (= `MIXERS[cfg["type"]](cfg,
d_model)`); its `state_dict()` names are relative to the mixer (`query.weight`,
`feature_map.omega`, ...), so inside a block they become `blocks.{i}.mixer.<name>`. Parameters
are created in one fixed order per class, so a torch seed gives the same weights every time.

The package follows runtime/mixers/mixers.inc, the one list of mixers: one module per `file`
stem of its RECUR_MIXER(UnionTag, config_name, file) lines, named as runtime/mixers/<file>.cc
and converter/mixers/<file>.cc (linear_attention.py, softmax_attention.py, sliding_window.py,
aft.py, flash.py, linformer.py, gau.py, reformer.py, retnet.py, block_local.py, rwkv7.py). A mixer
module defines MIXER_CLASSES, the Mixer classes of its config names (TYPE = the config name;
aft.py also gives aft_conv, the converter's alias of aft_local), and __all__, the names this
package exports from it. Each class carries its own config rules (KEYS, check_config,
config_causal, ENCODER_ONLY, ROTARY_WIDTH) and state size (recurrent_state): base.Mixer
documents them. Shared by all:
  common.py        CHUNK, the config predicates, StateSize, small tensor helpers
  rotary.py        rotations by position (§11, §12), Rotary and the "rotary" rules
  feature_maps.py  linear attention's feature maps φ (§3) and their width
  base.py          the Mixer base class; the _BoundedKVCache and _EncoderOnly forms
  registry.py      reads mixers.inc (at import, from the repository this package is in),
                   loads the modules; MIXERS, is_causal, validate_mixer, state_bytes,
                   build_mixer
A stem that mixers.inc lists without a module here (or a listed config name its module has
no class for) does not fail the import: the runtime and converter may gain a mixer before
the reference does. Validating or building that mixer raises MixerNotInReference (an
ImportError) naming the missing file; MIXERS holds only the classes that exist. A list that
cannot be read or a malformed line fails the import, naming mixers.inc.

Each class has two sets of forms over the same parameters.

Per stream (what RecurModel runs, and so what the goldens are made from): x (N, d_model) is
one stream at absolute positions pos..pos+N−1; the state is a dict of tensors without a
batch dimension (the layouts of model.State):
  empty_state(dtype)                          the state before position 0
  parallel(x, state, [pos,] chunk)            chunked causal form → (y (N, d_model), state after x)
  recurrent(x, state, [pos])                  one position at a time, same result
  noncausal(x, state, [pos])                  encoder form over a whole utterance
Mixers whose math depends on absolute positions (USES_POS) take `pos`; linear_attention
passes (S, z) instead of a state dict.

Batched (x: (B, N, d_model), x_t: (B, d_model)):
  forward(x)                      parallel form → (B, N, d_model); causal or not per cfg
  has_step                        True when step/initial_state exist (causal mixers)
  initial_state(batch, max_context=None) → dict of tensors (the state before position 0)
  step(x_t, state)                → (y_t (B, d_model), new state); never mutates `state`
  prefill(x, state)               → (y (B, N, d_model), new state): the chunked form,
                                    continuing from `state` (== N steps)
  state_size()                    == state_bytes(cfg, d_model)
Mixers without a recurrent form (non-causal variants, Linformer, Reformer) raise ValueError
from initial_state / step / prefill with a message that says so.

Batched state dicts: float tensors with a leading batch dimension plus, where the mixer
needs the absolute position, "pos": a 0-d int64 tensor (positions consumed so far, the
same for the whole batch); KV caches are allocated for their bound. `state_bytes` counts
the float tensors only (f32 bytes per stream, i.e. batch 1), not "pos".
"""

from . import registry
from .base import Mixer
from .common import CHUNK, StateSize
from .feature_maps import (FAVOR_LAYOUTS, FEATURE_MAPS, FOURIER_MAPS, PERFORMER_MAPS, fast_transformers_favor,
                           feature_dim, orthogonal_random_matrix_, performer_favor, poly2, random_fourier)
from .registry import (MIXERS, MixerNotInReference, build_mixer, is_causal, mixer_class, state_bytes,
                       validate_mixer)
from .rotary import ROTARY_BASE, ROTARY_KEYS, ROTARY_PAIRS, ROTARY_THETA, Rotary, rotate_pairs, rotation_angles

registry.load(__name__)
from .registry import ENCODER_ONLY, ROTARY_WIDTH  # noqa: E402  (derived by load)

__all__ = ["CHUNK", "ENCODER_ONLY", "FAVOR_LAYOUTS", "FEATURE_MAPS", "FOURIER_MAPS", "MIXERS", "Mixer",
           "MixerNotInReference", "PERFORMER_MAPS", "ROTARY_BASE", "ROTARY_KEYS", "ROTARY_PAIRS", "ROTARY_THETA",
           "ROTARY_WIDTH", "Rotary", "StateSize", "build_mixer", "fast_transformers_favor", "feature_dim",
           "is_causal", "mixer_class", "orthogonal_random_matrix_", "performer_favor", "poly2", "random_fourier",
           "rotate_pairs", "rotation_angles", "state_bytes", "validate_mixer"]


def _export_mixer_modules():
    """Each loaded mixer module's own names (its __all__: classes, constants, functions)."""
    package = globals()
    for stem, module in registry.MODULES.items():
        for name in module.__all__:
            if name in package and package[name] is not getattr(module, name):
                raise ImportError(f"recur_ref.mixers: {stem}.py exports {name}, a name the package has already")
            package[name] = getattr(module, name)
            __all__.append(name)


_export_mixer_modules()
