"""Integrations of exactfuse into model libraries: ``exactfuse.integrations.transformers``."""
