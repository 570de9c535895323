"""Mixed precision: torch's autocast cast policies for kernel ops, and the mixed-dtype check.

Policies, named as torch names them (aten/src/ATen/autocast_mode.h, `CastPolicy`):
- "lower_precision_fp": floating inputs run in the autocast dtype (`torch.get_autocast_dtype`),
  as torch.mm and scaled_dot_product_attention do on CPU and CUDA;
- "fp32": floating inputs run in float32, as layer_norm, rms_norm and softmax do on CUDA.

`torch.library.register_autocast` casts to one fixed dtype chosen at registration, which is
"fp32" but not "lower_precision_fp" (bf16 or f16, whichever autocast region is open). So both
policies are registered here the way torch registers its own: a kernel at the op's
Autocast<Device> key that casts and redispatches below it. Eager calls and torch.compile
(AOT tracing runs the same dispatcher keys) both go through it.
"""
from __future__ import annotations

import importlib
import linecache
import os
import sys
import warnings
from typing import Any

import torch

from .errors import ConfigError, DTypeError, SourceLoc
from .tracing import is_machinery, user_loc

POLICIES = ("lower_precision_fp", "fp32")
DEVICE_TYPES = ("cpu", "cuda")  # the devices whose autocast torch ships in every build
_libs: list[torch.library.Library] = []  # a registration lives as long as its Library


class MixedDTypeError(DTypeError, TypeError):
    """Tensor arguments of different dtypes outside autocast (a TypeError, as it always was)."""


def register(qualname: str, policy: str, device_types: tuple[str, ...] = DEVICE_TYPES) -> None:
    """Gives the op `ns::name` torch's autocast `policy` on each of `device_types`."""
    ns, name = qualname.split("::")
    overload = getattr(getattr(torch.ops, ns), name).default
    lib = torch.library.Library(ns, "FRAGMENT")
    _libs.append(lib)
    for device_type in device_types:
        key = "Autocast" + torch._C._dispatch_key_for_device(device_type)
        with warnings.catch_warnings():
            # custom_op puts a pass-through kernel at the autocast keys; replacing it is the point
            warnings.filterwarnings("ignore", "Warning only once for all operators")
            lib.impl(name, _autocast_kernel(overload, policy, device_type, key), key,
                     with_keyset=True)


def _autocast_kernel(overload: Any, policy: str, device_type: str, key: str) -> Any:
    below = torch._C.DispatchKeySet(getattr(torch._C.DispatchKey, key))

    def kernel(_keyset: Any, *args: Any) -> Any:
        dtype = torch.get_autocast_dtype(device_type) if policy == "lower_precision_fp" \
            else torch.float32
        with torch._C._ExcludeDispatchKeyGuard(below):  # run the op itself, once
            return overload(*(_cast(a, dtype) for a in args))

    return kernel


def _cast(a: Any, dtype: torch.dtype) -> Any:
    # torch's eligibility rule: floating tensors except float64 (kernels refuse f64 anyway)
    if isinstance(a, torch.Tensor) and a.is_floating_point() and a.dtype != torch.float64:
        return a.to(dtype)
    return a


def check_same_dtype(fn: str, **tensors: torch.Tensor | None) -> None:
    """Refuses mixed dtypes as torch's counterpart does (torch.mm: "expected m1 and m2 to have
    the same dtype"), naming the argument; under autocast they are legal: the op casts them."""
    given = [(n, t) for n, t in tensors.items() if t is not None]
    first_name, first = given[0]
    if all(t.dtype == first.dtype for _, t in given) or torch.is_autocast_enabled(first.device.type):
        return
    for name, t in given[1:]:
        if t.dtype != first.dtype:
            raise MixedDTypeError(
                f"{fn}: argument `{name}` is {t.dtype} but `{first_name}` is {first.dtype}",
                _library_caller(), f"cast it (`{name}.to({first_name}.dtype)`), or call {fn} inside "
                "`torch.autocast(...)`, which casts both")


def _library_caller() -> SourceLoc | None:
    """The line that called the kernel library (`user_loc` counts the library as user code)."""
    library = os.path.dirname(importlib.import_module("kernel_dsl.kernels").__file__ or "")
    frame = sys._getframe(1)
    while frame is not None:
        fn = frame.f_code.co_filename
        if not is_machinery(fn) and os.path.dirname(fn) != library:
            return SourceLoc(fn, frame.f_lineno, linecache.getline(fn, frame.f_lineno))
        frame = frame.f_back
    return None


def check_policy(policy: Any) -> str | None:
    if policy is None or policy in POLICIES:
        return policy
    raise ConfigError(f"autocast={policy!r} is not a cast policy", user_loc(),
                      "use autocast='lower_precision_fp' (like torch.mm) or 'fp32' (like "
                      "layer_norm on CUDA), or leave it out: the kernel then runs in its "
                      "inputs' dtypes under autocast")
