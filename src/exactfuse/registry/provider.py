"""A provider of an op: an implementation, when it is available, and whether it takes given arguments."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(slots=True)
class Provider:
    """An implementation of an op.

    ``supported`` is a platform/library check (evaluated once, lazily); ``supports_args`` a per-call
    check that returns ``True`` to accept the arguments or a non-empty ``str`` saying why it declines
    (never a SymBool: it must not guard on sizes); ``kernels`` the ``@triton.jit`` functions it
    launches (for resource reports).
    """

    name: str
    fn: Callable
    supported: bool | Callable[[], bool] = True
    supports_args: Callable[..., bool | str] | None = None
    kernels: tuple = ()
    _available: bool | None = None

    @property
    def available(self) -> bool:
        if self._available is None:
            self._available = bool(self.supported() if callable(self.supported) else self.supported)
        return self._available

    def accepts(self, *args, **kwargs) -> bool | str:
        """``True``, or why this provider cannot run ``args`` here."""
        if not self.available:
            return "not available on this platform"
        if self.supports_args is None:
            return True
        verdict = self.supports_args(*args, **kwargs)
        return verdict if verdict is True or verdict else "declined these arguments"


class NoProviderError(RuntimeError):
    """No provider in the priority list can run the given arguments."""
