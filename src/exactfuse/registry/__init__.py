"""The op registry: declare ops from native specs, add providers, dispatch."""

from exactfuse.registry.autograd import InferenceOnlyError
from exactfuse.registry.case import Case, LazyCase
from exactfuse.registry.comparison import ulp_distance
from exactfuse.registry.contracts import Bitwise, CheckResult, Contract, Tolerance, Ulp
from exactfuse.registry.keyword import KeywordOp
from exactfuse.registry.op import OPS, NoProviderError, Op, Provider, get, load_declarations, op

__all__ = [
    "OPS",
    "Bitwise",
    "Case",
    "CheckResult",
    "Contract",
    "InferenceOnlyError",
    "KeywordOp",
    "LazyCase",
    "NoProviderError",
    "Op",
    "Provider",
    "Tolerance",
    "Ulp",
    "get",
    "load_declarations",
    "op",
    "ulp_distance",
]
