"""The arguments an op is called with in tests, ``verify`` and bench grids: :class:`Case`, and
:class:`LazyCase` for grid cases too large to build before they run."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class Case:
    """One set of arguments for an op, with a readable id (``T7-d13824``)."""

    id: str
    args: tuple
    kwargs: dict = field(default_factory=dict)


@dataclass(frozen=True)
class LazyCase:
    """A bench-grid case whose tensors are built only when it runs: ``build()`` returns the :class:`Case`
    of this ``id``. Grids of large inputs yield these, so that a run builds one case at a time and a
    selection (``--case``, ``--shard``, ``--resume``) builds only the cases it keeps."""

    id: str
    build: Callable[[], Case]

    def materialize(self) -> Case:
        case = self.build()
        if case.id != self.id:
            raise ValueError(f"lazy case {self.id!r} built a case with id {case.id!r}")
        return case
