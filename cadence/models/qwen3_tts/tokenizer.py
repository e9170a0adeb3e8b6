"""Text tokenizer: Qwen2 byte-level BPE built from a checkpoint's vocab.json + merges.txt.

Either file may be stored gzip-compressed (`vocab.json.gz`, `merges.txt.gz`: the copies cadence
ships in `architectures/`); the ids are the same.

Built with the `tokenizers` library the way transformers' Qwen2 fast tokenizer is (NFC normaliser,
regex split, byte-level, no BOS), plus the added tokens of tokenizer_config.json.

The pre-tokenizer regex has two variants. `qwen2` is the one the model was trained with. The
official loader (transformers 4.57.3 with `fix_mistral_regex=True`) swaps in Mistral's regex for a
*local directory* whose config.json says transformers_version 4.57.3; it splits camelCase words
("iPhone" -> "i" + "Phone"). `mistral` reproduces that, for matching the official package run
from a local directory.
"""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path
from typing import IO, Literal

from tokenizers import AddedToken, Regex, Tokenizer, decoders, normalizers, pre_tokenizers
from tokenizers.models import BPE

PretokenizerRegex = Literal["qwen2", "mistral"]

PRETOKENIZER_PATTERNS: dict[str, str] = {
    "qwen2": (
        r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"""
        r"""\s*[\r\n]+|\s+(?!\S)|\s+"""
    ),
    "mistral": (
        r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|"
        r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|"
        r"\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
    ),
}

TOKENIZER_FILES = ("vocab.json", "merges.txt", "tokenizer_config.json")


class TextTokenizer:
    def __init__(self, tokenizer: Tokenizer, regex: PretokenizerRegex):
        self._tok = tokenizer
        self.regex = regex

    @classmethod
    def from_dir(cls, path: str | Path, regex: PretokenizerRegex = "qwen2") -> TextTokenizer:
        if regex not in PRETOKENIZER_PATTERNS:
            raise ValueError(f"unknown pretokenizer regex '{regex}'; allowed: {sorted(PRETOKENIZER_PATTERNS)}")
        path = Path(path)
        missing = [name for name in TOKENIZER_FILES if find_file(path, name) is None]
        if missing:
            raise FileNotFoundError(f"tokenizer files missing from {path}: {missing}")
        with open_text(find_file(path, "vocab.json")) as f:
            vocab = json.load(f)
        merges = _read_merges(find_file(path, "merges.txt"))
        tok = Tokenizer(
            BPE(
                vocab=vocab,
                merges=merges,
                dropout=None,
                unk_token=None,
                continuing_subword_prefix="",
                end_of_word_suffix="",
                fuse_unk=False,
                byte_fallback=False,
            )
        )
        tok.normalizer = normalizers.NFC()
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(PRETOKENIZER_PATTERNS[regex]), behavior="isolated", invert=False),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
        tok.decoder = decoders.ByteLevel()
        with open_text(find_file(path, "tokenizer_config.json")) as f:
            added = json.load(f).get("added_tokens_decoder", {})
        for token_id in sorted(added, key=int):
            spec = added[token_id]
            token = AddedToken(
                spec["content"],
                single_word=spec.get("single_word", False),
                lstrip=spec.get("lstrip", False),
                rstrip=spec.get("rstrip", False),
                normalized=spec.get("normalized", False),
                special=spec.get("special", False),
            )
            if spec.get("special", False):
                tok.add_special_tokens([token])
            else:
                tok.add_tokens([token])
            if tok.token_to_id(spec["content"]) != int(token_id):
                raise ValueError(
                    f"tokenizer_config.json: added token {spec['content']!r} got id "
                    f"{tok.token_to_id(spec['content'])}, expected {token_id}"
                )
        return cls(tok, regex)

    def encode(self, text: str) -> list[int]:
        """Ids of `text`; special-token strings inside it are parsed as specials (as officially)."""
        return self._tok.encode(text, add_special_tokens=False).ids

    def encode_words(self, text: str) -> tuple[list[int], list[int | None], list[tuple[int, int]]]:
        """Ids of `text`, each token's pre-token index ("word") and its character span in `text`."""
        e = self._tok.encode(text, add_special_tokens=False)
        return e.ids, e.word_ids, e.offsets

    def added_tokens(self) -> list[str]:
        """The added (special and other) tokens' texts: `encode` parses them as one token each."""
        return [t.content for t in self._tok.get_added_tokens_decoder().values()]

    def decode(self, ids: list[int]) -> str:
        return self._tok.decode(ids, skip_special_tokens=False)

    def token_to_id(self, token: str) -> int | None:
        return self._tok.token_to_id(token)

    @property
    def vocab_size(self) -> int:
        return self._tok.get_vocab_size(with_added_tokens=True)


def find_file(directory: Path, name: str) -> Path | None:
    """`directory/name`, or its gzip-compressed copy `name.gz`; None when neither exists."""
    for candidate in (directory / name, directory / f"{name}.gz"):
        if candidate.is_file():
            return candidate
    return None


def open_text(path: Path) -> IO[str]:
    """A UTF-8 text file, decompressed on the fly when its name ends in .gz."""
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8")
    return open(path, encoding="utf-8")


def copy_plain(source: Path, target: Path) -> None:
    """Copy a file, decompressing it when its name ends in .gz (`target` names the plain file)."""
    if source.suffix != ".gz":
        shutil.copyfile(source, target)
        return
    with gzip.open(source, "rb") as src, open(target, "wb") as out:
        shutil.copyfileobj(src, out)


def _read_merges(path: Path) -> list[tuple[str, str]]:
    merges = []
    with open_text(path) as f:
        for i, line in enumerate(f):
            line = line.strip()
            if not line or (i == 0 and line.startswith("#version")):
                continue
            a, b = line.split()
            merges.append((a, b))
    return merges
