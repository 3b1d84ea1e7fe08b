"""Shared by the sweep scripts: print a report and keep a copy under ``$OUT`` when the device call sets it."""

import os


def emit(name: str, lines: list[str]) -> None:
    """Print ``lines`` and write them to ``$OUT/<name>`` when ``OUT`` is set."""
    text = "\n".join(lines)
    print(text)
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], name), "w") as f:
            f.write(text + "\n")
