"""Import confluent-kafka without its serializer helpers, for the command line only.

Why: ``import confluent_kafka`` runs the package's ``__init__``, which imports the (de)serializing
consumer and producer and with them ``asyncio`` and ``ssl``: 70 of the 80 ms the import costs, and
a third of ``aks validate``'s whole run at 1,000 partitions. The command line uses only the client
classes of ``cimpl`` and ``_model`` (and ``admin``), so it registers a package module first whose
missing names resolve lazily: from ``cimpl``, then ``_model``; any other name runs the real
``__init__`` in that module, so every name is still there for whoever asks. Not done in Airflow
processes, where other code may import confluent-kafka first and expects the package as it is.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import threading
import types
from typing import Any

_FIRST = ("cimpl", "_model")


def install() -> None:
    """Register the lazy package module unless confluent-kafka is already imported (or missing)."""
    if "confluent_kafka" in sys.modules:
        return
    spec = importlib.util.find_spec("confluent_kafka")
    if spec is None or not spec.submodule_search_locations or not spec.origin:
        return
    pkg = types.ModuleType("confluent_kafka")
    pkg.__path__ = list(spec.submodule_search_locations)
    pkg.__spec__ = spec
    pkg.__file__ = spec.origin
    pkg.__package__ = "confluent_kafka"
    origin = spec.origin
    lock = threading.RLock()

    def __getattr__(name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        for sub in _FIRST:
            module = importlib.import_module(f"confluent_kafka.{sub}")
            if hasattr(module, name):
                value = getattr(module, name)
                setattr(pkg, name, value)
                return value
        with lock:   # the whole package, once (two threads may ask at the same moment)
            if pkg.__dict__.pop("__getattr__", None) is not None:
                with open(origin, "rb") as source:
                    exec(compile(source.read(), origin, "exec"), pkg.__dict__)
        try:
            return pkg.__dict__[name]
        except KeyError:
            raise AttributeError(f"module 'confluent_kafka' has no attribute {name!r}") from None

    pkg.__getattr__ = __getattr__   # type: ignore[attr-defined]
    sys.modules["confluent_kafka"] = pkg
