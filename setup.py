"""Build: the placement planner's hot modules are compiled with mypyc.

mypyc compiles the annotated Python source as it stands, so compiled or not the modules run
the same code; compiled, a decision and its commit cost less (bench.placement prints which
ran). Installing needs a C compiler (Xcode's command-line tools on a Mac, gcc on Linux); with
MLXNET_PURE_PYTHON=1 set at install time nothing is compiled and the modules run as plain Python.
Everything else is in pyproject.toml.
"""

import os
import runpy

from setuptools import setup

# The list lives beside the code that reports the build (coordinator.placement.compiled), which
# imports only the standard library, so it is read from there without importing the package.
COMPILED_MODULES = runpy.run_path("coordinator/placement/compiled.py")["COMPILED_MODULES"]


def _extensions() -> list:
    if os.environ.get("MLXNET_PURE_PYTHON") == "1":
        return []
    from mypyc.build import mypycify  # the build's own requirement (pyproject's build-system)

    # Not optional: a group module that failed beside shims that built would break every import.
    return mypycify([name.replace(".", "/") + ".py" for name in COMPILED_MODULES], opt_level="3")


setup(ext_modules=_extensions())
