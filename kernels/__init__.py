"""The prebuilt kernel library (matmul, flash attention, softmax, norms): see DESIGN.md §1.

The library lands with its own issue; this package reserves `kernel_dsl.kernels`.
"""
