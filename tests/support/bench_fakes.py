"""A throwaway op for the bench harness's CPU tests (tests/bench), and a fake timer. Nothing is timed.

The op (unique name, removed from the registry afterwards) carries a correct provider, a wrong one,
one that declines big inputs, one that raises, and a fake peer; the fake timer reports fixed times
per provider; a warm-up task that sleeps, for the interrupt test.
"""

from __future__ import annotations

import collections
import math
import uuid

import torch

from exactfuse.bench import results
from exactfuse.bench.peers import PeerAdapter, register_peer, unregister_peer
from exactfuse.bench.roofline import Roofline
from exactfuse.bench.runner import BenchConfig, bench_op
from exactfuse.registry import OPS, Bitwise, Case, LazyCase, op

# Fake times (ms per call) by the provider that ran last.
TIMES = {"native": 2.0, "good": 1.0, "picky": 1.0, "fakepeer": 4.0}
LAST: list[str] = [""]
CALLS: collections.Counter = collections.Counter()
SEEN_PTRS: set[int] = set()
ROOF = Roofline(copy_bytes_per_s=1e12)


def fake_timer(body) -> float:
    body()
    return TIMES[LAST[0]]


def _native(x: torch.Tensor) -> torch.Tensor:
    LAST[0] = "native"
    return x * 2 + 1


def _good(x: torch.Tensor) -> torch.Tensor:
    LAST[0] = "good"
    SEEN_PTRS.add(x.data_ptr())
    FAKE_KERNEL.compile(tuple(x.shape))
    return x * 2 + 1


def _wrong(x: torch.Tensor) -> torch.Tensor:
    LAST[0] = "wrong"
    CALLS["wrong"] += 1
    y = x * 2 + 1
    y.view(-1)[0] += 1  # one wrong element
    return y


def _picky(x: torch.Tensor) -> torch.Tensor:
    LAST[0] = "picky"
    return x * 2 + 1


def _broken(x: torch.Tensor) -> torch.Tensor:
    raise RuntimeError("launch failed")


class FakeCompiled:
    """Stands in for Triton's CompiledKernel: n_regs, n_spills, metadata.shared."""

    Metadata = collections.namedtuple("Metadata", "name num_warps num_stages shared")

    def __init__(self):
        self.n_regs, self.n_spills = 32, 0
        self.metadata = self.Metadata("fake_kernel", 4, 1, 1024)
        self.name = "fake_kernel"


class FakeJit:
    """Stands in for a JITFunction: ``device_caches[device][0]`` maps keys to compiled kernels."""

    def __init__(self):
        self.device_caches = {0: ({}, {}, None, None, None)}

    def compile(self, key):
        self.device_caches[0][0].setdefault(key, FakeCompiled())


FAKE_KERNEL = FakeJit()
SHAPES = {"n8": (2, 4), "n64": (8, 8), "n512": (16, 32)}


BUILT: list[str] = []


def _lazy(case: Case) -> LazyCase:
    def build() -> Case:
        BUILT.append(case.id)
        return case

    return LazyCase(case.id, build)


def _grid(device, dtype):
    for name, shape in SHAPES.items():
        yield Case(name, (torch.arange(math.prod(shape), dtype=dtype, device=device).reshape(shape) / 7,))


def registered_fake_op():
    """Declare the fake op and its peer, yield it, then remove both (tests/bench/conftest.py's fixture)."""
    name = f"bench_test_{uuid.uuid4().hex[:8]}"
    fake = op(_native, name=name, contract=Bitwise(), dtypes=(torch.float32, torch.float16))
    fake.provider("good", kernels=[FAKE_KERNEL])(_good)
    fake.provider("wrong")(_wrong)
    fake.provider("picky", supports_args=lambda x: x.numel() <= 64)(_picky)
    fake.provider("broken")(_broken)
    fake.grid("default")(_grid)
    fake.grid("quick")(lambda device, dtype: (c for c in _grid(device, dtype) if c.id == "n8"))
    fake.grid("badref")(lambda device, dtype: [Case("str", ("not a tensor",))])
    fake.grid("lazy")(lambda device, dtype: [_lazy(c) for c in _grid(device, dtype)])
    fake.grid("dup")(lambda device, dtype: [Case("a", (torch.ones(2),)), Case("a", (torch.ones(3),))])
    fake.cost(bytes=lambda x: 2 * x.numel() * x.element_size())

    def peer_call(args, kwargs):
        x = args[0]

        def call():
            LAST[0] = "fakepeer"
            return (x * 2 + 1) * 1.01  # outside the fp32 Tolerance

        return call

    register_peer(PeerAdapter("fakepeer", name, available=lambda: True, prepare=peer_call))
    yield fake
    unregister_peer(name, "fakepeer")
    OPS.pop(name, None)


def bench_config(**kw) -> BenchConfig:
    defaults = dict(dtypes=(torch.float32,), compile=False, device="cpu", l2_bytes=1)
    return BenchConfig(**{**defaults, **kw})


def run_rows(fake_op, **kw) -> list[results.Row]:
    config = bench_config(**kw)
    rows = []
    for dtype in config.dtypes:
        rows += bench_op(fake_op, dtype, config, timer=fake_timer, roofline=ROOF)
    return rows


def rows_by_case(fake_op, **kw) -> dict[tuple[str, str], results.Row]:
    return {(r.shape, r.provider): r for r in run_rows(fake_op, **kw)}


def sleeping_warm_task(task, config) -> None:
    """A warm-up task for the interrupt test (``bench.warm.warm_up``'s ``work``): writes its process id to
    ``<task.case>.pid`` (whole when the name appears: written beside it, then renamed, so that a worker
    ended between the two leaves no empty file for the test to read), then sleeps past any test's patience."""
    import os
    import time

    with open(f"{task.case}.tmp", "w") as f:
        f.write(str(os.getpid()))
    os.replace(f"{task.case}.tmp", f"{task.case}.pid")
    time.sleep(120)


def oom_once_warm_task(task, config) -> str | None:
    """A warm-up task (``bench.warm.warm_up``'s ``work``) named by a path: out of memory on its first run
    (and on every run where the name ends in ``always``), else a run of 0.2 s whose start and end go into
    ``<task.case>.ran`` (the test reads how many ran at once)."""
    import os
    import time

    first = not os.path.exists(f"{task.case}.tried")
    open(f"{task.case}.tried", "a").close()
    if first or task.case.endswith("always"):
        return "OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."
    start = time.monotonic()
    time.sleep(0.2)
    with open(f"{task.case}.ran", "w") as f:
        f.write(f"{start} {time.monotonic()}")
    return None
