from exactfuse.testing import CompileWatch


class _Kernel:
    """The part of a Triton JITFunction CompileWatch reads: arg_names and per-device kernel caches."""

    __name__ = "fake_kernel"
    arg_names = ("p_x", "L", "C")

    def __init__(self, *keys):
        self.device_caches = {0: ({key: None for key in keys}, {}, None, None, None)}

    def compile(self, key):
        self.device_caches[0][0][key] = None


ALIGNED = "[('*bf16', 'D'), ('i32', None), ('i32', 'D')]{'num_warps': 4}"


def test_nothing_new_after_the_watch_began():
    kernel = _Kernel(ALIGNED)
    watch = CompileWatch(kernel)
    assert watch.new() == [[]]
    assert str(watch) == "nothing compiled"


def test_a_new_specialization_is_named_by_the_argument_that_differs():
    kernel = _Kernel(ALIGNED)
    watch = CompileWatch(kernel)
    unaligned = ALIGNED.replace("('*bf16', 'D')", "('*bf16', '')")
    kernel.compile(unaligned)
    assert watch.new() == [[unaligned]]
    assert str(watch) == "fake_kernel: new specialization, p_x: ('*bf16', 'D' -> ('*bf16', ''"
    kernel.compile(ALIGNED.replace("4}", "8}"))
    assert "{'num_warps': 4} -> {'num_warps': 8}" in str(watch)


def test_a_first_compile_is_reported_whole():
    kernel = _Kernel()
    watch = CompileWatch(kernel)
    kernel.compile(ALIGNED)
    assert str(watch) == f"fake_kernel: {ALIGNED} (nothing compiled before)"
