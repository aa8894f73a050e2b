"""Where the `infer` under test was imported from, for tests that start a Python
subprocess: the subprocess must import the same `infer` as the test process.

In a development run that is the source tree; when the suite tests an installed
wheel (INFER_TEST_INSTALLED=1, see conftest.py) it is site-packages, and the source
tree must not shadow it: a `python -c`/`-m` subprocess puts its working directory
first on sys.path, so these tests run their subprocesses in IMPORT_ROOT, never in
the source tree.
"""
import os

import infer

IMPORT_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(infer.__file__)))


def pythonpath(*first: str) -> str:
    """A PYTHONPATH with `first` ahead of IMPORT_ROOT (and of the inherited one)."""
    inherited = os.environ.get("PYTHONPATH")
    return os.pathsep.join([*first, IMPORT_ROOT, *([inherited] if inherited else [])])
