"""Single home of column names, dtypes, features, file names and the manifest format.

Imports only pyarrow and numpy.
"""
