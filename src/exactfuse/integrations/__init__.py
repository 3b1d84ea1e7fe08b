"""Integrations of exactfuse into model libraries: ``exactfuse.integrations.transformers`` (module patches),
``exactfuse.integrations.gptq`` (checkpoints), ``exactfuse.integrations.hub`` (Hugging Face ``kernels``),
``exactfuse.integrations.vllm`` (the vLLM plugin)."""
