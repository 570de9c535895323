"""One compile-only libtpu compile of a generated Pallas kernel, with the compiler's dumps on.

Run by `autotune/schedule.py` as a fresh process per compile: LIBTPU_INIT_ARGS (carrying
`--xla_jf_dump_to=<dir>`) only takes effect if set before libtpu initialises, so the parent
puts it in this process's environment. Reads one JSON job on stdin ({"source", "entry",
"specs", "topology", "target"}), answers one JSON line, the last of stdout ({"status",
"compile_s", "message"}). Not an API: `python -m kernel_dsl.autotune.schedule_worker`.
"""
from __future__ import annotations

import json
import os
import sys
import time

os.environ.setdefault("TPU_SKIP_MDS_QUERY", "1")


def main() -> None:
    job = json.loads(sys.stdin.read())
    import jax
    import jax.numpy as jnp
    from jax.experimental import topologies
    from jax.sharding import SingleDeviceSharding

    from kernel_dsl.lowering import Generated
    from kernel_dsl.lowering.pallas.runner import load_module

    dtypes = {"f32": jnp.float32, "bf16": jnp.bfloat16, "f16": jnp.float16, "i32": jnp.int32,
              "i16": jnp.int16, "i8": jnp.int8, "u8": jnp.uint8, "bool": jnp.bool_,
              "f8e4m3fn": jnp.float8_e4m3fn, "f8e5m2": jnp.float8_e5m2}
    gen = Generated("pallas", job["target"], None, job["source"], job["entry"])  # type: ignore[arg-type]
    mod = load_module(gen)
    dev = topologies.get_topology_desc(platform="tpu", topology_name=job["topology"]).devices[0]
    specs = [jax.ShapeDtypeStruct(tuple(s), dtypes[d], sharding=SingleDeviceSharding(dev))
             for s, d in job["specs"]]
    fn = getattr(mod, job["entry"])
    out: dict[str, object] = {"status": "ok"}
    t0 = time.perf_counter()
    try:
        with jax.default_device(dev):  # Pallas asks the default device for the chip's tiling
            jax.jit(lambda *a: fn(*a, interpret=False)).lower(*specs).compile()
    except Exception as e:  # noqa: BLE001  (the compiler's errors have no common type)
        out.update(status="failed", message=f"{type(e).__name__}: {e}"[:4000])
    out["compile_s"] = round(time.perf_counter() - t0, 3)
    sys.stdout.write("\n" + json.dumps(out) + "\n")


if __name__ == "__main__":
    main()
