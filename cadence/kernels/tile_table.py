"""The kernels' launch choices as data: a `TileTable` holds every tunable choice of the GEMMs,
attentions, launch order and sampler (tiles, row ranges, CTAs, stages, threads), read from a TOML
file of `profiles/` (one a GPU family) or one an operator provides.

The kernels read the process's current table (`current_table`) when they choose a launch: the
engine installs the one its KernelConfig names at start-up (`install_table`), before any graph is
captured; `using_table` sets one for a block (tests, sweeps). Until one is installed the kernels
read the fallback family's table. No torch here: the API process checks a table file too.

What stays a constant beside its kernel is what the kernel's code fixes (a slab GEMM's two rows, the
decode attention's page-table length, the sampler's widest vocabulary): a table cannot change those.
"""

from __future__ import annotations

import contextlib
import dataclasses
import tomllib
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

PROFILES = Path(__file__).with_name("profiles")
FAMILIES = ("h100", "h200")  # the GPU families with a table of their own: profiles/<family>.toml
FALLBACK = "h200"  # the table of any other GPU (and of CPU runs): the family the values were measured on
CUBLAS = "cublas"  # a streaming GEMM rule's tiles: cuBLAS runs the call


class TileTableError(ValueError):
    """A table file that does not fit TileTable: the file, the dotted key and why."""


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(message)


def _powers_of_two(owner, *names: str) -> None:
    for name in names:
        value = getattr(owner, name)
        _check(value > 0 and value & (value - 1) == 0, f"{name} must be a power of two, got {value}")


def _at_least_one(owner, *names: str) -> None:
    for name in names:
        _check(getattr(owner, name) >= 1, f"{name} must be >= 1, got {getattr(owner, name)}")


def _row_range(owner) -> None:
    _check(
        1 <= owner.min_rows <= owner.max_rows,
        f"needs 1 <= min_rows <= max_rows, got {owner.min_rows}, {owner.max_rows}",
    )


@dataclass(frozen=True)
class GemmTiles:
    """Launch choices of the streaming GEMM (linear/triton_streaming_gemm.py): weight rows per
    program, K per loop step, warps, pipeline stages, how many programs share one slab's K
    (split-K), the activation rows one program holds (the most rows a call may have). The defaults
    are a starting point for sweeps and tests; a table file names every field."""

    block_n: int = 32
    block_k: int = 256
    warps: int = 4
    stages: int = 3
    split_k: int = 1
    block_m: int = 16

    def __post_init__(self):
        _powers_of_two(self, "block_n", "block_k", "block_m", "warps")
        _at_least_one(self, "stages", "split_k")

    def k_per_split(self, k: int) -> int:
        """K one program of a split covers: its share of the K steps, whole steps."""
        steps = -(-k // self.block_k)
        return -(-steps // self.split_k) * self.block_k


@dataclass(frozen=True)
class GemmRule:
    """One row of the streaming GEMM's rules: a call of `rows` (first, last) activation rows on an
    [n, k] weight inside the bounds (None: unbounded) takes `tiles`, or cuBLAS where tiles is None
    (CUBLAS in the file)."""

    rows: tuple[int, int]
    tiles: GemmTiles | None
    n_min: int | None = None
    n_max: int | None = None
    k_min: int | None = None
    k_max: int | None = None

    def __post_init__(self):
        first, last = self.rows
        _check(1 <= first <= last, f"rows must be [first, last] with 1 <= first <= last, got {list(self.rows)}")
        if self.tiles is not None:
            _check(self.tiles.block_m >= last, f"tiles.block_m {self.tiles.block_m} holds fewer than {last} rows")

    def matches(self, n: int, k: int, rows: int) -> bool:
        def inside(x: int, low: int | None, high: int | None) -> bool:
            return (low is None or low <= x) and (high is None or x <= high)

        return inside(rows, *self.rows) and inside(n, self.n_min, self.n_max) and inside(k, self.k_min, self.k_max)


@dataclass(frozen=True)
class StreamingGemmTable:
    """The weight-streaming GEMM (Triton): the first rule that matches a call gives its tiles; a
    call no rule matches runs on cuBLAS. `small_rows`: the rows a call is taken to have where none
    is given (the smallest tiles'); `swiglu_max_rows`: the most rows the SwiGLU epilogue takes."""

    small_rows: int
    swiglu_max_rows: int
    rules: tuple[GemmRule, ...]

    def __post_init__(self):
        _at_least_one(self, "small_rows")

    def tiles(self, n: int, k: int, rows: int) -> GemmTiles | None:
        return next((rule.tiles for rule in self.rules if rule.matches(n, k, rows)), None)


@dataclass(frozen=True)
class SlabGemmTable:
    """The slab GEMM (CUDA, one or two rows): `ctas` CTAs a GEMM, at most one an SM, so that the
    next kernel's CTAs fit beside them."""

    ctas: int

    def __post_init__(self):
        _at_least_one(self, "ctas")


@dataclass(frozen=True)
class SlabSwigluTable:
    """The slab SwiGLU GEMM (CUDA): the gate/up calls of min_rows-max_rows bf16 rows take it, on
    `ctas_per_sm` CTAs an SM."""

    min_rows: int
    max_rows: int
    ctas_per_sm: int

    def __post_init__(self):
        _row_range(self)
        _at_least_one(self, "ctas_per_sm")


@dataclass(frozen=True)
class DecodeAttentionTable:
    """The CUDA decode attention: decode calls of min_rows-max_rows sequences whose contexts are
    known to be at most `short_context` tokens take it, with `stages` pages in flight a CTA and as
    many kv heads a CTA as keep at least `ctas` CTAs busy."""

    min_rows: int
    max_rows: int
    short_context: int
    stages: int
    ctas: int

    def __post_init__(self):
        _row_range(self)
        _at_least_one(self, "stages", "ctas")


@dataclass(frozen=True)
class PagedAttentionTable:
    """The Triton paged attention: `block_tokens`-token blocks (`short_block_tokens` where every
    context is known to be at most `short_context` tokens) on `warps` warps, the block loop
    pipelined `pipelined_stages` deep from `pipelined_from_rows` rows; the context split in two,
    four, ... up to `max_splits` ways while rows x kv heads x splits stays below `split_programs`;
    the rows' QK-norm, RoPE and cache write fused in up to `fused_max_rows` rows."""

    block_tokens: int
    short_block_tokens: int
    short_context: int
    warps: int
    pipelined_from_rows: int
    pipelined_stages: int
    max_splits: int
    split_programs: int
    fused_max_rows: int

    def __post_init__(self):
        _powers_of_two(self, "block_tokens", "short_block_tokens", "warps", "max_splits")


@dataclass(frozen=True)
class PdlTable:
    """Programmatic dependent launch: graphs of more rows than this launch trigger first."""

    trigger_first_above_rows: int


@dataclass(frozen=True)
class SamplerTable:
    """The samplers: the CUDA one's threads a CTA (`cuda_wide_threads` above `cuda_wide_above_vocab`
    columns), the Triton one's warps a program."""

    cuda_threads: int
    cuda_wide_threads: int
    cuda_wide_above_vocab: int
    triton_warps: int

    def __post_init__(self):
        for name in ("cuda_threads", "cuda_wide_threads"):
            threads = getattr(self, name)
            _check(threads % 32 == 0 and 32 <= threads <= 1024, f"{name} must be whole warps, 32-1024, got {threads}")
        _powers_of_two(self, "triton_warps")


@dataclass(frozen=True)
class TileTable:
    """Every tunable launch choice of the kernels, one section a kernel (the file's tables)."""

    streaming_gemm: StreamingGemmTable
    slab_gemm: SlabGemmTable
    slab_swiglu_gemm: SlabSwigluTable
    decode_attention: DecodeAttentionTable
    paged_attention: PagedAttentionTable
    pdl: PdlTable
    sampler: SamplerTable


# -- reading a table file ----------------------------------------------------------------------------


def load_table(path: str | Path) -> TileTable:
    """The table in the TOML file at `path`. Every key is required but a rule's bounds; an unknown
    key, a missing one or a wrong type or value is a TileTableError naming the file and the key."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise TileTableError(f"{path}: cannot read the tile table ({e.strerror or e})") from None
    except tomllib.TOMLDecodeError as e:
        raise TileTableError(f"{path}: invalid TOML: {e}") from None
    return _Reader(str(path)).dataclass(TileTable, data, "")


class _Reader:
    """TOML values into TileTable's dataclasses, checked against their annotations."""

    def __init__(self, source: str):
        self.source = source

    def error(self, key: str, message: str) -> TileTableError:
        return TileTableError(f"{self.source}: {key or '(top level)'}: {message}")

    def dataclass(self, cls: type, data: object, key: str):
        if not isinstance(data, dict):
            raise self.error(key, f"expected a table, got {data!r}")
        fields = {f.name: f for f in dataclasses.fields(cls)}
        for name in data:
            if name not in fields:
                raise self.error(key, f"unknown key '{name}'; allowed: {', '.join(fields)}")
        hints = typing.get_type_hints(cls)
        values = {}
        for name, f in fields.items():
            sub = f"{key}.{name}" if key else name
            if name in data:
                values[name] = self.value(hints[name], data[name], sub)
            elif f.default is not None:  # only a bound (None: none) may be left out
                raise self.error(sub, "missing")
        try:
            return cls(**values)
        except ValueError as e:  # the dataclass's own checks
            raise self.error(key, str(e)) from None

    def value(self, annotation, data: object, key: str):
        args = typing.get_args(annotation)
        if dataclasses.is_dataclass(annotation):
            return self.dataclass(annotation, data, key)
        if type(None) in args:  # GemmRule.tiles (CUBLAS: None) and the rules' bounds
            (inner,) = [a for a in args if a is not type(None)]
            if inner is GemmTiles and data == CUBLAS:
                return None
            if inner is GemmTiles and not isinstance(data, dict):
                raise self.error(key, f"expected a table of tiles or '{CUBLAS}', got {data!r}")
            return self.value(inner, data, key)
        if typing.get_origin(annotation) is tuple:
            if not isinstance(data, list):
                raise self.error(key, f"expected an array, got {data!r}")
            if args[-1] is Ellipsis:
                return tuple(self.value(args[0], item, f"{key}[{i}]") for i, item in enumerate(data))
            if len(data) != len(args):
                raise self.error(key, f"expected an array of {len(args)}, got {data!r}")
            return tuple(self.value(a, item, f"{key}[{i}]") for i, (a, item) in enumerate(zip(args, data, strict=True)))
        if annotation is int:
            if not isinstance(data, int) or isinstance(data, bool):
                raise self.error(key, f"expected an integer, got {data!r}")
            if data < 0:
                raise self.error(key, f"must be >= 0, got {data}")
            return data
        raise TypeError(f"tile tables do not read the annotation {annotation!r}")


# -- the table the kernels read ----------------------------------------------------------------------


def profile_path(family: str) -> Path:
    """The table file of a GPU family (one of FAMILIES)."""
    if family not in FAMILIES:
        raise ValueError(f"no tile table for the GPU family '{family}'; families: {', '.join(FAMILIES)}")
    return PROFILES / f"{family}.toml"


def load_profile(profile: str) -> TileTable:
    """The table a profile names: a GPU family (h100, h200) or the path of a .toml file."""
    return load_table(profile if profile.endswith(".toml") else profile_path(profile))


_current: TileTable | None = None


def current_table() -> TileTable:
    """The table the kernels read now: the installed one, else the fallback family's."""
    global _current
    if _current is None:
        _current = load_profile(FALLBACK)
    return _current


def install_table(table: TileTable) -> TileTable:
    """Kernels choose their launches from `table` from now on (a CUDA graph keeps the launches it
    captured); returns the previous table."""
    global _current
    previous, _current = current_table(), table
    return previous


@contextlib.contextmanager
def using_table(table: TileTable) -> Iterator[TileTable]:
    """Kernels launched (or captured) inside choose from `table`; the previous table comes back after."""
    previous = install_table(table)
    try:
        yield table
    finally:
        install_table(previous)
