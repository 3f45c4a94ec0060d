"""CPU backend: Cython kernels with optional OpenMP, and the NumPy reference forward pass."""
