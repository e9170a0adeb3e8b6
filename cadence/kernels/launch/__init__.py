"""How the kernels are launched: programmatic dependent launch (pdl.py, triton_pdl.py) and the CUDA
kernels' run-time compilation and driver launch (nvrtc.py)."""
