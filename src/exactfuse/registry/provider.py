"""A provider of an op: an implementation, when it is available, and whether it takes given arguments."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

UNAVAILABLE = "its platform check is False"


@dataclass(slots=True)
class Provider:
    """An implementation of an op.

    ``supported`` is a platform/library check (evaluated once, lazily): ``True``, or ``False`` or a
    non-empty ``str`` saying why the provider cannot run here; ``supports_args`` a per-call check that
    returns ``True`` to accept the arguments or a non-empty ``str`` saying why it declines (never a
    SymBool: it must not guard on sizes); ``kernels`` the ``@triton.jit`` functions it launches (for
    resource reports).
    """

    name: str
    fn: Callable
    supported: bool | str | Callable[[], bool | str] = True
    supports_args: Callable[..., bool | str] | None = None
    kernels: tuple = ()
    _unavailable: str | None = None
    _checked: bool = False

    @property
    def unavailable_reason(self) -> str | None:
        """Why this provider cannot run on this platform (``None``: it can)."""
        if not self._checked:
            verdict = self.supported() if callable(self.supported) else self.supported
            if isinstance(verdict, str):
                self._unavailable = verdict or UNAVAILABLE
            elif not verdict:  # a check that says False, not why: name the check
                check = getattr(self.supported, "__name__", None)
                self._unavailable = f"{check}() is False" if check else UNAVAILABLE
            self._checked = True
        return self._unavailable

    @property
    def available(self) -> bool:
        return self.unavailable_reason is None

    def accepts(self, *args, **kwargs) -> bool | str:
        """``True``, or why this provider cannot run ``args`` here."""
        if (reason := self.unavailable_reason) is not None:
            return f"not available on this platform: {reason}"
        if self.supports_args is None:
            return True
        verdict = self.supports_args(*args, **kwargs)
        return verdict if verdict is True or verdict else "declined these arguments"


class NoProviderError(RuntimeError):
    """No provider in the priority list can run the given arguments."""
