"""Paged causal attention over the KV pages (per row and head, per row, through BLAS, q8_0 pages,
soft-capping and sinks) and the KV page writes and element types."""
