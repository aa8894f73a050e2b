"""A clear ImportError when `import infer` finds a source tree without its kernels.

After ``pip install .`` the checkout's ``infer/`` folder still shadows the
installed package for anything run from the checkout's root (Python puts the
current folder first on sys.path), and that folder has no compiled extension:
without this check the first use fails with "cannot import name 'kernels' from
'infer'".  (A ``src/`` layout would avoid the shadowing; it was not chosen
because it moves every file that seven branches are editing at once.)
"""
from __future__ import annotations

import importlib.machinery
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))


def _has_extension(folder: str, name: str = "kernels") -> bool:
    suffixes = importlib.machinery.EXTENSION_SUFFIXES
    return any(os.path.exists(os.path.join(folder, name + s)) for s in suffixes)


def _installed_copy() -> str | None:
    """Another ``infer`` package on sys.path that has its extension built."""
    for entry in sys.path:
        folder = os.path.join(os.path.abspath(entry or os.curdir), "infer")
        if os.path.normcase(folder) != os.path.normcase(_HERE) and _has_extension(folder):
            return folder
    return None


def check_extension_built() -> None:
    """ImportError saying what happened and what to do, if infer.kernels is not built."""
    if _has_extension(_HERE):
        return
    other = _installed_copy()
    where = (f"An installed copy is at {other}, but this folder shadows it because "
             "Python searches the current folder first. " if other else "")
    raise ImportError(
        f"infer: {_HERE} is a source tree whose compiled kernels (infer/kernels*.so) "
        f"are not built. {where}Either run from another folder, or build this tree: "
        f"pip install -e . (or python setup.py build_ext --inplace).")


check_extension_built()
