"""Shared by the sweep scripts: print a report and keep a copy under ``$OUT`` when the device call sets it."""

import json
import os


def emit(name: str, lines: list[str]) -> None:
    """Print ``lines`` and write them to ``$OUT/<name>`` when ``OUT`` is set."""
    text = "\n".join(lines)
    print(text)
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], name), "w") as f:
            f.write(text + "\n")


def emit_json(name: str, data) -> None:
    """Write ``data`` to ``$OUT/<name>`` as indented JSON when ``OUT`` is set."""
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], name), "w") as f:
            json.dump(data, f, indent=1)
