"""One hook run without ``site``: ``python -S /path/to/loopwarden/hooks/run.py HOST [...]``.

This is the command ``loopwarden hook install`` writes. The host starts the hook twice per
tool call, and ``-S`` halves the interpreter's start: no ``site`` module, so no ``.pth``
files and no editable-install finder are read (the hook needs only the standard library).
Without ``site`` the package is not on ``sys.path``, so this file loads it from where it
lies: the folder above ``hooks/`` is the ``loopwarden`` package, whatever its folder is
called (``streams/`` in a clone, ``loopwarden/`` in site-packages).
"""

import sys


def load_package() -> None:
    """Import the folder above this one as the package ``loopwarden``."""
    from importlib.machinery import ModuleSpec, SourceFileLoader

    here = __file__.rpartition("/")[0] or "."
    root = here.rpartition("/")[0] or "."
    init = root + "/__init__.py"
    loader = SourceFileLoader("loopwarden", init)
    spec = ModuleSpec("loopwarden", loader, origin=init, is_package=True)
    spec.submodule_search_locations = [root]
    spec.has_location = True
    package = type(sys)("loopwarden")
    package.__spec__, package.__loader__, package.__file__, package.__path__ = spec, loader, init, [root]
    package.__package__ = "loopwarden"
    sys.modules["loopwarden"] = package
    loader.exec_module(package)


if __name__ == "__main__":
    del sys.path[0]  # this folder: its modules are not top-level modules
    load_package()
    from loopwarden.hooks.command import main

    sys.exit(main(sys.argv[1:]))
