"""The mixers of runtime/mixers/mixers.inc, found in this package: the list read at import,
each `file` stem's module loaded (the package's __init__ calls load), and what works on any
mixer config through its class: is_causal, validate_mixer, state_bytes, build_mixer. The
package docstring says what a mixer module holds and what happens when one is missing."""

import importlib
import importlib.util
import os
import re
from typing import Dict, List, NamedTuple, Optional

from .common import StateSize, _pos_int, _pos_number
from .rotary import check_rotary

# The list, relative to the repository root (this file is models/reference/recur_ref/mixers/).
MIXERS_INC = "runtime/mixers/mixers.inc"
REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), *[os.pardir] * 4))
# A line of the list, as runtime/mixers/mixers.cmake reads it.
_LINE = re.compile(r"RECUR_MIXER\(([A-Za-z0-9]+), *([a-z0-9_]+), *([a-z0-9_]+)\) *$")


class ListedMixer(NamedTuple):
    """A RECUR_MIXER(UnionTag, config_name, file) line of mixers.inc."""
    tag: str
    config_name: str
    file: str


class MixerNotInReference(ImportError):
    """A mixer that mixers.inc lists and the reference lacks: no module for its file stem, or
    no class for its config name in that module. Raised when such a mixer is validated or
    built, never at import (the runtime may list a mixer before the reference has it)."""


def read_mixers_inc(path: str = os.path.join(REPO_ROOT, MIXERS_INC)) -> List[ListedMixer]:
    """The RECUR_MIXER lines of `path` in their order; ImportError naming the file when it
    cannot be read or a line is not RECUR_MIXER(UnionTag, config_name, file)."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise ImportError(f"recur_ref.mixers: cannot read the list of mixers {path} ({MIXERS_INC} of the "
                          f"repository the reference is in): {e.strerror}") from e
    listed = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.startswith("RECUR_MIXER"):
            continue
        m = _LINE.match(line)
        if m is None:
            raise ImportError(f"{path}:{number}: {line!r} is not RECUR_MIXER(UnionTag, config_name, file)")
        listed.append(ListedMixer(*m.groups()))
    return listed


LISTED: List[ListedMixer] = read_mixers_inc()

# Filled by load(): config name → class for every class of the loaded modules (mixers.inc's
# config names, then any other name a module gives, such as the alias aft_conv), in list order;
# the loaded modules by file stem; and the config names of the list that have no class, with
# the reason (MixerNotInReference's message).
MIXERS: Dict[str, type] = {}
MODULES: Dict[str, object] = {}
MISSING: Dict[str, str] = {}
# Derived from the classes (load): the encoder-only types, and the width "rotary" turns within
# for each type that takes it.
ENCODER_ONLY: tuple = ()
ROTARY_WIDTH: Dict[str, str] = {}


def _module_file(stem: str) -> str:
    return f"models/reference/recur_ref/mixers/{stem}.py"


def load(package: str) -> None:
    """Import the module of every file stem of LISTED that exists (package.<stem>) and register
    its MIXER_CLASSES by their TYPE. A stem without a module, or a listed config name its module
    gives no class for, goes into MISSING. A module that exists but fails to import, or two
    classes with one TYPE, fail here."""
    global ENCODER_ONLY
    if MODULES or MISSING:
        return
    for stem in dict.fromkeys(entry.file for entry in LISTED):
        names = [entry.config_name for entry in LISTED if entry.file == stem]
        if importlib.util.find_spec(f"{package}.{stem}") is None:
            for name in names:
                MISSING[name] = (f"mixer {name}: {MIXERS_INC} lists it with file {stem}, but the reference has "
                                 f"no module {_module_file(stem)} (one whose MIXER_CLASSES has a Mixer class "
                                 f"with TYPE {name!r})")
            continue
        module = importlib.import_module(f"{package}.{stem}")
        MODULES[stem] = module
        for cls in getattr(module, "MIXER_CLASSES", ()):
            if cls.TYPE in MIXERS:
                raise ImportError(f"{_module_file(stem)}: {cls.__name__} has TYPE {cls.TYPE!r}, "
                                  f"which {MIXERS[cls.TYPE].__module__}.{MIXERS[cls.TYPE].__name__} has too")
            MIXERS[cls.TYPE] = cls
        for name in names:
            if name not in MIXERS:
                MISSING[name] = (f"mixer {name}: {MIXERS_INC} lists it with file {stem}, but "
                                 f"{_module_file(stem)} has no class for it (none of its MIXER_CLASSES "
                                 f"has TYPE {name!r})")
    ENCODER_ONLY = tuple(t for t, cls in MIXERS.items() if cls.ENCODER_ONLY)
    ROTARY_WIDTH.update((t, cls.ROTARY_WIDTH) for t, cls in MIXERS.items() if cls.ROTARY_WIDTH)


def mixer_class(type_name) -> Optional[type]:
    """The class of config "type" type_name; None for a type neither mixers.inc nor a module
    names. MixerNotInReference for a type mixers.inc lists that the reference lacks."""
    if not isinstance(type_name, str):
        return None
    if type_name in MISSING:
        raise MixerNotInReference(MISSING[type_name])
    return MIXERS.get(type_name)


def is_causal(cfg: dict) -> bool:
    """Whether the mixer has a recurrent form: cfg's causal flag; default true, except the
    encoder-only linformer and reformer (default false). A mixer's class may decide otherwise
    (config_causal): block_local's "causal" is its mask, and it has the step form only when
    causal with chunks_after 0 and chunks_before ≤ 1 (an encoder otherwise); gau with
    length_scale is an encoder."""
    cls = MIXERS.get(cfg.get("type")) if isinstance(cfg.get("type"), str) else None
    return cfg.get("causal", True) if cls is None else cls.config_causal(cfg)


def validate_mixer(cfg: dict, d_model: int) -> None:
    """Raise ValueError (message names the key and the problem) unless `cfg` is a
    well-formed mixer config for a model of width d_model (MixerNotInReference for a mixer
    that mixers.inc lists and the reference lacks)."""

    def need(ok, what):
        if not ok:
            raise ValueError(f"mixer ({cfg.get('type') if isinstance(cfg, dict) else '?'}): {what}")

    need(_pos_int(d_model), "d_model must be a positive integer")
    need(isinstance(cfg, dict), "mixer config must be a dict")
    t = cfg.get("type")
    cls = mixer_class(t)
    need(cls is not None, f"unknown mixer.type {t!r}; expected one of {sorted(MIXERS)}")
    req, opt = cls.KEYS
    keys = set(cfg) - {"type"}
    need(keys >= req, f"missing keys {sorted(req - keys)}")
    need(keys <= req | opt, f"unknown keys {sorted(keys - req - opt)} (allowed: {sorted(req | opt)})")
    need(isinstance(cfg.get("causal", True), bool), "mixer.causal must be true or false")
    causal = cls.config_causal(cfg)
    for k in ("heads", "dk", "dv", "expansion_dim", "qk_dim"):
        if k in cfg:
            need(_pos_int(cfg[k]), f"mixer.{k} must be a positive integer, got {cfg[k]!r}")
    cls.check_config(cfg, need, causal)
    if "scale" in cfg:
        need(_pos_number(cfg["scale"]), "mixer.scale must be > 0")
    if "rotary" in cfg:
        check_rotary(cfg, cls.ROTARY_WIDTH, need)


def state_bytes(cfg: dict, d_model: int) -> StateSize:
    """The f32 state size per stream of mixer `cfg` (see the state layouts in each class)."""
    validate_mixer(cfg, d_model)
    cls = MIXERS[cfg["type"]]
    if not cls.config_causal(cfg) or cls.ENCODER_ONLY:
        return StateSize(False, 0, 0, None)
    return cls.recurrent_state(cfg, d_model)


def build_mixer(cfg: dict, d_model: int, **kwargs):
    """The mixer module of config `cfg` (validated); kwargs go to its class (Linformer's E)."""
    validate_mixer(cfg, d_model)
    return MIXERS[cfg["type"]](cfg, d_model, **kwargs)
