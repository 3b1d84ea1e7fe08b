"""exactfuse: fused Triton kernels for LLM inference that match PyTorch by contract.

Each ``exactfuse.ops`` line below imports one op package, which declares its ops in the registry.
"""

from exactfuse.layers import *  # noqa: F403  (the nn.Modules in exactfuse.layers.__all__)
from exactfuse.ops.act_and_mul import gelu_and_mul as gelu_and_mul
from exactfuse.ops.act_and_mul import gelu_mul as gelu_mul
from exactfuse.ops.act_and_mul import silu_and_mul as silu_and_mul
from exactfuse.ops.act_and_mul import silu_mul as silu_mul
from exactfuse.ops.conv import causal_conv1d as causal_conv1d
from exactfuse.ops.conv import causal_conv1d_fn as causal_conv1d_fn
from exactfuse.ops.conv import causal_conv1d_update as causal_conv1d_update
from exactfuse.ops.conv import short_conv as short_conv
from exactfuse.ops.gelu_and_mul_sparse import gelu_and_mul_sparse as gelu_and_mul_sparse
from exactfuse.ops.moe_silu_and_mul import moe_silu_and_mul as moe_silu_and_mul
from exactfuse.ops.sparse_paged_attention import sparse_paged_attention as sparse_paged_attention
from exactfuse.ops.w4a16 import w4a16_gemm as w4a16_gemm
from exactfuse.ops.w4a16 import w4a16_gemm_packed as w4a16_gemm_packed
from exactfuse.registry import OPS as OPS
from exactfuse.registry import InferenceOnlyError as InferenceOnlyError
from exactfuse.registry import get as get
from exactfuse.registry.op import check_env_priority
from exactfuse.utils import poison_outputs as poison_outputs
from exactfuse.warmup import warmup as warmup

check_env_priority()

__version__ = "0.1.0"
