"""Finding checkpoints (local directory or Hugging Face id) and streaming safetensors into modules.

Modules are built on the meta device, so no memory is spent on initial values that would be
overwritten; tensors are read one by one from the files straight into the target dtype/device;
then the load is verified: every parameter loaded, nothing unexpected, shapes equal.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable
from pathlib import Path

import torch
from safetensors import safe_open
from torch import nn

log = logging.getLogger(__name__)


class CheckpointError(RuntimeError):
    """A checkpoint could not be found or does not fit the model built from its config."""


def resolve_checkpoint(model: str | os.PathLike, allow_patterns: Iterable[str] | None = None) -> Path:
    """A local directory as is; otherwise a Hugging Face model id, downloaded (with a progress bar)
    into the Hugging Face cache. Offline, fail with instructions for using a local copy."""
    path = Path(model).expanduser()
    if path.is_dir():
        return path
    model_id = str(model)
    if path.exists() or model_id.count("/") != 1 or model_id.startswith(("/", ".", "~")):
        raise CheckpointError(f"'{model}' is neither a checkpoint directory nor a Hugging Face model id (owner/name)")
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(model_id, allow_patterns=list(allow_patterns) if allow_patterns else None))
    except Exception as e:  # the hub raises a zoo of connection/auth/offline errors
        raise CheckpointError(
            f"could not fetch '{model_id}' from the Hugging Face hub ({type(e).__name__}: {e}).\n"
            f"On a machine with internet access run:\n"
            f"    hf download {model_id} --local-dir ./{model_id.split('/')[-1]}\n"
            f"copy that directory here and pass its path instead of the id."
        ) from e


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
