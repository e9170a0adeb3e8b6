"""Saying which package is missing, and how to install it, when a command's imports fail."""

from __future__ import annotations

import importlib.metadata
import re
import sys

# Import names whose distribution on PyPI is called something else.
DISTRIBUTIONS = {
    "yaml": "pyyaml",
    "zmq": "pyzmq",
    "multipart": "python-multipart",
    "prometheus_client": "prometheus-client",
    "huggingface_hub": "huggingface_hub",
}


class MissingDependencyError(ImportError):
    """A command needs a package that is not installed; the message says which and how to install it."""


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def distribution(module: str) -> str:
    """The PyPI name of what provides the import `module`."""
    top = module.split(".")[0]
    return DISTRIBUTIONS.get(top, top)


def install_command(module: str) -> str:
    """The pip command that installs what provides `module`: cadence's own requirement for it (with
    its version range, or the extra that holds it) where cadence lists it, else the bare name."""
    dist = distribution(module)
    pip = f"{sys.executable} -m pip install"
    try:
        requirements = importlib.metadata.requires("cadence") or []
    except importlib.metadata.PackageNotFoundError:  # run from a source tree that is not installed
        requirements = []
    for spec in requirements:
        requirement, _, marker = spec.partition(";")
        name = re.match(r"[A-Za-z0-9_.-]+", requirement.strip())
        if name is None or _normalise(name.group(0)) != _normalise(dist):
            continue
        extra = re.search(r"extra\s*==\s*['\"]([^'\"]+)['\"]", marker)
        if extra:
            return f"{pip} 'cadence[{extra.group(1)}]'"
        return f"{pip} '{requirement.strip()}'"
    return f"{pip} {dist}"


def missing_dependency(error: ModuleNotFoundError, needed_by: str) -> MissingDependencyError:
    """`error` as a message naming the missing package, what needs it, and the command that installs it."""
    module = error.name or str(error)
    return MissingDependencyError(
        f"{needed_by} needs the Python package '{distribution(module)}' (to import '{module}'), which is not "
        f"installed in this environment ({sys.executable}).\nInstall it with:\n    {install_command(module)}\n"
        "or install cadence with all its dependencies (pip install -e . in a checkout)."
    )


def is_own_module(name: str | None) -> bool:
    """Whether a failed import is one of cadence's own modules (a bug or a broken install, not a missing package)."""
    return name is not None and (name == "cadence" or name.startswith("cadence."))
