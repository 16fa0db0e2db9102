"""Build side: compile Triton kernels ahead of time (no GPU needed) and pack them into archives.

Importing this package does not import Triton; the modules that need it import it when called.
"""
