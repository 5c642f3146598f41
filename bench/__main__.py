"""`make bench`: every benchmark, each printing ratios measured side by side in one run."""

from __future__ import annotations

import importlib
import pkgutil
import sys
import time

import bench


def main() -> int:
    names = sorted(
        m.name for m in pkgutil.iter_modules(bench.__path__) if not m.name.startswith("_")
    )
    only = set(sys.argv[1:])
    for name in names:
        if only and name not in only:
            continue
        module = importlib.import_module(f"bench.{name}")
        print(f"\n=== bench.{name} ===", flush=True)
        t0 = time.perf_counter()
        module.run()
        print(f"(bench.{name}: {time.perf_counter() - t0:.1f} s)", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
