"""Run a framework's recipe code without the framework: a recording stand-in for its imports.

Megatron-Bridge's performance recipes are Python functions that build a ``ConfigContainer`` and set
attributes on it. Installing each release (with Megatron-Core, Transformer Engine, a GPU and the
Hugging Face hub) to call them is not possible here, so ``tools/megatron_bridge_presets.py`` runs the
recipe files as they are at a release tag, with every module that is not recipe logic replaced by a
recorder:

* a stubbed class records the keyword arguments it is built with and every attribute later set on
  it (``Rec``); reading an attribute nobody set returns ``Missing``, which resolves through a table of
  the library's class defaults (cited in the caller) when the recipe code branches on it, and raises
  ``UnknownDefault`` naming the attribute otherwise, so no default is ever guessed silently;
* ``torch.cuda.get_device_properties`` answers for the GPU the preset is for (the recipes choose
  DeepEP / HybridEP by device name).

Nothing here knows about any model: it only executes the framework's own files.
"""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from pathlib import Path
from typing import Any, Callable


class UnknownDefault(Exception):
    """The recipe code branched on an attribute that neither it nor the defaults table sets."""


class _Context:
    """What the running preset needs from outside the recipe code (one per process)."""

    device_name = "NVIDIA H100 80GB HBM3"
    device_major = 9
    resolver: Callable[[Any, str], tuple] | None = None   # (owner object, dotted path) -> (found, value)


CONTEXT = _Context()


def _path_of(obj) -> str:
    if isinstance(obj, Missing):
        return f"{_path_of(obj._parent)}.{obj._name}"
    if isinstance(obj, Rec):
        parent = obj.__dict__.get("_parent")
        if parent is None:
            return ""
        owner, name = parent
        head = _path_of(owner)
        return f"{head}.{name}" if head else name
    return ""


def _owner(obj):
    while isinstance(obj, Missing):
        obj = obj._parent
    return obj


def _owner_label(obj) -> str:
    obj = _owner(obj)
    return obj.__dict__.get("_label", type(obj).__name__) if isinstance(obj, Rec) else type(obj).__name__


def origin_strings(obj) -> list[str]:
    """The string arguments along the calls that made ``obj`` (e.g. the Hugging Face model id of
    ``AutoBridge.from_hf_pretrained(id).to_megatron_provider()``) and the recorded class names."""
    out = []
    seen = 0
    while isinstance(obj, Rec) and seen < 20:
        out.append(obj.__dict__.get("_label", ""))
        out.append(type(obj).__name__)
        out.extend(a for a in obj.__dict__.get("_args", ()) if isinstance(a, str))
        out.extend(v for k, v in obj.__dict__.items() if isinstance(v, str) and k.endswith(("model_id", "hf_path")))
        obj = obj.__dict__.get("_origin")
        seen += 1
    return out


def resolve(m: "Missing"):
    path = _path_of(m).lstrip(".")
    owner = _owner(m)
    if CONTEXT.resolver is not None:
        found, value = CONTEXT.resolver(owner, path)
        if found:
            return value
    raise UnknownDefault(f"{path} (owner {_owner_label(m)}) is read but never set: add its library default")


class Missing:
    """An attribute read before anything set it."""

    __slots__ = ("_parent", "_name")

    def __init__(self, parent, name):
        object.__setattr__(self, "_parent", parent)
        object.__setattr__(self, "_name", name)

    def _vivify(self) -> "Rec":
        parent = self._parent._vivify() if isinstance(self._parent, Missing) else self._parent
        child = Rec()
        child.__dict__["_label"] = f"{_owner_label(parent)}.{self._name}"
        setattr(parent, self._name, child)
        return child

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return Missing(self, name)

    def __setattr__(self, name, value):
        setattr(self._vivify(), name, value)

    def __call__(self, *args, **kwargs):
        out = Rec(*args, **kwargs)
        out.__dict__["_label"] = f"{self._name}()"
        out.__dict__["_args"] = args
        out.__dict__["_origin"] = _owner(self)
        return out

    def value(self):
        return resolve(self)

    def __bool__(self):
        return bool(resolve(self))

    def __eq__(self, other):
        return resolve(self) == other

    def __ne__(self, other):
        return resolve(self) != other

    def __hash__(self):
        return id(self)

    def __lt__(self, other):
        return resolve(self) < other

    def __le__(self, other):
        return resolve(self) <= other

    def __gt__(self, other):
        return resolve(self) > other

    def __ge__(self, other):
        return resolve(self) >= other

    def __int__(self):
        return int(resolve(self))

    def __index__(self):
        return int(resolve(self))

    def __iter__(self):
        return iter(resolve(self))

    def __contains__(self, item):
        return item in resolve(self)

    def __repr__(self):
        return f"<unset {_path_of(self).lstrip('.')}>"


class RecMeta(type):
    """Class attributes of a stubbed class (``AutoBridge.from_hf_pretrained``) are stub callables."""

    def __getattr__(cls, name):
        if name == "__dataclass_fields__":      # dataclasses.fields(StubClass): no known fields
            return {}
        if name == "__dataclass_params__":      # a real dataclass may derive from a stubbed one
            import dataclasses
            return dataclasses._DataclassParams(True, True, True, False, False, False)
        if name.startswith("__"):
            raise AttributeError(name)
        return _stub_callable(f"{cls.__name__}.{name}")

    def __instancecheck__(cls, obj):
        return type.__instancecheck__(cls, obj)

    def __getitem__(cls, item):          # Generic[...] annotations and bases
        return cls

    def __or__(cls, other):              # X | None annotations
        return cls

    def __ror__(cls, other):
        return cls


class Rec(metaclass=RecMeta):
    """An object of a stubbed class: keeps the keyword arguments it was built with and every
    attribute set on it."""

    def __init__(self, *args, **kwargs):
        self.__dict__["_label"] = type(self).__name__
        self.__dict__["_args"] = args
        self.__dict__["_parent"] = None
        for key, value in kwargs.items():
            setattr(self, key, value)

    def __getattr__(self, name):
        if name.startswith("__") or name in ("_label", "_args", "_parent"):
            raise AttributeError(name)
        return Missing(self, name)

    def __setattr__(self, name, value):
        if isinstance(value, Rec) and value.__dict__.get("_parent") is None:
            value.__dict__["_parent"] = (self, name)
        self.__dict__[name] = value

    def __call__(self, *args, **kwargs):
        if len(args) == 1 and callable(args[0]) and not kwargs:
            return args[0]          # used as a decorator
        out = Rec(*args, **kwargs)
        out.__dict__["_label"] = f"{self.__dict__.get('_label')}()"
        return out

    def __iter__(self):
        return iter(())

    def __repr__(self):
        return f"<{self.__dict__.get('_label')}>"

    def set_fields(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if not k.startswith("_")}


def _stub_callable(label: str):
    cls = RecMeta(label.split(".")[-1], (Rec,), {})
    cls.__qualname__ = label
    return cls


class StubModule(types.ModuleType):
    """A module whose every attribute is a recording class."""

    def __init__(self, name):
        super().__init__(name)
        self.__path__ = []          # importable as a package
        self.__all__ = []

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        value = _stub_callable(f"{self.__name__}.{name}")
        setattr(self, name, value)
        return value


def _torch_stub() -> StubModule:
    torch = StubModule("torch")

    class _Props:
        @property
        def name(self):
            return CONTEXT.device_name

        @property
        def major(self):
            return CONTEXT.device_major

        minor = 0

    cuda = StubModule("torch.cuda")
    cuda.get_device_properties = lambda *a, **k: _Props()
    cuda.get_device_name = lambda *a, **k: CONTEXT.device_name
    cuda.get_device_capability = lambda *a, **k: (CONTEXT.device_major, 0)
    cuda.is_available = lambda: True
    cuda.device_count = lambda: 8
    torch.cuda = cuda
    torch.__version__ = "2.9.0"
    for dtype in ("bfloat16", "float16", "float32", "float", "half", "int64", "int32", "bool"):
        setattr(torch, dtype, f"torch.{dtype}")
    return torch


class RecipeFinder(importlib.abc.MetaPathFinder):
    """Imports ``real`` modules from source folders and stubs every other module under ``stubbed``
    prefixes (and, as a last resort, any module that cannot be found at all)."""

    def __init__(self, roots: list[Path], real: Callable[[str], bool], stubbed: tuple[str, ...]):
        self.roots = roots
        self.real = real
        self.stubbed = stubbed

    def _source(self, fullname: str):
        rel = fullname.replace(".", "/")
        for root in self.roots:
            pkg = root / rel / "__init__.py"
            if pkg.is_file():
                return pkg, True
            mod = root / f"{rel}.py"
            if mod.is_file():
                return mod, False
        return None, False

    def find_spec(self, fullname, path=None, target=None):
        top = fullname.split(".")[0]
        if top == "torch":
            return importlib.machinery.ModuleSpec(fullname, _StubLoader(), is_package=True)
        src, is_pkg = self._source(fullname)
        if src is not None and self.real(fullname):
            return importlib.util.spec_from_file_location(
                fullname, src, submodule_search_locations=[str(src.parent)] if is_pkg else None)
        if top in self.stubbed:
            return importlib.machinery.ModuleSpec(fullname, _StubLoader(), is_package=True)
        return None


class _StubLoader(importlib.abc.Loader):
    def create_module(self, spec):
        if spec.name == "torch":
            return _torch_stub()
        return StubModule(spec.name)

    def exec_module(self, module):
        pass


class LastResortFinder(importlib.abc.MetaPathFinder):
    """Any module nothing else finds (an optional dependency of the framework) is a stub."""

    def find_spec(self, fullname, path=None, target=None):
        return importlib.machinery.ModuleSpec(fullname, _StubLoader(), is_package=True)


def install(roots: list[Path], real: Callable[[str], bool], stubbed: tuple[str, ...]) -> None:
    """Put the finders in place for this process (the extraction runs one release per process)."""
    sys.meta_path.insert(0, RecipeFinder(roots, real, stubbed))
    sys.meta_path.append(LastResortFinder())
    for root in roots:
        sys.path.insert(0, str(root))
