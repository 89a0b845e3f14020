"""pytest setup for the torch adapter tests: makes the built `oclvm` package importable.

The package is looked for, in order: already importable (installed with pip), the directory named
by OCLVM_TORCH_PYTHONPATH, then <repo>/build-torch/python (what adapters/torch/CMakeLists.txt
writes). Autoloading through the entry point is left to torch when the package is installed.
"""
import importlib.util
import os
import pathlib
import sys

_REPO = pathlib.Path(__file__).resolve().parents[2]

if importlib.util.find_spec("oclvm") is None:
    _candidates = [os.environ.get("OCLVM_TORCH_PYTHONPATH"), str(_REPO / "build-torch" / "python")]
    for _path in _candidates:
        if _path and (pathlib.Path(_path) / "oclvm").is_dir():
            sys.path.insert(0, _path)
            break
