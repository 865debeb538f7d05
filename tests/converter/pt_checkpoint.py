"""Checkpoints for converter_pt_checkpoint (pt_checkpoint_test.sh).

    pt_checkpoint.py make SOURCE_DIR CONFIG.json OUT_DIR
        OUT_DIR/{f32,f16,bf16}.safetensors and .pt: one model's weights in each
        dtype, as safetensors and as torch.save(model.state_dict());
        OUT_DIR/pytorch_model.bin: {"model": f32 state dict, "optimizer": ..., "epoch": 3};
        OUT_DIR/offset.pt: the f32 state dict with one tensor a view at an
        offset into a larger storage; OUT_DIR/legacy.pt, legacy_offset.pt: the
        f32 and offset state dicts in the legacy (non-zip) format; OUT_DIR/transposed.pt: with one weight a
        non-contiguous view (values unchanged); OUT_DIR/deflated.pt: f32.pt
        re-zipped with every entry deflated (zipfile.ZIP_DEFLATED).
    pt_checkpoint.py resave SOURCE_DIR WEIGHTS.safetensors OUT.pt
        torch.save of the safetensors file's tensors, names and dtypes kept.
    pt_checkpoint.py same A.recur A.source B.recur B.source
        exit 0 when the two models are identical but for the source hash each
        records (the SHA-256 of its source file).
"""

import copy
import hashlib
import json
import os
import sys
import zipfile


def make(src, config_path, out):
    sys.path.insert(0, os.path.join(src, "models", "reference"))
    import torch
    from recur_ref import checkpoint, safetensors

    with open(config_path) as f:
        config = json.load(f)
    model = checkpoint.build_model(config, 5)
    os.makedirs(out, exist_ok=True)
    for name, dtype in (("f32", torch.float32), ("f16", torch.float16), ("bf16", torch.bfloat16)):
        sd = copy.deepcopy(model).to(dtype).state_dict()
        safetensors.write(os.path.join(out, name + ".safetensors"), dict(sd))
        torch.save(sd, os.path.join(out, name + ".pt"))
    sd = model.state_dict()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    torch.save({"model": sd, "optimizer": optimizer.state_dict(), "epoch": 3},
               os.path.join(out, "pytorch_model.bin"))

    matrices = [k for k, v in sd.items() if v.dim() == 2]
    key = matrices[0]
    w = sd[key]
    offset = copy.copy(sd)
    offset[key] = torch.cat([torch.zeros(7), w.flatten()])[7:].view(w.shape)
    assert offset[key].storage_offset() == 7
    torch.save(offset, os.path.join(out, "offset.pt"))
    # The legacy (pre-1.6) format: a pickle stream, then the storages.
    torch.save(sd, os.path.join(out, "legacy.pt"), _use_new_zipfile_serialization=False)
    torch.save(offset, os.path.join(out, "legacy_offset.pt"), _use_new_zipfile_serialization=False)
    transposed = copy.copy(sd)
    transposed[key] = w.t().contiguous().t()
    assert not transposed[key].is_contiguous() and torch.equal(transposed[key], w)
    torch.save(transposed, os.path.join(out, "transposed.pt"))
    with zipfile.ZipFile(os.path.join(out, "f32.pt")) as stored, \
            zipfile.ZipFile(os.path.join(out, "deflated.pt"), "w", zipfile.ZIP_DEFLATED) as deflated:
        for info in stored.infolist():
            deflated.writestr(info.filename, stored.read(info))
    with zipfile.ZipFile(os.path.join(out, "deflated.pt")) as deflated:
        assert all(i.compress_type == zipfile.ZIP_DEFLATED for i in deflated.infolist())
    print(key)


def resave(src, weights, out):
    sys.path.insert(0, os.path.join(src, "models", "reference"))
    import collections
    import torch
    from recur_ref import safetensors

    tensors, _ = safetensors.read(weights)
    torch.save(collections.OrderedDict(sorted(tensors.items())), out)


def same(a, a_source, b, b_source):
    def masked(path, source):
        data = open(path, "rb").read()
        digest = hashlib.sha256(open(source, "rb").read()).hexdigest().encode()
        if data.count(digest) != 1:
            sys.exit(f"{path}: the source hash of {source} is not recorded once")
        return data.replace(digest, b"0" * len(digest))
    if masked(a, a_source) != masked(b, b_source):
        sys.exit(f"{a} and {b} differ")


if __name__ == "__main__":
    if sys.argv[1] == "make":
        make(*sys.argv[2:])
    elif sys.argv[1] == "resave":
        resave(*sys.argv[2:])
    elif sys.argv[1] == "same":
        same(*sys.argv[2:])
    else:
        sys.exit("usage: pt_checkpoint.py make|resave|same ...")
