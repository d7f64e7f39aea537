"""The curated matrix: its model (frozen records, compatmatrix.record) and its loader."""

from .load import load_matrix, parse_matrix
from .model import Component, Matrix

__all__ = ["Component", "Matrix", "load_matrix", "parse_matrix"]
