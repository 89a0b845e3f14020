"""``python -m oclvm.viz``, or ``python python/oclvm/viz`` from a source tree: see oclvm.viz."""
import sys

if __package__:
    from . import main
else:
    # Run as a directory: load this package by its path, without importing oclvm (which needs the
    # built module).
    import importlib.util
    import pathlib

    _HERE = pathlib.Path(__file__).resolve().parent
    _SPEC = importlib.util.spec_from_file_location("oclvm_viz", _HERE / "__init__.py",
                                                   submodule_search_locations=[str(_HERE)])
    _VIZ = importlib.util.module_from_spec(_SPEC)
    sys.modules["oclvm_viz"] = _VIZ
    _SPEC.loader.exec_module(_VIZ)
    main = _VIZ.main

sys.exit(main())
