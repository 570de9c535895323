"""A simulated accelerator for the device-route tests (test_tpu_route.py, test_nki_neuron.py), and
the child processes they run it in.

The device is a Python-only PrivateUse1 backend renamed `tpu` or `neuron` (the pattern of
pytorch's test/test_privateuseone_python_backend.py) whose tensors own CPU memory, so views,
copies, opcheck and torch.compile work on it. A process can rename PrivateUse1 only once, so
each test file runs its device checks in a child process (the file run as a script): the child
calls `run_checks`, which prints the results as one JSON line after a marker; the parent reads
them back with `run_child` and turns each into a test with `assert_check`.
"""
from __future__ import annotations

import json
import subprocess
import sys
import traceback
from typing import Any, Callable

import pytest
import torch
from torch.utils._pytree import tree_map
from torch.utils.backend_registration import _DummyBackendModule, _setup_privateuseone_for_python_backend


class _SimBackendModule(_DummyBackendModule):
    """`torch.<device>`: opcheck saves and restores each device's RNG state."""

    def get_rng_state(self, device: Any = None) -> torch.Tensor:
        return torch.zeros(0, dtype=torch.uint8)

    def set_rng_state(self, state: torch.Tensor, device: Any = None) -> None:
        return None  # the simulated device has no generator of its own: nothing to restore


class SimulatedDevice:
    """PrivateUse1 renamed `name`; a tensor's storage points at CPU memory this object owns.

    Allocation and cross-device copies have their own kernels; every other aten op runs on CPU
    views of the same memory (a boxed fallback), so in-place ops and views alias as on a device.
    Memory is never freed: this lives in a short child process.
    """

    def __init__(self, name: str):
        # the real TorchTPU, where installed, must not be what kernel_dsl finds in this process
        # (a child that wants a TorchTPU installs its stand-in in sys.modules after this)
        sys.modules.setdefault("torch_tpu", None)  # type: ignore[arg-type]
        _setup_privateuseone_for_python_backend(name, backend_module=_SimBackendModule())
        self.name = name
        self.device = torch.device(name, 0)
        self._owners: dict[int, torch.UntypedStorage] = {}
        self._set_storage = torch.ops.aten.set_.source_Storage_storage_offset
        self._cpu_keys = torch._C.DispatchKeySet(torch._C.DispatchKey.CPU)
        aten = torch.library.Library("aten", "IMPL")
        aten.impl("empty_strided", self._empty_strided, "PrivateUse1")
        aten.impl("empty.memory_format", self._empty, "PrivateUse1")
        aten.impl("_copy_from", self._copy_from, "PrivateUse1")
        rest = torch.library.Library("_", "IMPL")
        rest.fallback(self._fallback, "PrivateUse1")
        self._libs = [aten, rest]  # registrations last as long as their Library

    def _point(self, t: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        """Makes device tensor `t` view CPU tensor `c`'s memory with `c`'s geometry."""
        s = c.untyped_storage()
        self._owners.setdefault(s.data_ptr(), s)
        dev = torch._C._construct_storage_from_data_pointer(s.data_ptr(), self.device, s.nbytes())
        # aten::set_ has no PrivateUse1 kernel; the CPU one only swaps storage and geometry
        return self._set_storage.redispatch(self._cpu_keys, t, dev, c.storage_offset(), c.shape,
                                            c.stride())

    def to_device(self, c: torch.Tensor) -> torch.Tensor:
        return self._point(torch._C._acc.create_empty_tensor((0,), c.dtype), c)

    def to_cpu_view(self, t: torch.Tensor) -> torch.Tensor:
        s = t.untyped_storage()
        cpu = torch._C._construct_storage_from_data_pointer(s.data_ptr(), torch.device("cpu"),
                                                            s.nbytes())
        return torch.empty(0, dtype=t.dtype).set_(cpu, t.storage_offset(), t.shape, t.stride())

    def _empty_strided(self, size: Any, stride: Any, *, dtype: Any = None, layout: Any = None,
                       device: Any = None, pin_memory: Any = None) -> torch.Tensor:
        return self.to_device(torch.empty_strided(size, stride, dtype=dtype))

    def _empty(self, size: Any, *, dtype: Any = None, layout: Any = None, device: Any = None,
               pin_memory: Any = None, memory_format: Any = None) -> torch.Tensor:
        return self.to_device(torch.empty(size, dtype=dtype,
                                          memory_format=memory_format or torch.contiguous_format))

    def _copy_from(self, src: torch.Tensor, dst: torch.Tensor, non_blocking: bool = False) -> torch.Tensor:
        view = lambda t: self.to_cpu_view(t) if t.device.type == self.name else t  # noqa: E731
        view(dst).copy_(view(src))
        return dst

    def _fallback(self, op: Any, *args: Any, **kwargs: Any) -> Any:
        bound = dict(zip((a.name for a in op._schema.arguments), args)) | kwargs
        written = {id(bound[a.name]) for a in op._schema.arguments
                   if a.alias_info is not None and a.alias_info.is_write
                   and isinstance(bound.get(a.name), torch.Tensor)}
        dev_of: dict[int, torch.Tensor] = {}  # id(CPU stand-in) -> device tensor

        def down(a: Any) -> Any:
            if isinstance(a, torch.Tensor) and a.device.type == self.name:
                # outputs may need resizing, which memory borrowed from a pointer cannot do
                c = self.to_cpu_view(a).clone() if id(a) in written else self.to_cpu_view(a)
                dev_of[id(c)] = a
                return c
            if isinstance(a, torch.device) and a.type == self.name:
                return torch.device("cpu")
            return a

        cargs, ckwargs = tree_map(down, (args, kwargs))
        out = op(*cargs, **ckwargs)
        for c in [*cargs, *ckwargs.values()]:
            if id(c) in dev_of and id(dev_of[id(c)]) in written:
                t = dev_of[id(c)]
                if c.shape == t.shape and c.stride() == t.stride():
                    self.to_cpu_view(t).copy_(c)  # keeps aliases of `t` in step
                else:
                    self._point(t, c)
        return tree_map(lambda o: (dev_of[id(o)] if id(o) in dev_of else self.to_device(o))
                        if isinstance(o, torch.Tensor) else o, out)


# -- the child process and its parent -----------------------------------------------------------
def run_checks(checks: dict[str, Callable[[], None]], marker: str) -> None:
    """In the child: runs every check in order and prints `marker` + {name: "ok" or traceback}."""
    results = {}
    for name, check in checks.items():
        try:
            check()
            results[name] = "ok"
        except BaseException:  # noqa: BLE001 - reported to the parent, which fails the test
            results[name] = traceback.format_exc()
    print(marker + json.dumps(results), flush=True)


def run_child(script: str, args: list[str], env: dict[str, str], marker: str,
              what: str, autoload: bool = False) -> dict[str, str]:
    """In the parent: runs `script` with `args` and returns its results; fails the test with the
    child's output when it printed none (`what` names the child in that message). `autoload`:
    torch's device-backend autoload on, as in a user's process (the real TorchTPU's tests)."""
    # A process has one PrivateUse1 slot. Where Google's TorchTPU is installed, torch's
    # device-backend autoload would give it to TorchTPU at `import torch`: keep it for the
    # simulated device (and SimulatedDevice hides the real torch_tpu from kernel_dsl).
    env = dict(env, TORCH_DEVICE_BACKEND_AUTOLOAD="1" if autoload else "0")
    proc = subprocess.run([sys.executable, script, *args], env=env, capture_output=True, text=True,
                          timeout=600)
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(marker):
            return dict(json.loads(line[len(marker):]))
    pytest.fail(f"{what} exited with {proc.returncode} and no results:\n"
                f"{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}")


def assert_check(results: dict[str, str], name: str, where: str) -> None:
    """One check's result as a test: its traceback from the child when it failed (`where` names
    the child in the message)."""
    assert name in results, f"the child ran no check {name!r}: {sorted(results)}"
    if results[name] != "ok":
        pytest.fail(f"{name} {where}:\n{results[name]}", pytrace=False)
