"""Streaming a checkpoint's safetensors into modules.

Modules are built on the meta device, so no memory is spent on initial values that would be
overwritten; tensors are read one by one from the files straight into the target dtype/device;
then the load is verified: every parameter loaded, nothing unexpected, shapes equal.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import torch
from safetensors import safe_open
from torch import nn

from .checkpoints import CheckpointError

log = logging.getLogger(__name__)


def safetensors_files(directory: Path, stem: str = "model") -> list[Path]:
    """`model.safetensors`, or the shards listed by `model.safetensors.index.json`."""
    single = directory / f"{stem}.safetensors"
    index = directory / f"{stem}.safetensors.index.json"
    if single.exists():
        return [single]
    if index.exists():
        with open(index, encoding="utf-8") as f:
            shards = sorted(set(json.load(f)["weight_map"].values()))
        missing = [s for s in shards if not (directory / s).exists()]
        if missing:
            raise CheckpointError(f"{index} names shards that are missing: {missing}")
        return [directory / s for s in shards]
    raise CheckpointError(f"no {single.name} or {index.name} in {directory}")


def load_weights(
    module: nn.Module,
    files: list[Path],
    device: torch.device | str,
    dtype: torch.dtype,
    skip_prefixes: tuple[str, ...] = (),
    keep_fp32: tuple[str, ...] = (),
) -> nn.Module:
    """Fill a meta-device `module` from safetensors files, verifying the result.

    Keys starting with one of `skip_prefixes` are parts of the file this module does not run (the
    codec's encoder) and are not read. Float tensors are cast to `dtype` unless their name contains
    one of `keep_fp32`.
    """
    expected = dict(module.named_parameters())
    expected.update(module.named_buffers())
    loaded: dict[str, torch.Tensor] = {}
    unexpected: list[str] = []
    mismatched: dict[str, str] = {}
    for file in files:
        with safe_open(str(file), framework="pt", device="cpu") as f:
            for key in f.keys():
                if key.startswith(skip_prefixes):
                    continue
                if key not in expected:
                    unexpected.append(key)
                    continue
                tensor = f.get_tensor(key)
                if tuple(tensor.shape) != tuple(expected[key].shape):
                    mismatched[key] = f"{key}: file {tuple(tensor.shape)} vs model {tuple(expected[key].shape)}"
                    continue
                target = torch.float32 if any(s in key for s in keep_fp32) else dtype
                if tensor.is_floating_point():
                    tensor = tensor.to(dtype=target)
                loaded[key] = tensor.to(device)
    missing = sorted(set(expected) - set(loaded) - set(mismatched))
    problems = []
    if missing:
        problems.append(f"missing from the checkpoint: {_names(missing)}")
    if unexpected:
        problems.append(f"not part of the model: {_names(unexpected)}")
    if mismatched:
        problems.append(f"shape mismatch: {_names(list(mismatched.values()))}")
    if problems:
        where = ", ".join(str(f) for f in files)
        raise CheckpointError(f"checkpoint {where} does not fit the model:\n  " + "\n  ".join(problems))
    module.load_state_dict(loaded, strict=True, assign=True)
    return module.eval().requires_grad_(False)


def _names(keys: list[str], limit: int = 12) -> str:
    shown = ", ".join(keys[:limit])
    return shown + (f" ... and {len(keys) - limit} more" if len(keys) > limit else "")
