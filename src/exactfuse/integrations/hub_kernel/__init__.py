"""A local kernel repository for Hugging Face's ``kernels`` (``LocalLayerRepository(repo_path=<this folder>,
layer_name=...)``, built by ``exactfuse.integrations.hub.kernel_mapping``): ``kernels`` imports this file
by path, with ``metadata.json`` beside it, and takes its layers from ``layers``."""

from exactfuse.integrations import hub as layers

__all__ = ["layers"]
