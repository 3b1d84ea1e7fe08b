"""exactfuse: fused Triton kernels for LLM inference that match PyTorch by contract."""

from exactfuse import ops as _ops  # noqa: F401  (declares every op)
from exactfuse.layers import GeluAndMul, SiluAndMul, W4A16Linear
from exactfuse.layers.moe import MoeSiluAndMul
from exactfuse.layers.sparse import GeluAndMulSparse
from exactfuse.ops.activation import gelu_and_mul, silu_and_mul
from exactfuse.ops.activation.moe import moe_silu_and_mul
from exactfuse.ops.activation.sparse import gelu_and_mul_sparse
from exactfuse.ops.w4a16 import w4a16_gemm
from exactfuse.registry import OPS, get
from exactfuse.utils import poison_outputs
from exactfuse.warmup import warmup

__version__ = "0.1.0"

__all__ = [
    "OPS",
    "GeluAndMul",
    "GeluAndMulSparse",
    "MoeSiluAndMul",
    "SiluAndMul",
    "W4A16Linear",
    "__version__",
    "gelu_and_mul",
    "gelu_and_mul_sparse",
    "get",
    "moe_silu_and_mul",
    "poison_outputs",
    "silu_and_mul",
    "w4a16_gemm",
    "warmup",
]
