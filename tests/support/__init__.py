"""Helpers the test files share (importable as ``support.<module>``: pytest puts ``tests/`` on the path).

Only the test suite imports these; what the library's own commands use (contract checks, input factories,
offline compiles) is the test kit in ``exactfuse.testing``.

- ``attention``: sparse_paged_attention cases as argument tuples, runs into a NaN-filled ``out``, the
  contract check, forced split configurations, cases with special values
- ``bench_fakes``: a throwaway op and a fake timer for the bench harness's CPU tests (``tests/bench``)
- ``conv``: the conv family's case selection by state layout
- ``graph``: CUDA-graph capture after a warm-up on a side stream
- ``moe``: one moe_silu_and_mul input in both layouts
- ``w4a16``: dtype and group-size ids, GPTQ checkpoints, the identity check, the launch configurations
"""
