"""Shim so Beam's ``--setup_file ./setup.py`` can build the sdist; all metadata lives in setup.cfg."""
import setuptools

setuptools.setup()
