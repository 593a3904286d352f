"""modelc.kernels"""
