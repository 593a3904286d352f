"""The stored block types: unpack quantized rows (GGML k-quants, i-quants, ternary) to int8 + scales,
dequantize, quantize activations and IQ4_NL weights; the code-book tables."""
