"""Where each replica runs: the deployment file's `placement` section resolved to devices.

`replicas` is a count (every replica on `device`) or a list with one entry per replica: a device,
or a {device, codec_device} mapping. `auto` means cuda when there is a GPU, else cpu; a bare `cuda`
gives replica i the GPU i mod the number of GPUs, so `replicas: 2` with `device: cuda` puts one
replica on each of two GPUs. `codec_device` (cpu or cuda:N) gives the Codec partition a device of
its own (disaggregated); none keeps it with the Talker.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

DEVICE_FORMS = "auto, cpu, cuda, cuda:N"


def check_device(device: str) -> None:
    if not re.fullmatch(r"auto|cpu|cuda(:\d+)?", device):
        raise ValueError(f"'{device}' is not a device; allowed: {DEVICE_FORMS}")


def check_codec_device(device: str) -> None:
    if not re.fullmatch(r"cpu|cuda:\d+", device):
        raise ValueError(f"'{device}' is not a codec device; allowed: cpu, cuda:N (or null: with the talker)")


class PlacementError(ValueError):
    """A placement this machine cannot honour."""


@dataclass(frozen=True)
class ReplicaSpec:
    """One replica as the deployment file lists it."""

    device: str = field(default="auto", metadata={"check": check_device})
    codec_device: str | None = field(default=None, metadata={"check": check_codec_device})


@dataclass(frozen=True)
class Placement:
    """One replica's devices, resolved: the Talker's (cpu or cuda:N) and the Codec's (None: the same)."""

    device: str
    codec_device: str | None = None

    def describe(self) -> str:
        return self.device if self.codec_device is None else f"talker {self.device} + codec {self.codec_device}"


def resolve_placements(
    replicas: int | list[str | ReplicaSpec],
    device: str,
    codec_device: str | None = None,
    cuda_count: int | None = None,
) -> list[Placement]:
    """`replicas`, `device` and `codec_device` as the file or command line give them; `cuda_count`:
    GPUs visible (None: ask torch, which does not initialise CUDA in this process, and only when a
    replica may use CUDA: a CPU deployment's API process loads no torch)."""
    if isinstance(replicas, int):
        specs = [ReplicaSpec(device, codec_device)] * replicas
    else:
        # a list entry's own codec_device wins over the section's
        specs = [
            ReplicaSpec(r, codec_device)
            if isinstance(r, str)
            else ReplicaSpec(r.device, r.codec_device or codec_device)
            for r in replicas
        ]
    if not specs:
        raise PlacementError("placement: at least one replica")
    if cuda_count is None:
        wants_cuda = any(s.device != "cpu" or (s.codec_device or "cpu") != "cpu" for s in specs)
        cuda_count = visible_cuda_devices() if wants_cuda else 0
    out = []
    for i, spec in enumerate(specs):
        talker = _resolve(spec.device, i, cuda_count)
        codec = _resolve(spec.codec_device, i, cuda_count) if spec.codec_device else None
        out.append(Placement(talker, None if codec == talker else codec))
    return out


def visible_cuda_devices() -> int:
    import torch

    return torch.cuda.device_count()


def _resolve(spec: str, index: int, cuda_count: int) -> str:
    if spec == "auto":
        spec = "cuda" if cuda_count else "cpu"
    if spec == "cpu":
        return spec
    if not cuda_count:
        raise PlacementError(f"replica {index} is placed on {spec}, but no CUDA device is visible")
    if spec == "cuda":
        return f"cuda:{index % cuda_count}"
    n = int(spec.removeprefix("cuda:"))
    if n >= cuda_count:
        raise PlacementError(f"replica {index} is placed on {spec}, but only {cuda_count} CUDA devices are visible")
    return spec
