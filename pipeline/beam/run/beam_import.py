"""The first `import apache_beam` of a process, without pandas and pymongo (nor bson).

Beam's `typehints` package imports pandas whenever it is installed, only to register converters for
pandas-typed batched DoFns (`typehints.pandas_type_compatibility`); MaskBeam has none. That import
is ~0.4 CPU-seconds of every job's start (the launcher's; a thread-mode run has no other process).
Likewise `apache_beam.io` imports pymongo and its bson (~0.04 CPU-s) for its MongoDB connector, which
MaskBeam never uses. While Beam is imported, importing either raises ImportError, which Beam takes
as "not installed" (it guards both imports for that); afterwards each imports as usual for whoever
wants it (datasets, a user's code). Beam's other imports are unchanged.

beartype (~0.1 CPU-s) is imported by Beam's `typehints.typehints` for two names only, `is_subhint`
(called by `is_consistent_with` where Beam's own rules do not decide: never in a preprocess job) and
the `BeartypeDoorException` it raises. While Beam imports, `beartype`, `beartype.door` and
`beartype.roar` are stand-ins that give Beam a `is_subhint` that imports beartype on its first call
and an exception class that call raises in place of beartype's (`_BEARTYPE`); afterwards the real
packages import as usual. Any other Beam module left holding a stand-in is given the real objects.

requests and httplib2 (~0.1 CPU-s each with what they import: urllib3, charset_normalizer, pyparsing)
and boto3 (~0.09 CPU-s with botocore and s3transfer) are deferred: Beam imports each at the top of a
module that uses it only inside functions (the GCE metadata lookup, Beam's HTTP client for its
stager, its S3 client's constructor), which a job on local files never calls. While Beam imports,
each is a `DeferredModule` that imports the real module on its first attribute lookup (and forwards
every lookup after); afterwards `import requests` gives the real module as usual. A job that calls
none of them never imports them: one that touches no `s3://` path never imports boto3. boto3 was
hidden, as pandas is, until Beam 2.78's `s3io` took its failed `import boto3` for "AWS support not
installed". grpc cannot be deferred: the in-process runner's `channel_factory` subclasses one of its
classes when it is imported.

Beam takes no element types from annotations in this process (`disable_type_annotations`, a public
switch of Beam's, process-wide). MaskBeam's annotations are written for readers and type checkers, as
strings (`from __future__ import annotations`). Beam 2.77 and older could not resolve such strings
and declared those steps' types `Any`; Beam 2.78 resolves them into pipeline type hints and checks
every step against them: a step annotated `UnitResult | SpillRef` behind one Beam types `object`
stopped every job with a TypeCheckError. With the switch, Beam types MaskBeam's steps as it types
unannotated code, by its bytecode inference and its own transforms' hints (a few steps then get
Beam's tuple or string coders where 2.77's `Any` gave its pickling one; every shuffle's keys keep
theirs), and the outputs are byte-identical to those made under Beam 2.77
(`benchmarks/same_output.py --before_python`, all nine configurations). Hints declared with
`with_input_types`/`with_output_types` still count (Beam 2.78 then checks them with the annotations
of the parameters they leave unbound). A program that embeds MaskBeam's transforms in a pipeline of
its own loses the annotation-derived checks of its own steps as well; it can declare them instead.

A `DeferredModule` stands in for a module, not for its submodules: an `import requests.adapters`
while the stand-in is in sys.modules would load that submodule twice (Beam's import makes none).
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import sys
import threading
import types

_lock = threading.Lock()
_lock_deferred = threading.Lock()
HIDDEN = ("pandas", "bson", "pymongo")  # Beam imports each only where installed
DEFERRED = ("requests", "httplib2", "boto3")  # Beam uses each only inside functions a job never calls
# What Beam's MongoDB connector logs when it finds no pymongo: true, and of no concern to a job.
_NO_MONGO = ("apache_beam.io.mongodbio", "Could not find a compatible bson package.")


class _DropNoMongo(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return record.msg != _NO_MONGO[1]


def import_beam() -> None:
    """Import apache_beam, hiding from it each of HIDDEN and deferring each of DEFERRED not imported
    yet, beartype behind its stand-ins; then, and where Beam was imported first, Beam's types from
    annotations switched off (idempotent; see the module's docstring)."""
    with _lock:
        if "apache_beam" in sys.modules:
            import apache_beam  # noqa: F401 - already imported (or importing elsewhere): nothing to gain
            _no_types_from_annotations()
            return
        hidden = [name for name in HIDDEN if name not in sys.modules]
        for name in hidden:
            sys.modules[name] = None  # the import system raises ImportError for a None entry
        stand_ins = _beartype_stand_ins()
        deferred = {name: DeferredModule(name) for name in DEFERRED
                    if name not in sys.modules and importlib.util.find_spec(name) is not None}
        sys.modules.update(deferred)
        quiet = _DropNoMongo()
        logging.getLogger(_NO_MONGO[0]).addFilter(quiet)
        try:
            import apache_beam  # noqa: F401
        finally:
            logging.getLogger(_NO_MONGO[0]).removeFilter(quiet)
            for name in hidden:
                if name in sys.modules and sys.modules[name] is None:
                    del sys.modules[name]
            for name, module in {**stand_ins, **deferred}.items():
                if sys.modules.get(name) is module:
                    del sys.modules[name]
        if stand_ins:
            _no_stand_in_left_but_typehints(stand_ins)
        _no_types_from_annotations()


def _no_types_from_annotations() -> None:
    """Beam reads no element types from annotations (see the module's docstring)."""
    from apache_beam.typehints import disable_type_annotations

    disable_type_annotations()


class DeferredModule(types.ModuleType):
    """Stands for module `name` in the Beam modules that import it while Beam imports: the first
    lookup of an attribute (or of `__path__`, to import a submodule) imports the real module, and
    every lookup is answered by it. The import system's own probes (`__spec__`, `__loader__`) find
    a plain module's None and import nothing."""

    def __getattr__(self, attr: str):
        if attr.startswith("__") and attr != "__path__":  # copy, pickle and inspect probes
            raise AttributeError(attr)
        name = self.__name__
        with _lock_deferred:
            if sys.modules.get(name) is self:  # looked up while Beam imports: the real one from now on
                del sys.modules[name]
        return getattr(_deferred_module(name), attr)

    def __reduce__(self):  # pickled by name, as a module is: the real module where it is unpickled
        return _deferred_module, (self.__name__,)


def _deferred_module(name: str) -> types.ModuleType:
    """The real module of a `DeferredModule` (one of DEFERRED, a fixed table)."""
    if name not in DEFERRED:
        raise ValueError(f"{name!r} is not one of the modules deferred while Beam imports {DEFERRED}")
    return importlib.import_module(name)


def deferred_imported() -> list[str]:
    """Which of DEFERRED are imported now (for tests)."""
    return [name for name in DEFERRED if isinstance(sys.modules.get(name), types.ModuleType)
            and not isinstance(sys.modules.get(name), DeferredModule)]


class BeartypeDoorException(Exception):
    """Raised by the stand-in `is_subhint` where beartype's raises its own `BeartypeDoorException`
    (Beam's `is_consistent_with` catches it by the name it imported: this class)."""


def _is_subhint(sub, base) -> bool:
    """beartype's `is_subhint`, imported on the first call; its exceptions as BeartypeDoorException."""
    from beartype.door import is_subhint
    from beartype.roar import BeartypeDoorException as Raised

    try:
        return is_subhint(sub, base)
    except Raised as error:
        raise BeartypeDoorException(str(error)) from error


_BEARTYPE = {"beartype.door": {"is_subhint": _is_subhint}, "beartype.roar": {"BeartypeDoorException":
                                                                           BeartypeDoorException}}


def _beartype_stand_ins() -> dict[str, types.ModuleType]:
    """`beartype` and the two submodules Beam imports from, as stand-in modules in sys.modules (none
    where beartype is imported already or not installed)."""
    if any(name in sys.modules for name in ("beartype", *_BEARTYPE)) or importlib.util.find_spec("beartype") is None:
        return {}
    package = types.ModuleType("beartype")
    package.__path__ = []  # a package: its submodules are the stand-ins below
    stand_ins = {"beartype": package}
    for name, names in _BEARTYPE.items():
        module = stand_ins[name] = types.ModuleType(name)
        module.__dict__.update(names)
        setattr(package, name.rsplit(".", 1)[1], module)
    sys.modules.update(stand_ins)
    return stand_ins


def _no_stand_in_left_but_typehints(stand_ins: dict[str, types.ModuleType]) -> None:
    """Where a Beam module other than `typehints.typehints`' two names holds a stand-in (a Beam that
    imports beartype elsewhere), give it the real object."""
    fakes = {id(module): name for name, module in stand_ins.items()}
    fakes.update({id(value): f"{name}.{attr}" for name, names in _BEARTYPE.items() for attr, value in names.items()})
    for module_name, module in list(sys.modules.items()):
        if module is None or not (module_name == "apache_beam" or module_name.startswith("apache_beam.")):
            continue
        for attr, value in list(vars(module).items()):
            fake = fakes.get(id(value))
            if fake is None or (module_name == "apache_beam.typehints.typehints" and fake in (
                    "beartype.door.is_subhint", "beartype.roar.BeartypeDoorException")):
                continue
            home, _, name = fake.rpartition(".") if fake not in stand_ins else (fake, "", "")
            real = importlib.import_module(home)
            setattr(module, attr, getattr(real, name) if name else real)
