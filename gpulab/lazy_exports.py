"""The one idiom for a package's public names: each imported from its module on first use (PEP 562), then kept."""

from __future__ import annotations

from importlib import import_module


def lazy_exports(namespace: dict, homes: dict[str, str]) -> None:
    """Give a package (``namespace``: its ``globals()``) ``__getattr__``, ``__dir__`` and ``__all__`` for
    ``homes``, public name -> the module that defines it, so that importing the package imports none of
    them. A name once found is kept in the namespace: ``package.name(...)`` in a loop then costs a
    dictionary look-up, not an import look-up on every call."""
    package = namespace["__name__"]

    def __getattr__(name: str):
        if name not in homes:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = namespace[name] = getattr(import_module(homes[name]), name)
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(homes))

    namespace.update(__getattr__=__getattr__, __dir__=__dir__, __all__=sorted(homes))
