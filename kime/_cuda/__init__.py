"""The CUDA backend (CuPy): the only package of kime that imports CuPy, and only when a GPU is
asked for (`device="cuda"`, or `"auto"` on a machine with one). Importing this package imports
nothing from CuPy; `backend.CudaBackend` and `device.open_cupy` do, when called.

- `device.py`: find the GPU, with one clear error per reason it cannot run.
- `layout.py`: lay a packed batch into a plan's fixed slots (host side).
- `kernels.cu`, `kernels.py`: the CUDA kernels and the launches built from them.
- `gemm.py`: cuBLAS GEMMs with the compute type pinned.
- `weights.py`: the checkpoint's tensors uploaded once.
- `backend.py`: `CudaBackend`, a plan per slot count, a CUDA graph per plan.
"""
