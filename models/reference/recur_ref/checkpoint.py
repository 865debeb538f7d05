"""Weights directories (weights.safetensors + config.json) in either layout:
deterministic test weights, export, and loading back."""

import json
import os
from typing import Optional, Tuple

import torch
from torch import nn

from . import fast_transformers_layout as ftl
from . import safetensors
from .mixers import Rotary
from .model import REFERENCE_VERSION, RecurModel, RMSNorm, ScaleNorm

LAYOUTS = ("recur", "fast-transformers")
WEIGHTS_FILE = "weights.safetensors"
CONFIG_FILE = "config.json"


def layout_of(config: dict) -> str:
    """'recur' or 'fast-transformers': the config's "layout" key; without one, a
    config with query_dimensions and no d_model is a fast-transformers builder
    config (the same rule as converter/config.cc)."""
    layout = config.get("layout")
    if layout is None:
        return "fast-transformers" if "query_dimensions" in config and "d_model" not in config else "recur"
    if layout not in LAYOUTS:
        raise ValueError(f"unknown layout {layout!r}")
    return layout


def check_layout(config: dict, requested: Optional[str]) -> str:
    """The config's layout; ValueError if `requested` (a CLI --layout) disagrees."""
    layout = layout_of(config)
    if requested is not None and requested != layout:
        raise ValueError(f"--layout {requested} given, but the config is a {layout}-layout config")
    return layout


def recur_config(config: dict) -> dict:
    """The recur-layout config of a config in either layout."""
    return config if layout_of(config) == "recur" else ftl.recur_config(config)


def build_model(config: dict, seed: int) -> RecurModel:
    """The model of `config` (either layout) with deterministic, non-trivial f32 weights.

    After torch.manual_seed(seed): nn.Linear keeps PyTorch's default init,
    embedding and positions are N(0, 0.5²) (RecurModel's constructor), and every
    LayerNorm gets weight 1 + 0.1·N(0, 1) and bias 0.1·N(0, 1), RMSNorm and
    ScaleNorm weight 1 + 0.1·N(0, 1), so that the norm parameters are really exercised;
    a learned position scale is 1 + 0.1·N(0, 1) too. Stored frequencies and rotary tables
    (positions "freq": "stored", rotary "theta": "stored" or "table") are rounded to bfloat16,
    as a library's half-precision state_dict holds them, so that the base's values differ.
    """
    torch.manual_seed(seed)
    model = RecurModel(recur_config(config))
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.LayerNorm):
                m.weight.copy_(1 + 0.1 * torch.randn_like(m.weight))
                m.bias.copy_(0.1 * torch.randn_like(m.bias))
            elif isinstance(m, (RMSNorm, ScaleNorm)):
                m.weight.copy_(1 + 0.1 * torch.randn_like(m.weight))
        if model.input.position_scale is not None:
            model.input.position_scale.copy_(1 + 0.1 * torch.randn(1))
        stored = [model.input.position_freq] + [
            t for m in model.modules() if isinstance(m, Rotary) for t in (m.table, m.theta if m.theta_stored else None)]
        for t in stored:
            if t is not None:
                t.copy_(t.bfloat16().float())
    return model.eval()


def save(out_dir: str, model: RecurModel, config: dict, metadata: dict) -> None:
    """Write out_dir/weights.safetensors (f32, named for the config's layout) and
    out_dir/config.json (`config` as given)."""
    tensors = {name: t.float() for name, t in model.state_dict().items()}
    if layout_of(config) == "fast-transformers":
        tensors = ftl.to_fast_transformers(tensors)
    os.makedirs(out_dir, exist_ok=True)
    safetensors.write(os.path.join(out_dir, WEIGHTS_FILE), tensors, metadata)
    with open(os.path.join(out_dir, CONFIG_FILE), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")


def load(weights_dir: str) -> Tuple[RecurModel, dict]:
    """(model, config as stored) from a weights directory of either layout; the
    tensor names must match the config exactly."""
    with open(os.path.join(weights_dir, CONFIG_FILE)) as f:
        config = json.load(f)
    tensors, _ = safetensors.read(os.path.join(weights_dir, WEIGHTS_FILE))
    if layout_of(config) == "fast-transformers":
        tensors = ftl.from_fast_transformers(tensors)
    model = RecurModel(recur_config(config))
    model.load_state_dict(tensors, strict=True)
    return model.eval(), config


def export(config: dict, seed: int, out_dir: str) -> RecurModel:
    """build_model + save: the weights directory of `config` with seed `seed`."""
    model = build_model(config, seed)
    save(out_dir, model, config, {"format": "pt", "layout": layout_of(config), "seed": str(seed),
                                  "producer": f"recur reference (models/reference) v{REFERENCE_VERSION}"})
    return model
