"""Packaging shim: Beam's `--setup_file=./setup.py` runs `python setup.py sdist` to ship this
project to Dataflow (or any portable runner's) workers. The metadata lives in setup.cfg."""
import setuptools

setuptools.setup()
