"""Shared by the sweep scripts: print a report and keep a copy in the output folder when one is set."""

import json
import os


def out_dir() -> str | None:
    """The output folder: ``EXACTFUSE_OUT`` (``run.sh`` sets it to its ``results/``), else ``OUT``; None if unset."""
    return os.environ.get("EXACTFUSE_OUT") or os.environ.get("OUT") or None


def emit(name: str, lines: list[str]) -> None:
    """Print ``lines`` and write them to ``<output folder>/<name>`` when one is set (:func:`out_dir`)."""
    text = "\n".join(lines)
    print(text)
    if out := out_dir():
        with open(os.path.join(out, name), "w") as f:
            f.write(text + "\n")


def emit_json(name: str, data) -> None:
    """Write ``data`` to ``<output folder>/<name>`` as indented JSON when one is set (:func:`out_dir`)."""
    if out := out_dir():
        with open(os.path.join(out, name), "w") as f:
            json.dump(data, f, indent=1)
