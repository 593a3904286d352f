"""Whole-layer numba entries: a decoder layer at decode, every layer of a decode step in one call, and
a mixture-of-experts layer's experts (with their stacked weights)."""
