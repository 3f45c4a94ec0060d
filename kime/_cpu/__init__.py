"""CPU backend: Cython kernels over C on kime's own pthreads pool, and the NumPy reference."""
