"""The ops' cases: one module per op family (``<family>.py``, named as its package under ``exactfuse.ops``)
with the input generator shared by the tests, ``exactfuse verify`` and ``exactfuse bench``, the benchmark
grids and the roofline cost, each registered through its op (``@op.inputs``, ``@op.grid``, ``op.cost``);
a family whose module would pass 400 lines keeps its grids and cost in ``<family>_grids.py``.

The op packages do not import these modules: the registry imports every module of this package the first
time an op's inputs, grids or cost are read (``exactfuse.registry.load_declarations``).
"""
