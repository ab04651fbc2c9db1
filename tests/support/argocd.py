"""Argo CD's resource health checks (``deploy/argocd/health``) run the way Argo CD runs them.

Argo CD evaluates a ``health.lua`` with gopher-lua, a Lua 5.1 implementation: the object is the
global ``obj`` (JSON decoded into tables, arrays 1-based) and the script returns a table
``{status = ..., message = ...}``. Here the same script runs in ``lupa.lua51`` (the real Lua 5.1
interpreter, so a construct of 5.2+ such as ``goto`` or ``//`` fails here as it would there), with
the ``os``/``io`` libraries removed as Argo CD's sandbox does.

``health_test.yaml`` next to each script is Argo CD's own fixture format (``tests: [{healthStatus:
{status, message}, inputPath}]``), so the directory can be upstreamed into argo-cd's
``resource_customizations`` as it is.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import yaml

REPO_ROOT: Final = Path(__file__).resolve().parents[2]
HEALTH_DIR: Final = REPO_ROOT / "deploy" / "argocd" / "health"
GROUP: Final = "trainguard.dev"
STATUSES: Final = frozenset({"Healthy", "Progressing", "Degraded", "Suspended", "Missing", "Unknown"})


@dataclass(frozen=True)
class Health:
    status: str
    message: str


def script_path(kind: str) -> Path:
    return HEALTH_DIR / GROUP / kind / "health.lua"


def _lua_runtime() -> Any:
    from lupa import lua51

    runtime = lua51.LuaRuntime(unpack_returned_tuples=True)
    version = runtime.eval("_VERSION")
    assert version == "Lua 5.1", f"lupa.lua51 runs {version}, not Lua 5.1"
    runtime.execute("os = nil; io = nil; require = nil; dofile = nil; loadfile = nil")
    return runtime


def _to_lua(runtime: Any, value: Any) -> Any:
    """JSON-shaped Python data as Lua values (dict -> table, list -> 1-based table), as gopher-lua decodes it."""
    if isinstance(value, dict):
        table = runtime.table()
        for key, item in value.items():
            table[key] = _to_lua(runtime, item)
        return table
    if isinstance(value, list):
        table = runtime.table()
        for index, item in enumerate(value, start=1):
            table[index] = _to_lua(runtime, item)
        return table
    return value


def evaluate(kind: str, obj: dict[str, Any]) -> Health:
    """Run ``kind``'s health.lua on ``obj`` (an object as the API returns it)."""
    runtime = _lua_runtime()
    runtime.globals().obj = _to_lua(runtime, obj)
    result = runtime.execute(script_path(kind).read_text())
    assert result is not None, f"{kind} health.lua returned nothing"
    status, message = result["status"], result["message"]
    assert status in STATUSES, f"{kind} health.lua returned status {status!r}"
    return Health(str(status), str(message) if message is not None else "")


def fixtures(kind: str) -> list[tuple[Path, Health]]:
    """(testdata file, expected health) of ``kind``'s health_test.yaml."""
    directory = script_path(kind).parent
    document = yaml.safe_load((directory / "health_test.yaml").read_text())
    return [
        (directory / test["inputPath"], Health(test["healthStatus"]["status"], test["healthStatus"].get("message", "")))
        for test in document["tests"]
    ]


def fixture_object(obj: dict[str, Any]) -> dict[str, Any]:
    """An API object as stored in testdata/: the fields a health check reads, minus per-server noise."""
    kept = {key: obj[key] for key in ("apiVersion", "kind", "metadata", "spec", "status") if key in obj}
    metadata = dict(kept.get("metadata") or {})
    for noisy in ("managedFields", "uid", "resourceVersion"):
        metadata.pop(noisy, None)
    kept["metadata"] = metadata
    return kept
