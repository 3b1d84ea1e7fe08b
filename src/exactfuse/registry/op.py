"""The op registry: a native spec, its providers, dispatch and the contract.

An :class:`Op` is declared from its native PyTorch function, which is the
spec: its signature becomes the schema of ``torch.ops.exactfuse.<name>`` and
its result is what every provider must reproduce under the op's contract.
Nothing here knows any particular op.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import pkgutil
import typing
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import torch

from exactfuse.registry import autograd, platform
from exactfuse.registry.case import Case
from exactfuse.registry.contracts import Contract, contract_for
from exactfuse.registry.library import _WRAP_TRITON, _WRAP_TRITON_DEFAULT, direct_triton_launches, register_torch_op
from exactfuse.registry.provider import NoProviderError, Provider

DEFAULT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def _describe_value(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        stride = "" if value.is_contiguous() else f" strides {tuple(value.stride())}"
        return f"Tensor{list(value.shape)} {str(value.dtype).removeprefix('torch.')} {value.device}{stride}"
    return repr(value)


def _signature_of(fn: Callable) -> inspect.Signature:
    """Signature with annotations resolved (``from __future__ import annotations`` safe)."""
    sig = inspect.signature(fn)
    hints = typing.get_type_hints(fn)
    params = [p.replace(annotation=hints.get(p.name, p.annotation)) for p in sig.parameters.values()]
    ret = hints.get("return", sig.return_annotation)
    return sig.replace(parameters=params, return_annotation=None if ret is type(None) else ret)


# Argument types that are never tensor subclasses: _has_tensor_subclass skips them with one set lookup.
_PLAIN_TYPES = frozenset({torch.Tensor, type(None), bool, int, float, str})


# (name, default) of each parameter of each mutating op, for Op._schema_args. A module global, not an
# attribute: torch.compile(dynamic=True) specializes ints read from a global, while an int read from a
# local object becomes a SymInt, and a default such as dilation=1 is a kernel constant.
_SCHEMA_DEFAULTS: dict[str, tuple[tuple[str, object], ...]] = {}


def _has_tensor_subclass(args: Sequence) -> bool:
    # On w4a16_gemm's 7 arguments: 0.3 µs; any() over a generator 0.7; the former
    # `type(a) is not torch.Tensor` test in any() 1.5 (timeit, 2-core CPU).
    for a in args:  # noqa: SIM110
        if type(a) not in _PLAIN_TYPES and isinstance(a, torch.Tensor):
            return True
    return False


def _first_device_type(args: Sequence, kwargs: dict) -> str:
    for value in (*args, *kwargs.values()) if kwargs else args:
        if isinstance(value, torch.Tensor):
            # is_cuda and is_cpu: 0.1 µs each; .device.type: 0.4 µs (timeit, 2-core CPU).
            return "cuda" if value.is_cuda else "cpu" if value.is_cpu else value.device.type
    return "cpu"


class Op:
    """A registered op. Call it like its native function."""

    def __init__(
        self,
        native: Callable,
        *,
        name: str | None = None,
        contract: Contract | dict[torch.dtype, Contract],
        interpreter_contract: Contract | dict[torch.dtype, Contract] | None = None,
        check: Callable[..., None] | None = None,
        mutates_args: Sequence[str] = (),
        compiler: str = "visible",
        fake: Callable | None = None,
        dtypes: Sequence[torch.dtype] = DEFAULT_DTYPES,
        warmup: Callable[..., None] | None = None,
    ):
        if compiler not in ("visible", "opaque"):
            raise ValueError(f"compiler must be 'visible' or 'opaque', got {compiler!r}")
        self.name = name or native.__name__
        self.native = native
        self.signature = _signature_of(native)
        self.contract = contract
        # Under TRITON_INTERPRET=1 the reference runs on the CPU, whose libm is not
        # CUDA's: an op may declare what holds there (default: the same contract).
        self.interpreter_contract = interpreter_contract or contract
        self.check = check
        self.mutates_args = tuple(mutates_args)
        if self.mutates_args:
            _SCHEMA_DEFAULTS[self.name] = tuple((p.name, p.default) for p in self.signature.parameters.values())
        self.compiler = compiler
        self.fake = fake
        self.dtypes = tuple(dtypes)
        self.providers: dict[str, Provider] = {"native": Provider("native", native)}
        # fn(device, dtype, **options): compiles the op's specializations through the real launcher
        self.warmup_fn: Callable[..., None] | None = warmup
        # Inputs, grids and cost: registered by the test kit's case modules, imported on first use.
        self._input_generator: Callable[..., Iterable[Case]] | None = None
        self._grids: dict[str, Callable[..., Iterable[Case]]] = {}
        self._bytes_fn: Callable[..., int] | None = None
        self._flops_fn: Callable[..., int] | None = None
        self._override: list[tuple[str, ...]] = []
        self._order_cache: dict[str, tuple[Provider, ...]] = {}
        self._checks_cache: dict[str, tuple[tuple[Provider, Callable | None], ...]] = {}
        self.grad_inputs: tuple[str, ...] = ()  # inference-only until `differentiable`
        self.backward_fn: Callable | None = None
        self.__doc__ = native.__doc__
        self.torch_op = register_torch_op(self)
        autograd.register(self, None)

    def _clear_caches(self) -> None:
        self._order_cache.clear()
        self._checks_cache.clear()

    # ----------------------------------------------------------- declaration
    def provider(
        self,
        name: str,
        *,
        supported: bool | Callable[[], bool] = True,
        supports_args: Callable[..., bool] | None = None,
        kernels: Sequence = (),
    ) -> Callable[[Callable], Callable]:
        """Decorator adding a provider; its signature must equal the native one."""

        def register(fn: Callable) -> Callable:
            if name in self.providers:
                raise ValueError(f"{self.name}: provider {name!r} is already registered")
            if _signature_of(fn) != self.signature:
                raise TypeError(
                    f"{self.name}: provider {name!r} signature {_signature_of(fn)} "
                    f"differs from the native spec {self.signature}"
                )
            self.providers[name] = Provider(name, fn, supported, supports_args, tuple(kernels))
            self._clear_caches()
            return fn

        return register

    def differentiable(self, *inputs: str, backward: Callable | None = None) -> None:
        """Give the op a backward with respect to the parameters ``inputs`` (an op without one is
        inference-only: a call whose tensors require grad raises before computing).

        ``backward(grad, *args) -> gradients``, one per name in ``inputs`` (``None`` where not needed);
        without it, the vector-Jacobian product of the native spec recomputed from the saved inputs.
        Registered with ``torch.library.register_autograd``, so compile and export see it too.
        """
        if self.mutates_args:
            raise ValueError(f"{self.name}: an op that mutates its arguments cannot declare a backward")
        self.grad_inputs, self.backward_fn = tuple(inputs), backward
        autograd.register(self, backward)

    def load_declarations(self) -> None:
        """Import the modules that declare inputs, grids and cost (:func:`load_declarations`; once)."""
        load_declarations()

    @property
    def input_generator(self) -> Callable[..., Iterable[Case]] | None:
        self.load_declarations()
        return self._input_generator

    @property
    def grids(self) -> dict[str, Callable[..., Iterable[Case]]]:
        self.load_declarations()
        return self._grids

    @property
    def bytes_fn(self) -> Callable[..., int] | None:
        self.load_declarations()
        return self._bytes_fn

    @property
    def flops_fn(self) -> Callable[..., int] | None:
        self.load_declarations()
        return self._flops_fn

    def inputs(self, fn: Callable[..., Iterable[Case]]) -> Callable:
        """Register the input generator ``fn(device, dtype, *, quick, seed) -> Iterable[Case]``."""
        self._input_generator = fn
        return fn

    def grid(self, grid_name: str) -> Callable[[Callable], Callable]:
        """Register a named benchmark grid ``fn(device, dtype) -> Iterable[Case | LazyCase]``."""

        def register(fn: Callable[..., Iterable[Case]]) -> Callable:
            self._grids[grid_name] = fn
            return fn

        return register

    def cost(self, *, bytes: Callable[..., int], flops: Callable[..., int] | None = None) -> None:
        """Declare the minimum bytes moved (and flops) of a call, for the roofline."""
        self._bytes_fn, self._flops_fn = bytes, flops

    # -------------------------------------------------------------- dispatch
    def priority_order(self, device_type: str) -> tuple[str, ...]:
        """Provider names in the order they are tried for ``device_type`` now: a scoped or ``EXACTFUSE_PRIORITY``
        order as given (strict), else the platform's default order among the providers this op declares."""
        if self._override:
            return self._override[-1]
        if order := platform.env_priority().get(self.name):
            return order
        return tuple(name for name in platform.default_priority(device_type) if name in self.providers)

    @contextlib.contextmanager
    def priority(self, order: Sequence[str]) -> Iterator[None]:
        """Scoped override of the provider order (strict: no implicit native fallback)."""
        unknown = [p for p in order if p not in self.providers]
        if unknown:
            raise ValueError(f"{self.name}: unknown providers {unknown}; known: {list(self.providers)}")
        self._override.append(tuple(order))
        self._clear_caches()
        try:
            yield
        finally:
            self._override.pop()
            self._clear_caches()

    def _providers_for(self, device_type: str) -> tuple[Provider, ...]:
        """The providers tried for ``device_type``, in order (cached until the priority changes)."""
        order = self._order_cache.get(device_type)
        if order is None:
            names = self.priority_order(device_type)
            unknown = [n for n in names if n not in self.providers]
            if unknown:
                raise ValueError(
                    f"{self.name}: priority names unknown providers {unknown}; known: {list(self.providers)}"
                )
            order = tuple(self.providers[n] for n in names)
            self._order_cache[device_type] = order
            # The available ones with their per-call check: what _select reads per call.
            self._checks_cache[device_type] = tuple((p, p.supports_args) for p in order if p.available)
        return order

    def select(self, *args, **kwargs) -> Provider:
        """The provider that would run these arguments."""
        return self._select(args, kwargs)

    def _select(self, args: tuple, kwargs: dict) -> Provider:
        device_type = _first_device_type(args, kwargs)
        checks = self._checks_cache.get(device_type)
        if checks is None:
            self._providers_for(device_type)
            checks = self._checks_cache[device_type]
        # Provider.accepts with availability resolved when the order was cached.
        for provider, supports in checks:
            if supports is None or supports(*args, **kwargs) is True:
                return provider
        raise NoProviderError(self._no_provider_message(self._providers_for(device_type), args, kwargs))

    def _no_provider_message(self, order, args, kwargs) -> str:
        bound = self.signature.bind(*args, **kwargs)
        described = ", ".join(f"{k}={_describe_value(v)}" for k, v in bound.arguments.items())
        reasons = "; ".join(f"{p.name}: {p.accepts(*args, **kwargs)}" for p in order)
        return f"{self.name}: no provider can run ({described}); tried {reasons}"

    def dispatch(self, *args, **kwargs):
        """Validate, select a provider and run it (no torch dispatcher): the one path of every call."""
        if self.check is not None:
            self.check(*args, **kwargs)
        return self._select(args, kwargs).fn(*args, **kwargs)

    def _call_with_grad(self, args: tuple, kwargs: dict):
        """A call whose tensors require grad under grad mode: through ``torch.ops`` (its registered
        autograd formula), or a refusal before anything is computed."""
        if (reason := autograd.refusal(self, args, kwargs)) is not None:
            raise autograd.InferenceOnlyError(reason)
        return self.torch_op(*args, **kwargs)  # its body validates and dispatches

    def __call__(self, *args, **kwargs):
        if torch.is_grad_enabled() and autograd.requires_grad(args, kwargs):
            return self._call_with_grad(args, kwargs)
        # Compiling, or tracing with fake/functional tensors (make_fx, export):
        # go through torch.ops so the graph holds the op as the library declares it.
        if torch.compiler.is_compiling() or _has_tensor_subclass(args):
            if self.mutates_args:
                return self.torch_op(*self._schema_args(args, kwargs))
            return self.torch_op(*args, **kwargs)
        if _WRAP_TRITON is None:  # pragma: no cover - older torch
            return self.dispatch(*args, **kwargs)
        # direct_triton_launches and dispatch, inlined: the frames cost 0.15 µs (dispatch) and 0.3 µs (a
        # with-statement) a call (host time on a 2-core CPU). Keep the body equal to dispatch.
        previous = getattr(_WRAP_TRITON, "value", _WRAP_TRITON_DEFAULT)
        _WRAP_TRITON.value = False
        try:
            if self.check is not None:
                self.check(*args, **kwargs)
            return self._select(args, kwargs).fn(*args, **kwargs)
        finally:
            _WRAP_TRITON.value = previous

    def _schema_args(self, args: tuple, kwargs: dict) -> tuple:
        """Every argument in schema order, defaults filled in: the schema of a mutating op has no
        default up to its last mutated argument (registry/library.schema_signature)."""
        return tuple(
            args[i] if i < len(args) else kwargs.get(name, default)
            for i, (name, default) in enumerate(_SCHEMA_DEFAULTS[self.name])
        )

    def run_provider(self, name: str, *args, **kwargs):
        """Run one named provider directly (after validation) on plain tensors; for tests and verify."""
        if self.check is not None:
            self.check(*args, **kwargs)
        with direct_triton_launches():
            return self.providers[name].fn(*args, **kwargs)

    def contract_for(self, dtype: torch.dtype, device_type: str = "cuda") -> Contract:
        """The contract a provider must meet for ``dtype`` on ``device_type``."""
        table = self.interpreter_contract if device_type == "cpu" else self.contract
        return contract_for(table, dtype)

    def iter_cases(self, device: str | torch.device, dtype: torch.dtype, *, quick: bool = False, seed: int = 0):
        """The declared cases one at a time, each built when reached: a caller that drops a case before the
        next frees its tensors, so a contract matrix holds one case's memory, not the whole set's."""
        if self.input_generator is None:
            return iter(())
        return iter(self.input_generator(torch.device(device), dtype, quick=quick, seed=seed))

    def cases(self, device: str | torch.device, dtype: torch.dtype, *, quick: bool = False, seed: int = 0):
        return list(self.iter_cases(device, dtype, quick=quick, seed=seed))

    def __repr__(self) -> str:
        return f"<exactfuse op {self.name}: providers {list(self.providers)}>"


OPS: dict[str, Op] = {}

# The test kit's package of case modules (inputs, bench grids, cost), one module per op family.
CASES_PACKAGE = "exactfuse.testing.cases"
_declarations_loaded = False


def op(native: Callable, **options) -> Op:
    """Declare an op from its native spec (see :class:`Op` for the options)."""
    declared = Op(native, **options)
    if declared.name in OPS:
        raise ValueError(f"op {declared.name!r} is already declared")
    OPS[declared.name] = declared
    return declared


def get(name: str) -> Op:
    try:
        return OPS[name]
    except KeyError:
        raise KeyError(f"unknown op {name!r}; known ops: {sorted(OPS)}") from None


def load_declarations() -> None:
    """Import every module of :data:`CASES_PACKAGE` (once): they register the ops' inputs, bench grids and
    cost through the ops (``@op.inputs``, ``@op.grid``, ``op.cost``). They build on the test kit, so
    ``import exactfuse`` does not import them; the registry does, the first time an op's inputs, grids or
    cost are read."""
    global _declarations_loaded
    if _declarations_loaded:
        return
    _declarations_loaded = True  # before the imports: they register through the ops
    try:
        package = importlib.import_module(CASES_PACKAGE)
        for module in pkgutil.iter_modules(package.__path__, f"{CASES_PACKAGE}."):
            importlib.import_module(module.name)
    except BaseException:
        _declarations_loaded = False
        raise


def check_env_priority() -> None:
    """Raise :class:`platform.PriorityError` if ``EXACTFUSE_PRIORITY`` names an op that is not declared or
    a provider its op does not have (called once all ops are)."""
    priority = platform.env_priority()
    unknown = sorted(set(priority) - set(OPS))
    if unknown:
        raise platform.PriorityError(f"EXACTFUSE_PRIORITY names unknown ops {unknown}; known ops: {sorted(OPS)}")
    for name, order in priority.items():
        if missing := [p for p in order if p not in OPS[name].providers]:
            raise platform.PriorityError(
                f"EXACTFUSE_PRIORITY: {name} has no providers {missing}; it has {list(OPS[name].providers)}"
            )
