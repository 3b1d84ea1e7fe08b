"""nn.Modules that call exactfuse ops; drop-in replacements for model code."""

from exactfuse.layers.activation import GeluAndMul, SiluAndMul
from exactfuse.layers.conv import CausalConv1d, ShortConv, allocate_conv_state
from exactfuse.layers.moe import MoeSiluAndMul
from exactfuse.layers.sparse import GeluAndMulSparse
from exactfuse.layers.w4a16 import W4A16Linear

__all__ = [
    "CausalConv1d",
    "GeluAndMul",
    "GeluAndMulSparse",
    "MoeSiluAndMul",
    "ShortConv",
    "SiluAndMul",
    "W4A16Linear",
    "allocate_conv_state",
]
