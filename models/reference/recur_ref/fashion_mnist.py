"""Fashion-MNIST from the Debian package dataset-fashion-mnist (gzipped IDX files)."""

import gzip
import math
import os

import numpy as np
import torch
import torch.nn.functional as F

from . import batched

DIR = "/usr/share/datasets/fashion-mnist"
CLASSES = ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag",
           "Ankle boot")
START_TOKEN = 256   # fed before pixel 0; pixels are tokens 0..255


def _read_idx(path: str) -> np.ndarray:
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic = int.from_bytes(data[0:4], "big")
    if magic >> 8 != 0x08:   # 0x000008dd: unsigned bytes, dd dimensions
        raise ValueError(f"{path}: not an unsigned-byte IDX file (magic {magic:#010x})")
    ndim = magic & 0xFF
    shape = tuple(int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim))
    body = np.frombuffer(data, np.uint8, offset=4 + 4 * ndim)
    if body.size != int(np.prod(shape)):
        raise ValueError(f"{path}: {body.size} bytes of data, header says {shape}")
    return body.reshape(shape)


def load(split: str, directory: str = DIR):
    """(images (n, 784) uint8 in raster order, labels (n,) uint8) of split 'train' or 'test'."""
    prefix = {"train": "train", "test": "t10k"}[split]
    images = _read_idx(os.path.join(directory, f"{prefix}-images-idx3-ubyte.gz"))
    labels = _read_idx(os.path.join(directory, f"{prefix}-labels-idx1-ubyte.gz"))
    return images.reshape(len(images), -1), labels


def model_inputs(images: np.ndarray) -> np.ndarray:
    """(n, 784) pixels → (n, 784) int64 inputs: the start token, then pixels 0..782."""
    x = np.empty(images.shape, np.int64)
    x[:, 0] = START_TOKEN
    x[:, 1:] = images[:, :-1]
    return x


def bits_per_dim(model, images: np.ndarray, batch: int = 50, device: str = "cpu") -> float:
    """Mean −log2 p(pixel | earlier pixels) over every pixel of `images` (n, 784), the
    model run in its own dtype by recur_ref.batched (float64 sums)."""
    total = 0.0
    with torch.no_grad():
        for s in range(0, len(images), batch):
            x = torch.from_numpy(model_inputs(images[s:s + batch])).to(device)
            y = torch.from_numpy(images[s:s + batch].astype(np.int64)).to(device)
            logits = batched.forward(model, x).double()
            total += F.cross_entropy(logits.reshape(-1, 256), y.reshape(-1), reduction="sum").item()
    return total / (images.size * math.log(2))
