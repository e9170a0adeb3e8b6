"""Sentence segmentation of text that arrives in pieces (an LLM's deltas) for the WebSocket route.

A sentence ends at . ! ? … followed by whitespace (so "3.14" and a "." at the end of a delta wait for
more text), at a CJK terminator 。！？ (no space follows those), or at a line break; closing quotes
and brackets stay with their sentence. A known abbreviation ("Dr.", "e.g.") does not end one. Text
that runs past `max_chars` without an end is cut at its last clause mark or space, so one long
run-on delta cannot hold audio back indefinitely.
"""

from __future__ import annotations

LATIN_ENDS = ".!?…"
CJK_ENDS = "。！？；"
CLOSERS = "\"')]}”’」』》）"
CLAUSE_MARKS = ",;:，、；：—"
ABBREVIATIONS = {"mr", "mrs", "ms", "dr", "prof", "st", "sr", "jr", "vs", "etc", "e.g", "i.e", "no", "fig"}


class SentenceSegmenter:
    def __init__(self, max_chars: int = 400):
        self.max_chars = max_chars
        self.buffer = ""

    def push(self, text: str) -> list[str]:
        """Add a delta; return the sentences it completed, in order."""
        self.buffer += text
        out = []
        while True:
            end = self._sentence_end()
            if (end is None or end > self.max_chars) and len(self.buffer) > self.max_chars:
                end = self._forced_cut()
            if end is None:
                return out
            sentence, self.buffer = self.buffer[:end].strip(), self.buffer[end:]
            if sentence:
                out.append(sentence)

    def flush(self) -> str | None:
        """The rest of the text (end of input), or None if only whitespace is left."""
        rest, self.buffer = self.buffer.strip(), ""
        return rest or None

    def _sentence_end(self) -> int | None:
        buf = self.buffer
        for i, ch in enumerate(buf):
            if ch == "\n" and buf[:i].strip():
                return i + 1
            if ch in CJK_ENDS:
                return self._after_closers(i + 1)
            if ch in LATIN_ENDS:
                j = self._after_closers(i + 1)
                if j >= len(buf):
                    return None  # the next delta decides ("3." + "14", "Dr." + " Smith")
                if buf[j].isspace() and not (ch == "." and self._abbreviation(i)):
                    return j
        return None

    def _after_closers(self, j: int) -> int:
        while j < len(self.buffer) and (self.buffer[j] in CLOSERS or self.buffer[j] in LATIN_ENDS):
            j += 1
        return j

    def _abbreviation(self, dot: int) -> bool:
        words = self.buffer[:dot].split()
        return bool(words) and words[-1].lower().lstrip("(\"'") in ABBREVIATIONS

    def _forced_cut(self) -> int:
        window = self.buffer[: self.max_chars]
        for marks in (CLAUSE_MARKS, " \t"):
            cut = max(window.rfind(m) for m in marks)
            if cut > self.max_chars // 4:
                return cut + 1
        return self.max_chars
