"""MaskBeam library code: kernels (numpy/numba), Beam transforms, and consumers.

Importing this package has no side effects.
"""

__version__ = "0.1.0"
