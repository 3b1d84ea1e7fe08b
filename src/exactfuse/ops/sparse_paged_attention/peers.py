"""Baselines for ``sparse_paged_attention``: added in the bench step."""
