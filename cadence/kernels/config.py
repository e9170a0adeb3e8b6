"""KernelConfig: which tile table the kernels read and which launch paths the decode graphs take
(EngineConfig.kernels). No torch: the API process builds it from options and a deployment file.

The profile picks the table (tile_table.py): "auto" the table of the engine's GPU family, found in
the GPU's name at start-up (any other GPU, and a CPU, gets the fallback family's); a family name;
or the path of a TOML table file an operator provides.
"""

from __future__ import annotations

from dataclasses import dataclass

from .tile_table import FALLBACK, FAMILIES, TileTable, load_profile

AUTO = "auto"
# The slab GEMM's input rows at most (linear/cuda/slab_gemm.cu's M: eight rows fill an m16 tile).
SLAB_MAX_ROWS = 8


def family_of(gpu_name: str) -> str | None:
    """The tile-table family of a GPU by its name (torch.cuda.get_device_name), or None."""
    name = gpu_name.upper()
    return next((family for family in FAMILIES if family.upper() in name), None)


@dataclass(frozen=True)
class ProfileChoice:
    """The table a profile gives on a GPU: a family or a file's path (`table`), why, as one log line
    says it, and whether it is the fallback for a GPU that has no family's table (`unmeasured`)."""

    table: str
    why: str
    unmeasured: bool = False


def choose_profile(profile: str, gpu_name: str | None) -> ProfileChoice:
    """The table `profile` gives on a GPU named `gpu_name` (None: no GPU)."""
    if profile != AUTO:
        return ProfileChoice(profile, f"tile table {profile} (kernel profile {profile})")
    if gpu_name is None:
        return ProfileChoice(FALLBACK, f"tile table {FALLBACK}, the fallback (no GPU)")
    family = family_of(gpu_name)
    if family is None:
        why = f"tile table {FALLBACK}, the fallback: no GPU family's table is for {gpu_name} (the sweeps of "
        why += "`bash benchmarks/gpu.sh tiles` measure one)"
        return ProfileChoice(FALLBACK, why, unmeasured=True)
    return ProfileChoice(family, f"tile table {family} for {gpu_name}")


@dataclass(frozen=True)
class KernelConfig:
    """How the engine's kernels launch: the tile table they read and the decode graphs' launch paths."""

    # The tile table: "auto" (the engine's GPU family, else the fallback), a family (h100, h200), or
    # the path of a .toml table file (cadence/kernels/profiles/ holds the families' as examples).
    profile: str = AUTO
    # Talker graphs of at most this many rows (decode batch buckets, prefill token buckets) launch
    # their Triton kernels with programmatic dependent launch (compute capability >= 9; elsewhere it
    # does nothing): each kernel starts while the one before finishes. It shortens small decode
    # walks (batch 1 and 8 by about a tenth on an H200) and slows batches of 128 and more, so it is on
    # up to 64 rows, where the GEMMs are Triton kernels too; graphs of more rows than the tile table's
    # pdl.trigger_first_above_rows gain from each kernel starting the next before it waits. 0: off.
    pdl_max_rows: int = 64
    # Decode graphs of at most this many rows (1-8; the code predictor's first pass counts two rows
    # a stream) run the decoder stacks' GEMMs as the slab GEMM (kernels/linear/cuda_slab_gemm.py: each
    # CTA's weights copied into shared memory by the copy engine before it waits for the kernel before,
    # the norms before qkv and gate/up folded into those GEMMs; Hopper and newer, bf16, compiled at
    # first use by NVRTC; at one row the code predictor's attention inside its o GEMM). It shortens
    # the batch-1 and batch-2 walks by about a fifth on an H200, and on an H100 the batch-4 walk by
    # 9 % (1.7B) to 18 % (0.6B) and the batch-8 walk by 3-6 % against the layer kernels. 0: off.
    slab_max_rows: int = 8

    def __post_init__(self):
        if self.profile not in (AUTO, *FAMILIES) and not self.profile.endswith(".toml"):
            allowed = ", ".join((AUTO, *FAMILIES))
            raise ValueError(
                f"unknown kernel profile '{self.profile}'; allowed: {allowed}, or the path of a .toml file"
            )
        if self.pdl_max_rows < 0:
            raise ValueError("pdl_max_rows must be >= 0 (0: off)")
        if not 0 <= self.slab_max_rows <= SLAB_MAX_ROWS:
            raise ValueError(f"slab_max_rows must be 0 (off) or 1-{SLAB_MAX_ROWS}, got {self.slab_max_rows}")

    def table_for(self, gpu_name: str | None) -> tuple[TileTable, ProfileChoice]:
        """The tile table this profile gives on a GPU named `gpu_name` (None: no GPU), and the choice
        (which and why). A table file that cannot be read or does not fit is a TileTableError naming it."""
        choice = choose_profile(self.profile, gpu_name)
        return load_profile(choice.table), choice

    def check_file(self) -> None:
        """A profile that names a table file: the file read and checked now (a TileTableError naming
        the file and key), so that a server refuses it before it starts an engine."""
        if self.profile.endswith(".toml"):
            load_profile(self.profile)
