"""Spike: Kubernetes DRA-style CEL in cel-expr-python (cel-cpp), to compare with Go's.

Run in a throwaway venv: python3 -m venv /tmp/spike-venv &&
/tmp/spike-venv/bin/pip install cel-expr-python && /tmp/spike-venv/bin/python spike_cel_python.py
"""

import time

from cel_expr_python import cel
from cel_expr_python.ext import ext_bindings, ext_optional, ext_strings

env = cel.NewEnv(
    variables={"device": cel.Type.DYN},
    extensions=[ext_bindings.ExtBindings(), ext_optional.ExtOptional(), ext_strings.ExtStrings()],
)
device = {
    "driver": "gpu.example.com",
    "allowMultipleAllocations": False,
    # Kubernetes gives attributes typed (string/int/bool/semver) and capacity as quantity;
    # plain Python values are the best this package can do without custom types.
    "attributes": {"gpu.example.com": {"model": "a100", "index": 3, "driverVersion": "550.54.15"}},
    "capacity": {"gpu.example.com": {"memory": "80Gi"}},
}
A = 'device.attributes["gpu.example.com"]'
exprs = {
    "driver+model": f'device.driver == "gpu.example.com" && {A}.model == "a100"',
    "quantity": 'device.capacity["gpu.example.com"].memory.compareTo(quantity("40Gi")) >= 0',
    "semver": f'{A}.driverVersion.isGreaterThan(semver("550.0.0"))',
    "cel.bind": f'cel.bind(a, {A}, a.model == "a100" && a.index < 4)',
    "optional .?": 'device.attributes["gpu.example.com"].?model.orValue("none") == "a100"',
    "lowerAscii": 'device.attributes["gpu.example.com"].model.lowerAscii() == "a100"',
}
for name, e in exprs.items():
    try:
        x = env.compile(e)
        v = x.eval(data={"device": device}).value()
        n = 20000
        t = time.perf_counter()
        for _ in range(n):
            x.eval(data={"device": device})
        us = (time.perf_counter() - t) / n * 1e6
        print(f"{name:12s} OK   -> {v!r:8} {us:6.1f} us/eval")
    except Exception as ex:
        print(f"{name:12s} FAIL -> {type(ex).__name__}: {str(ex).splitlines()[0][:110]}")
