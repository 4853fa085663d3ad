"""One exception tree: every exception class Clearance defines, in any package, is a
:class:`ClearanceError`, and the tree drawn in ``clearance_api.errors`` names it (a
reader finds every error in one place)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

from clearance_api import errors
from clearance_api.errors import ClearanceError

PACKAGES = ["clearance_core", "clearance_runtime", "clearance_watcher", "clearance_compiler",
            "clearance_invalidator", "clearance_decision", "clearance_gateway",
            "clearance_cli", "clearance_console"]


def defined_exceptions() -> list[type[BaseException]]:
    found: list[type[BaseException]] = []
    for name in PACKAGES:
        package = importlib.import_module(name)
        for info in pkgutil.walk_packages(package.__path__, prefix=f"{name}."):
            module = importlib.import_module(info.name)
            found += [cls for _, cls in inspect.getmembers(module, inspect.isclass)
                      if issubclass(cls, BaseException) and cls.__module__ == info.name]
    return found


def test_the_walk_finds_the_exceptions_of_every_layer() -> None:
    modules = {cls.__module__.split(".")[0] for cls in defined_exceptions()}
    assert {"clearance_core", "clearance_runtime", "clearance_watcher",
            "clearance_cli"} <= modules


@pytest.mark.parametrize("cls", defined_exceptions(), ids=lambda c: c.__qualname__)
def test_every_exception_is_under_the_one_root_and_drawn(cls: type[BaseException]) -> None:
    assert issubclass(cls, ClearanceError), f"{cls.__module__}.{cls.__qualname__}"
    assert errors.__doc__ is not None and cls.__name__ in errors.__doc__, \
        f"{cls.__qualname__} is not in the tree drawn in clearance_api.errors"
