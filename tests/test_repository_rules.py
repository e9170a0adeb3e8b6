"""Rules of the repository that a reviewer would otherwise check by hand, each as a test that names
what breaks it:

- cadence/, docs/, benchmarks/ and README.md describe the product as it is: no item numbers of past
  work ("#123"), no reference to the perf-notes file (gone: history lives in git), no "session N".
  A URL's anchor (https://...#12) is a true reference and allowed;
- the environment is read only for the documented user-facing settings, by the modules that own
  them, and every CADENCE_* variable the code names is in docs/deploy.md's list of them;
- no Python file, CUDA source or header over 500 lines, and no function over 80.
"""

from __future__ import annotations

import ast
import bisect
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

HISTORY_SCOPE = ("cadence", "docs", "benchmarks", "README.md")
# The released checkpoints' config and tokenizer files, shipped as they are published: not ours to word.
VERBATIM = ("cadence/models/qwen3_tts/architectures/",)
ITEM_NUMBER = re.compile(r"perf-notes|#[0-9]{2,3}\b")
URL_ANCHOR = re.compile(r"https?://\S*#[0-9]{2,3}\b")
SESSION = re.compile(r"\bsession [0-9]", re.IGNORECASE)

# The only modules that read the environment, and what they read (docs/deploy.md lists them).
ENVIRONMENT_READERS = {"cadence/server/cli.py", "cadence/bench/cli.py"}
ENVIRONMENT_DOCS = REPO / "docs" / "deploy.md"

SIZE_SCOPE = ("cadence", "tests", "benchmarks", "scripts")
MAX_FILE_LINES = 500
MAX_FUNCTION_LINES = 80
CUDA_SUFFIXES = (".cu", ".cuh")


def tracked_files(*roots: str) -> list[str]:
    """Repository-relative paths of the files under `roots`: git's list in a checkout (so a local
    scratch file does not count), else every file on disk."""
    try:
        out = subprocess.run(["git", "ls-files", "-z", "--", *roots], cwd=REPO, capture_output=True, check=True)
        files = [f for f in out.stdout.decode().split("\0") if f]
    except (OSError, subprocess.CalledProcessError):
        files = []
    if not files:
        for root in roots:
            path = REPO / root
            found = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
            files += [p.relative_to(REPO).as_posix() for p in found if "__pycache__" not in p.parts]
    return [f for f in files if (REPO / f).is_file()]


def text_of(path: str) -> str | None:
    """The file's text, or None for a binary file (an image: a NUL byte in it)."""
    data = (REPO / path).read_bytes()
    return None if b"\0" in data else data.decode("utf-8", errors="replace")


def history_references() -> Iterator[str]:
    for path in tracked_files(*HISTORY_SCOPE):
        text = None if path.startswith(VERBATIM) else text_of(path)
        for number, line in enumerate((text or "").splitlines(), 1):
            if ITEM_NUMBER.search(URL_ANCHOR.sub("", line)) or SESSION.search(line):
                yield f"{path}:{number}: {line.strip()[:110]}"


def test_docs_and_code_carry_no_item_numbers_or_session_history():
    found = list(history_references())
    assert not found, f"{len(found)} lines cite past work (say what is true now; history lives in git):\n" + "\n".join(
        found[:60]
    )


def test_the_history_check_finds_what_it_must_and_spares_url_anchors():
    def flagged(line: str) -> bool:
        return bool(ITEM_NUMBER.search(URL_ANCHOR.sub("", line)) or SESSION.search(line))

    assert flagged("# 4.23 -> 4.16 ms (perf-notes #127)") and flagged("shipped in #85") and flagged("Session 46")
    assert not flagged("see https://github.com/org/repo/issues/12#42 and #1e1e1e") and not flagged("step #1")


def environment_reads(tree: ast.AST) -> list[int]:
    """Lines that read or change the environment: os.environ, os.getenv and their aliases."""
    os_names, env_names = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            os_names |= {a.asname or a.name for a in node.names if a.name == "os"}
        elif isinstance(node, ast.ImportFrom) and node.module == "os":
            env_names |= {a.asname or a.name for a in node.names if a.name in ("environ", "getenv", "putenv")}
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in os_names:
            if node.attr in ("environ", "getenv", "putenv", "unsetenv", "environb", "getenvb"):
                lines.append(node.lineno)
        elif isinstance(node, ast.Name) and node.id in env_names:
            lines.append(node.lineno)
    return sorted(lines)


def python_sources(*roots: str) -> Iterator[tuple[str, ast.AST]]:
    for path in tracked_files(*roots):
        if path.endswith(".py"):
            yield path, ast.parse((REPO / path).read_text(), filename=path)


def test_only_the_documented_modules_read_the_environment():
    readers = {path: lines for path, tree in python_sources("cadence") if (lines := environment_reads(tree))}
    unexpected = {path: lines for path, lines in readers.items() if path not in ENVIRONMENT_READERS}
    assert not unexpected, (
        f"the environment is read at {unexpected}: make it a typed config field or a flag instead, or, for "
        "a user-facing secret, document it in docs/deploy.md#environment-variables and list it here"
    )


def test_every_environment_variable_the_code_names_is_documented():
    names = {
        node.value
        for _, tree in python_sources("cadence")
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and re.fullmatch(r"CADENCE_[A-Z0-9_]+", node.value)
    }
    assert {"CADENCE_API_KEY", "CADENCE_BENCH_API_KEY"} <= names
    section = re.search(r"^## Environment variables\n(.*?)(?=^## |\Z)", ENVIRONMENT_DOCS.read_text(), re.M | re.S)
    assert section, "docs/deploy.md has no Environment variables section"
    section = section.group(1)
    missing = sorted(n for n in names if f"`{n}`" not in section)
    assert not missing, f"not in docs/deploy.md's Environment variables: {missing}"


def test_the_environment_check_sees_every_form_of_read():
    source = "import os\nimport os as o\nfrom os import environ as env\na = os.environ.get('X')\nb = o.getenv('Y')\n"
    assert environment_reads(ast.parse(source + "c = env['Z']\nd = os.path.join('a')\n")) == [4, 5, 6]


def python_functions(tree: ast.AST) -> Iterator[tuple[str, int, int]]:
    """(qualified name, first line, lines from `def` to the last line) of every function and method."""

    def walk(node: ast.AST, prefix: str) -> Iterator[tuple[str, int, int]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield prefix + child.name, child.lineno, child.end_lineno - child.lineno + 1
                yield from walk(child, prefix + child.name + ".")
            elif isinstance(child, ast.ClassDef):
                yield from walk(child, prefix + child.name + ".")

    yield from walk(tree, "")


CUDA_NOISE = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)
CONTROL = {"if", "for", "while", "switch", "catch", "return", "sizeof", "decltype"}


def cuda_code(source: str) -> str:
    """The source without comments, string and character literals or preprocessor lines (their
    newlines kept, so line numbers hold)."""
    code = CUDA_NOISE.sub(lambda m: "\n" * m.group(0).count("\n") if m.group(0)[0] == "/" else '""', source)
    lines, out, directive = code.split("\n"), [], False
    for line in lines:
        starts = line.lstrip().startswith("#")
        out.append("" if starts or directive else line)
        directive = (starts or directive) and line.rstrip().endswith("\\")
    return "\n".join(out)


def function_name(header: str) -> str | None:
    """The name of the function a header declares (`__global__ void __launch_bounds__(256) f(int a)
    const`), or None when the header declares none (a struct, a namespace, an initializer)."""
    header = re.sub(r"(\s*\b(const|noexcept|override|final|mutable)\b)+\s*$", "", header).rstrip()
    header = re.sub(r"\s*->\s*[\w:<>, *&]+$", "", header)  # a trailing return type
    if not header.endswith(")"):
        return None
    depth = 0
    for i in range(len(header) - 1, -1, -1):
        depth += {")": 1, "(": -1}.get(header[i], 0)
        if depth == 0:
            name = re.search(r"([A-Za-z_]\w*)\s*$", header[:i])
            return name.group(1) if name and name.group(1) not in CONTROL else None
    return None


def cuda_functions(source: str) -> Iterator[tuple[str, int, int]]:
    """(name, first line, lines from its header to its closing brace) of every function body."""
    code = cuda_code(source)
    line_starts = [0] + [i + 1 for i, c in enumerate(code) if c == "\n"]

    def line_of(offset: int) -> int:
        return bisect.bisect_right(line_starts, offset)

    depth, header_start, open_function = 0, 0, None
    for i, c in enumerate(code):
        if c == "{":
            if open_function is None and (name := function_name(code[header_start:i])):
                start = header_start + len(code[header_start:i]) - len(code[header_start:i].lstrip())
                open_function = (name, line_of(start), depth)
            depth += 1
        elif c == "}":
            depth -= 1
            if open_function is not None and depth == open_function[2]:
                name, first, _ = open_function
                yield name, first, line_of(i) - first + 1
                open_function = None
        if c in "{};" and open_function is None:
            header_start = i + 1


def test_the_cuda_function_finder_measures_bodies():
    source = (
        '#include "x.cuh"\n#define TWICE(x) \\\n  { (x) * 2; }\nnamespace n {\nstruct S { int a; };\n'
        "__global__ void __launch_bounds__(256, 1) kernel(const float* x, int n) {\n"
        '  if (n) { x += 1; }  // a comment with a { brace\n  const char* s = "}";\n}\n'
        "}  // namespace\n__device__ inline int helper(int a) const\n{\n  return a;\n}\n"
    )
    assert list(cuda_functions(source)) == [("kernel", 6, 4), ("helper", 11, 4)]


def test_no_file_over_500_lines_and_no_function_over_80():
    too_long = []
    for path in tracked_files(*SIZE_SCOPE):
        if not path.endswith((".py", *CUDA_SUFFIXES)):
            continue
        source = (REPO / path).read_text()
        if (n := len(source.splitlines())) > MAX_FILE_LINES:
            too_long.append(f"{path}: {n} lines")
        if path.endswith(".py"):
            functions = python_functions(ast.parse(source, filename=path))
        else:
            functions = cuda_functions(source)
        too_long += [f"{path}:{line} {name}: {n} lines" for name, line, n in functions if n > MAX_FUNCTION_LINES]
    assert not too_long, (
        f"files over {MAX_FILE_LINES} lines or functions over {MAX_FUNCTION_LINES}: split them by what "
        "they do\n" + "\n".join(too_long)
    )
