"""Duplicate inputs: exact (`exact`, by clean content) and near (`near`, MinHash bands)."""
