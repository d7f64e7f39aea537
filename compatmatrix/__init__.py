"""compatmatrix: resolve, install and validate CPU PyTorch DDP stacks from a sourced compatibility matrix."""

__version__ = "0.1.0"
