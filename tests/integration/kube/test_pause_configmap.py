"""The runtime pause set with kubectl: the ``trainguard-control`` ConfigMap on the real kube-apiserver,
mirrored into a real (SQLite) audit store by ``k8s/control.PauseMirror``, the way the operator's
reconcile loop does each round. A change of the ConfigMap pauses or resumes every action (audited as
the ConfigMap's); an unchanged ConfigMap never undoes a pause set through the CLI or the API; a restart
of the operator never lifts a pause."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from tests.support import kube
from trainguard.act import switch
from trainguard.k8s import client, control
from trainguard.model import vocab
from trainguard.store import audit, database

pytestmark = [pytest.mark.integration, pytest.mark.kube]


@pytest.fixture
def namespace(kube_api: kube.LocalKube) -> Iterator[str]:
    name = kube.unique_name("tg-pause")
    done = kube_api.kubectl("create", "namespace", name)
    assert done.returncode == 0, done.stderr
    yield name
    kube_api.kubectl("delete", "namespace", name, "--wait=false")


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[audit.AuditStore]:
    opened = await database.open_store(f"sqlite+aiosqlite:///{tmp_path / 'audit.db'}")
    yield opened
    await opened.close()


def kubectl(kube_api: kube.LocalKube, *args: str) -> None:
    done = kube_api.kubectl(*args)
    assert done.returncode == 0, done.stderr


async def paused(store: audit.AuditStore) -> str | None:
    return switch.pause_reason(await store.control(switch.PAUSE))


async def pause_records(store: audit.AuditStore) -> list[dict[str, object]]:
    return [r.payload for r in await store.audit_records(kind=vocab.AuditKind.ACTION)
            if r.payload.get("control") == switch.PAUSE]


async def test_the_configmap_pauses_and_resumes_on_change_only(kube_api: kube.LocalKube, namespace: str,
                                                                 store: audit.AuditStore) -> None:
    async with await client.load_api_client(str(kube_api.kubeconfig)) as api:
        mirror = control.PauseMirror(namespace)
        await mirror.sync(api, store, 1.0)  # no ConfigMap yet: nothing
        assert await paused(store) is None

        kubectl(kube_api, "-n", namespace, "create", "configmap", control.CONFIGMAP,
                "--from-literal=actionsPaused=true", "--from-literal=pauseReason=rack 12 maintenance")
        await mirror.sync(api, store, 2.0)
        assert await paused(store) == (f"actions are paused by kubernetes:configmap/{namespace}/trainguard-control: "
                                       "rack 12 maintenance")
        await mirror.sync(api, store, 3.0)  # unchanged: no second record
        assert [(p["operation"], p["by"]) for p in await pause_records(store)] == [
            ("pause", f"kubernetes:configmap/{namespace}/trainguard-control")]

        # someone resumes through the CLI or the API; the ConfigMap still says true but did not change
        await store.set_control(switch.PAUSE, {"paused": False, "reason": ""}, by="alice", channel="api", at=4.0,
                                payload={"operation": "resume-actions"})
        await mirror.sync(api, store, 5.0)
        assert await paused(store) is None

        kubectl(kube_api, "-n", namespace, "patch", "configmap", control.CONFIGMAP, "--type", "merge",
                "-p", json.dumps({"data": {"actionsPaused": "false"}}))
        await mirror.sync(api, store, 6.0)
        kubectl(kube_api, "-n", namespace, "patch", "configmap", control.CONFIGMAP, "--type", "merge",
                "-p", json.dumps({"data": {"actionsPaused": "true", "pauseReason": "again"}}))
        await mirror.sync(api, store, 7.0)
        assert (await paused(store) or "").endswith(": again")

        # a restart of the operator (a new mirror) with the ConfigMap saying false never lifts a pause
        kubectl(kube_api, "-n", namespace, "patch", "configmap", control.CONFIGMAP, "--type", "merge",
                "-p", json.dumps({"data": {"actionsPaused": "false"}}))
        await store.set_control(switch.PAUSE, {"paused": True, "reason": "by hand"}, by="bob", channel="cli", at=8.0,
                                payload={"operation": "pause"})
        await control.PauseMirror(namespace).sync(api, store, 9.0)
        assert (await paused(store) or "").endswith("bob: by hand")
