#!/usr/bin/python3
"""Write a weights directory with deterministic test weights.

    /usr/bin/python3 models/reference/export.py --config models/configs/X.json --seed S --out DIR
        [--layout recur|fast-transformers]

DIR/weights.safetensors (f32, tensor names of the layout, models/configs/README.md)
and DIR/config.json (the given config). The layout is the config's own
(recur_ref.checkpoint.layout_of); --layout only asserts it.
"""

import argparse
import json

from recur_ref import checkpoint


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", required=True, help="recur-layout or fast-transformers builder config (JSON)")
    p.add_argument("--seed", type=int, required=True, help="torch.manual_seed for the weights")
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--layout", choices=checkpoint.LAYOUTS, help="expected layout of --config")
    args = p.parse_args()
    with open(args.config) as f:
        config = json.load(f)
    try:
        layout = checkpoint.check_layout(config, args.layout)
        checkpoint.export(config, args.seed, args.out)
    except ValueError as e:
        p.error(str(e))
    print(f"wrote {args.out}/{checkpoint.WEIGHTS_FILE} and {checkpoint.CONFIG_FILE} ({layout} layout, seed {args.seed})")


if __name__ == "__main__":
    main()
