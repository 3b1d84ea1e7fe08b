"""The public callable of an op whose API differs from its registered schema."""

from __future__ import annotations

import inspect

from exactfuse.registry.op import Op


class KeywordOp:
    """The public callable of an op whose API is keyword-only after ``*``.

    ``torch.library.custom_op`` (under ``triton_op``) rejects keyword-only tensor arguments, so the
    registered op and its ``torch.ops.exactfuse`` schema take every argument positionally; this
    wrapper gives the public signature (``call``, e.g. ``short_conv``'s keyword ``mode`` for the schema's
    ``conv_mode``, or an ``out`` the wrapper allocates) and otherwise is the op (``priority``, ``select``,
    ``providers``, ``cases``, ...).
    """

    def __init__(self, registered: Op, call):
        self.op = registered
        self._call = call
        self.__doc__ = registered.native.__doc__
        self.__signature__ = inspect.signature(call)
        self.__name__ = registered.name

    def __call__(self, *args, **kwargs):
        return self._call(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.op, name)

    def __repr__(self) -> str:
        return repr(self.op)
