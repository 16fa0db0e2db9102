"""karchive: versioned archives of prebuilt Triton kernels, and a light runtime to launch them."""

__version__ = "0.1.0"
