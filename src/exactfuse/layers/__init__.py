"""nn.Modules that call exactfuse ops; drop-in replacements for model code."""

from exactfuse.layers.activation import GeluAndMul, SiluAndMul

__all__ = ["GeluAndMul", "SiluAndMul"]
