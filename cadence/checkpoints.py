"""Finding checkpoints: a local directory, or a Hugging Face id downloaded into the hub's cache.

Torch-free: the API process resolves the checkpoint it reads config and tokenizer from; the weights
load where the model runs (weights.py).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path


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
