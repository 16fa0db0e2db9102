"""karchive's import shim: ``triton.language`` -- ``constexpr``, the dtype names signatures and constexpr
arguments use, and inert stubs for everything else (kernel bodies never run here)."""

from __future__ import annotations

from typing import Any


class constexpr:
    """``tl.constexpr``: an annotation, or a value wrapper (``tl.constexpr(3)``) as Triton's."""

    def __init__(self, value: Any = None) -> None:
        self.value: Any = value.value if isinstance(value, constexpr) else value

    def __repr__(self) -> str:
        return f"constexpr[{self.value!r}]"

    def __eq__(self, other: object) -> bool:
        return self.value == (other.value if isinstance(other, constexpr) else other)

    def __hash__(self) -> int:
        return hash(self.value)


class dtype:
    """A Triton element type by name (``tl.float32.name == "fp32"``); ``str()`` is the name, as Triton's."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"triton.language.{self.name}"

    def __str__(self) -> str:
        return self.name

    def __eq__(self, other: object) -> bool:
        return isinstance(other, dtype) and other.name == self.name

    def __hash__(self) -> int:
        return hash(self.name)

    @property
    def primitive_bitwidth(self) -> int:
        digits = "".join(c for c in self.name if c.isdigit())
        return int(digits[:2] if self.name.startswith("fp8") else digits) if digits else 0


int1, int8, int16, int32, int64 = (dtype(n) for n in ("int1", "int8", "int16", "int32", "int64"))
uint8, uint16, uint32, uint64 = (dtype(n) for n in ("uint8", "uint16", "uint32", "uint64"))
float16, bfloat16, float32, float64 = (dtype(n) for n in ("fp16", "bf16", "fp32", "fp64"))
float8e4nv, float8e5, float8e4b8, float8e5b16 = (dtype(n) for n in ("fp8e4nv", "fp8e5", "fp8e4b8", "fp8e5b16"))
pointer_type = dtype
tensor = object
void = dtype("void")


class _Stub:
    """An inert stand-in for a ``tl`` function a kernel body names (bodies are never executed here)."""

    def __init__(self, name: str) -> None:
        self.__name__ = name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(
            f"triton.language.{self.__name__}: karchive's import shim has no Triton compiler; "
            "kernel bodies run only from archives"
        )

    def __getattr__(self, name: str) -> _Stub:
        return _Stub(f"{self.__name__}.{name}")


def _stubs(prefix: str) -> Any:
    """A shim module's ``__getattr__``: every public name it is asked for, an inert stub named ``prefix + name``."""

    def __getattr__(name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Stub(prefix + name)

    return __getattr__


__getattr__ = _stubs("")
