"""Sentence segmentation of text that arrives in pieces (an LLM's deltas) for the WebSocket route.

A sentence ends at . ! ? … followed by whitespace (so "3.14" and a "." at the end of a delta wait for
more text), at a CJK terminator 。！？ (no space follows those), or at a line break; closing quotes
and brackets stay with their sentence. A known abbreviation ("Dr.", "e.g.") does not end one. Text
that runs past `max_chars` without an end is cut at its last clause mark or space, so one long
run-on delta cannot hold audio back indefinitely.

The work is linear in the text: a scan position carries over from one delta to the next, so each
character is examined a bounded number of times however the text is split (a run of closers and
full stops at the very end of the buffer is looked at again when the next delta arrives; it is at
most `max_chars` long). The buffer holds at most the unfinished sentence.
"""

from __future__ import annotations

import re

LATIN_ENDS = ".!?…"
CJK_ENDS = "。！？；"
CLOSERS = "\"')]}”’」』》）"
CLAUSE_MARKS = ",;:，、；：—"
ABBREVIATIONS = {"mr", "mrs", "ms", "dr", "prof", "st", "sr", "jr", "vs", "etc", "e.g", "i.e", "no", "fig"}
LONGEST_WORD_CHECKED = 8  # an abbreviation is short: the word before a "." is looked at this far back


class SentenceSegmenter:
    def __init__(self, max_chars: int = 400):
        self.max_chars = max_chars
        self._buf = ""  # the unfinished sentence and what follows it
        self._scan = 0  # the first character not yet examined
        self._has_text = False  # something other than whitespace before _scan
        self._run_to = 0  # how far the run of stops at _scan, waiting for more text, was scanned

    @property
    def pending_chars(self) -> int:
        """Characters held back, waiting for the end of their sentence."""
        return len(self._buf)

    def push(self, text: str) -> list[str]:
        """Add a delta; return the sentences it completed, in order."""
        self._buf += text
        out = []
        while (end := self._next_end()) is not None:
            sentence = self._buf[:end].strip()
            self._buf = self._buf[end:]
            self._scan, self._has_text, self._run_to = 0, False, 0
            if sentence:
                out.append(sentence)
        return out

    def flush(self) -> str | None:
        """The rest of the text (end of input), or None if only whitespace is left."""
        rest = self._buf.strip()
        self._buf, self._scan, self._has_text, self._run_to = "", 0, False, 0
        return rest or None

    def _next_end(self) -> int | None:
        """Where the first sentence of the buffer ends (exclusive), or None to wait for more text."""
        buf, limit = self._buf, self.max_chars
        i = self._scan
        while i < len(buf) and i < limit:
            ch = buf[i]
            if ch == "\n" and self._has_text:
                return i + 1
            if ch in CJK_ENDS:
                j = self._after_closers(i + 1)
                return j if j <= limit or len(buf) <= limit else self._forced_cut()
            if ch in LATIN_ENDS:
                j = self._after_closers(max(i + 1, self._run_to))
                if j > limit:
                    return self._forced_cut()  # whatever follows the run, it ends past the limit
                if j >= len(buf):
                    self._scan, self._run_to = i, j  # the next delta decides ("3." + "14", "Dr." + " Smith")
                    return None
                if buf[j].isspace() and self._ends_sentence(i, j):
                    return j
                self._has_text = True
                i = j  # the run of stops and closers decided at once
                continue
            self._has_text = self._has_text or not ch.isspace()
            i += 1
        self._scan = i
        return self._forced_cut() if len(buf) > limit else None

    def _ends_sentence(self, first: int, after: int) -> bool:
        """The run of stops and closers buf[first:after] ends a sentence (a whitespace follows it),
        unless it is a single "." after an abbreviation."""
        run = self._buf[first:after]
        return run[0] != "." or any(c in LATIN_ENDS for c in run[1:]) or not self._abbreviation(first)

    def _after_closers(self, j: int) -> int:
        """The end of the run of closers and stops from j; past max_chars it does not matter where."""
        buf, stop = self._buf, min(len(self._buf), self.max_chars + 1)
        while j < stop and (buf[j] in CLOSERS or buf[j] in LATIN_ENDS):
            j += 1
        return j

    def _abbreviation(self, dot: int) -> bool:
        start = dot
        while start > 0 and dot - start < LONGEST_WORD_CHECKED and not self._buf[start - 1].isspace():
            start -= 1
        if start > 0 and not self._buf[start - 1].isspace():
            return False  # longer than any abbreviation
        return self._buf[start:dot].lower().lstrip("(\"'") in ABBREVIATIONS

    def _forced_cut(self) -> int:
        window = self._buf[: self.max_chars]
        for marks in (CLAUSE_MARKS, " \t"):
            cut = max(window.rfind(m) for m in marks)
            if cut > self.max_chars // 4:
                return cut + 1
        return self.max_chars


def long_form_pieces(text: str, max_chars: int) -> list[str] | None:
    """The pieces a text longer than `max_chars` is spoken as (split_long_text); None for a text
    spoken whole: one within `max_chars`, or any text when `max_chars` is 0."""
    if not max_chars or len(text) <= max_chars:
        return None
    return split_long_text(text, max_chars)


def split_long_text(text: str, max_chars: int) -> list[str]:
    """A long text as pieces of at most `max_chars` that a model speaks reliably one at a time: cut at
    paragraph breaks (blank lines), then at sentence ends (SentenceSegmenter's rules, which also cut
    a sentence longer than `max_chars` at a clause mark or space); consecutive sentences of one
    paragraph share a piece while they fit. Whitespace between pieces is dropped; nothing else is."""
    pieces: list[str] = []
    for paragraph in re.split(r"\n\s*\n", text):
        segmenter = SentenceSegmenter(max_chars)
        sentences = segmenter.push(paragraph)
        if (rest := segmenter.flush()) is not None:
            sentences.append(rest)
        current = ""
        for sentence in sentences:
            space = "" if not current or current[-1] in CJK_ENDS or current[-1] in "」』》）" else " "
            joined = current + space + sentence
            if len(joined) <= max_chars:
                current = joined
                continue
            pieces.append(current)
            current = sentence
        if current:
            pieces.append(current)
    return pieces
