"""The Nodes page's lifecycle in a real Chromium, against the real API over a real audit store.

The store (SQLite file, migrated by ``database.open_store``) is written through the audit store's own
calls, as the engine writes it: a verdict names ``gpu-a1`` suspect (an incident charged to it); our
drain of ``gpu-b2`` is done, its validation starts and fails (exit code and output tail as evidence:
held for repair); our drain of ``gpu-c3`` is done (out of service); ``gpu-d4`` is out for someone
else's reason (``other``); ``gpu-e5`` was someone else's and is back in service. The server asks for
a token (a write and a read one, logged in through the login form).

The page must show each node's state, reason and whose it is (text, never markup: a reason holds
HTML); a node's history with the failed validation's evidence; filter by state; a hold made from
the page is in the store with the person's name and reason; a hold the lifecycle refuses (a node in
service) shows the API's refusal and writes nothing; a read-only user gets disabled buttons, sees a
hold made elsewhere live, and a forced click shows the API's 403.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.console import test_console_scale_browser as scale
from trainguard import health as health_mod
from trainguard.console import web as console_web
from trainguard.http import api, auth
from trainguard.http import app as http_app
from trainguard.model import actions, advice, lifecycle, verdicts, vocab
from trainguard.store import audit, database

pytestmark = [pytest.mark.integration, pytest.mark.browser]

WRITE_TOKEN = "console-nodes-write-token-7c41"
READ_TOKEN = "console-nodes-read-token-2b90"
T0 = 1_800_000_000.0
W = "slurm/c1/4242"
TAIL = "GPU 2: row remapping failed\n<script>window.__pwned = 1</script>\nFAIL: 1 of 8 GPUs"
OTHER_REASON = "<b>rack 7</b> maintenance by the site"


async def _drain(store: audit.AuditStore, node: str, generation: int, at: float) -> None:
    """Our advice, then our drain of ``node``, done (the lifecycle's taken-out comes with it, in the
    same transaction)."""
    await store.record_advice(advice.Advice.model_validate({
        "workload": W, "attempt": 0, "generation": generation, "action": "requeue", "exclude_nodes": [node],
        "reasons": [f"hardware verdict on {node}"], "mode": "Action", "deadline": at + 300, "policy": "default"}),
        at=at)
    step = f"drain_node:{node}"
    await store.begin_action(actions.ActionRecord(workload=W, attempt=0, generation=generation, step=step,
                                                  operation=actions.Operation.DRAIN_NODE,
                                                  args={"node": node, "reason": "trainguard: xid 79"}), at=at)
    await store.finish_action(workload=W, attempt=0, generation=generation, step=step,
                              status=actions.ActionStatus.DONE, at=at + 1)


async def seed(store: audit.AuditStore) -> None:
    await store.record_attempt(workload=W, attempt=0, at=T0, nodes=["gpu-a1", "gpu-b2", "gpu-c3"])
    await store.record_verdict(workload=W, attempt=0, at=T0 + 10, verdict=verdicts.Verdict(
        attribution=vocab.Attribution.HARDWARE, category=vocab.Category.GPU_XID_HARDWARE,
        suspect_nodes=["gpu-a1"], confidence=0.9, reasons=["xid 79"]))
    await _drain(store, "gpu-b2", 1, T0 + 20)
    await store.advance_node("gpu-b2", lifecycle.NodeEvent.VALIDATION_STARTED, at=T0 + 30, workload=W, attempt=0,
                             reason="validation: dcgmi runs on gpu-b2 in our reservation tg-validate-gpu-b2",
                             evidence={"reservation": "tg-validate-gpu-b2", "command": ["dcgmi", "diag", "-r", "2"]})
    await store.advance_node("gpu-b2", lifecycle.NodeEvent.VALIDATION_FAILED, at=T0 + 40, workload=W, attempt=0,
                             reason="validation failed: the check exited 3",
                             evidence={"job_id": "4711", "exit_code": 3, "check_state": "FAILED",
                                       "output_tail": TAIL, "reason": "the check exited 3"})
    await _drain(store, "gpu-c3", 2, T0 + 50)
    await store.advance_node("gpu-d4", lifecycle.NodeEvent.SEEN_OTHER, at=T0 + 60, reason=OTHER_REASON)
    await store.advance_node("gpu-e5", lifecycle.NodeEvent.SEEN_OTHER, at=T0 + 70, reason="drained by a person")
    await store.advance_node("gpu-e5", lifecycle.NodeEvent.SEEN_BACK, at=T0 + 80, reason="seen back in service")


class Served(scale.Served):
    """The API and the console behind a token file (a write and a read token)."""

    def __init__(self, db_url: str, tokens: Path) -> None:
        super().__init__(db_url)
        self.tokens = tokens

    async def _seed(self, store: audit.AuditStore) -> None:
        await seed(store)

    async def _start(self) -> str:
        self.store = await database.open_store(self.db_url)
        await self._seed(self.store)
        health = health_mod.Health()
        setup = api.mount(api.Fixed(store=self.store), health, listen="127.0.0.1:0", token_file=self.tokens,
                          allow_action=False, operator=False)
        self.server = await http_app.serve(health, "127.0.0.1:0", setup=setup, routes=console_web.routes())
        assert self.server is not None
        return self.server.url


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    directory = tmp_path_factory.mktemp("console-nodes")
    tokens = directory / "tokens"
    tokens.write_text(f"{WRITE_TOKEN} write\n{READ_TOKEN} read\n")
    tokens.chmod(0o600)
    with Served(f"sqlite+aiosqlite:///{directory / 'audit.db'}", tokens) as running:
        yield running


def _login(context: Any, url: str, token: str, errors: list[str]) -> Any:
    page = context.new_page()
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(url + "/")
    page.locator("input#token").fill(token)
    page.locator("button#login").click()
    page.wait_for_selector("body[data-role=read], body[data-role=write]", state="attached")
    return page


def _nodes(url: str) -> dict[str, Any]:
    request = urllib.request.Request(url + "/api/v1/nodes", headers={"Authorization": f"Bearer {READ_TOKEN}"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return {n["node"]: n for n in json.load(response)["items"]}


def test_nodes_page_shows_lifecycle_history_and_a_persons_hold(served: Served, chromium: Any,
                                                               artifacts_dir: Path) -> None:
    assert served.store is not None
    store = served.store
    context = chromium.new_context(viewport={"width": 1500, "height": 1000})
    errors: list[str] = []
    try:
        page = _login(context, served.url, WRITE_TOKEN, errors)
        page.goto(served.url + "/#/nodes")
        table = page.locator("#nodes-table")
        table.locator("tbody tr[data-node='gpu-e5']").wait_for()
        shown = table.locator("tbody tr[data-node]").evaluate_all(
            "rs => rs.map(r => [r.dataset.node, r.querySelector('.badge.lifecycle').textContent,"
            " r.querySelector('td.reason').textContent, r.querySelector('td.whose').textContent])")
        assert {node: (state, whose) for node, state, _, whose in shown} == {
            "gpu-a1": ("suspect", "in service"), "gpu-b2": ("held-for-repair", "ours"),
            "gpu-c3": ("out-of-service", "ours"), "gpu-d4": ("other", "someone else's: never touched"),
            "gpu-e5": ("in-service", "in service")}
        reasons = {node: reason for node, _, reason, _ in shown}
        assert reasons["gpu-b2"] == "validation failed: the check exited 3"
        assert reasons["gpu-d4"] == OTHER_REASON, "a reason is shown as text, markup and all"
        assert table.locator("tbody tr[data-node='gpu-d4'] b").count() == 0
        assert "gpu_xid_hardware" in reasons["gpu-a1"]
        assert W in table.locator("tbody tr[data-node='gpu-a1']").inner_text(), "the incident names the workload"
        # someone else's node is shown, never touched: no decision offered on it
        assert table.locator("tbody tr[data-node='gpu-d4'] button[data-decide]").count() == 0

        # the history of the node that failed validation, with who decided and the check's evidence
        table.locator("tbody tr[data-node='gpu-b2'] button.linklike").click()
        detail = table.locator("tr.node-detail[data-detail='gpu-b2']")
        failed = detail.locator("tr[data-event='validation-failed']")
        failed.wait_for()
        events = detail.locator("table.history tbody tr").evaluate_all("rs => rs.map(r => r.dataset.event)")
        assert events == ["validation-failed", "validation-started", "taken-out"], events
        assert failed.locator("dd[data-key='exit_code']").inner_text() == "3"
        assert failed.locator("dd[data-key='output_tail'] pre").inner_text() == TAIL
        assert "trainguard" in failed.inner_text() and "held-for-repair" in failed.inner_text()
        assert page.evaluate("window.__pwned === undefined"), "the output tail was rendered as markup"
        assert "No incident charged to this node." in detail.inner_text()
        page.screenshot(path=str(artifacts_dir / "nodes-lifecycle.png"), full_page=True)

        # filter by state
        page.locator("#nodes-state").select_option("held-for-repair")
        page.wait_for_selector("#nodes-table tbody tr[data-node='gpu-a1']", state="detached")
        assert table.locator("tbody tr[data-node]").evaluate_all("rs => rs.map(r => r.dataset.node)") == ["gpu-b2"]
        page.locator("#nodes-state").select_option("")
        table.locator("tbody tr[data-node='gpu-e5']").wait_for()

        # a person's hold from the page: asked why, recorded with the person's name
        page.once("dialog", lambda dialog: dialog.accept("PSU swap, ticket 881"))
        table.locator("tbody tr[data-node='gpu-c3'] button[data-decide='hold']").click()
        page.locator("#nodes-notice .ok").wait_for()
        table.locator("tbody tr[data-node='gpu-c3'][data-state='held-for-repair']").wait_for()
        assert "gpu-c3: held-for-repair" in page.locator("#nodes-notice .ok").inner_text()
        latest = served.call(store.node_state("gpu-c3"))
        assert latest is not None
        assert (latest.state, latest.event, latest.by, latest.reason) == (
            lifecycle.NodeState.HELD_FOR_REPAIR, lifecycle.NodeEvent.HELD, auth.user_of(WRITE_TOKEN),
            "PSU swap, ticket 881")
        assert f"by {auth.user_of(WRITE_TOKEN)}" in table.locator("tbody tr[data-node='gpu-c3']").inner_text()

        # a hold the lifecycle refuses (the node is in service): the API's refusal shown, nothing written
        before = served.call(store.node_transitions("gpu-e5"))
        page.once("dialog", lambda dialog: dialog.accept("looks flaky"))
        table.locator("tbody tr[data-node='gpu-e5'] button[data-decide='hold']").click()
        error = page.locator("#nodes-notice .error")
        error.wait_for()
        assert error.inner_text().startswith("409 refused, nothing changed: a node in-service cannot be held"), \
            error.inner_text()
        assert served.call(store.node_transitions("gpu-e5")) == before
        page.screenshot(path=str(artifacts_dir / "nodes-refused.png"), full_page=True)

        # the return of the node that failed validation: out of service, the engine resumes it
        page.once("dialog", lambda dialog: dialog.accept("GPU 2 replaced"))
        table.locator("tbody tr[data-node='gpu-b2'] button[data-decide='return']").click()
        table.locator("tbody tr[data-node='gpu-b2'][data-state='out-of-service']").wait_for()
        assert _nodes(served.url)["gpu-b2"]["by"] == auth.user_of(WRITE_TOKEN)
        assert not errors, errors
    finally:
        context.close()


def test_read_only_user_sees_the_lifecycle_live_without_decisions(served: Served, chromium: Any) -> None:
    context = chromium.new_context(viewport={"width": 1500, "height": 1000})
    errors: list[str] = []
    try:
        page = _login(context, served.url, READ_TOKEN, errors)
        page.goto(served.url + "/#/nodes")
        row = page.locator("#nodes-table tbody tr[data-node='gpu-a1']")
        row.wait_for()
        assert row.locator(".badge.lifecycle").inner_text() == "suspect"
        buttons = page.locator("#nodes-table button[data-decide]")
        assert buttons.count() > 0
        assert all(b.is_disabled() for b in buttons.all()), "a read-only user is offered a decision"
        # a write user's hold made elsewhere reaches the page live (SSE), without a reload
        page.evaluate("window.__sameDocument = 'still here'")
        request = urllib.request.Request(
            served.url + "/api/v1/nodes/gpu-a1/hold", data=json.dumps({"reason": "fan noise"}).encode(), method="POST",
            headers={"Authorization": f"Bearer {WRITE_TOKEN}", "Content-Type": "application/json",
                     "X-Trainguard-Request": "1"})
        with urllib.request.urlopen(request, timeout=30):
            pass
        page.locator("#nodes-table tbody tr[data-node='gpu-a1'][data-state='held-for-repair']").wait_for()
        assert "fan noise" in page.locator("#nodes-table tbody tr[data-node='gpu-a1'] td.reason").inner_text()
        assert page.evaluate("window.__sameDocument") == "still here", "the update came with a reload"
        # the server decides, not the page: a forced click gets the API's 403, shown as it is
        page.once("dialog", lambda dialog: dialog.accept("forced"))
        page.locator("#nodes-table tbody tr[data-node='gpu-e5'] button[data-decide='hold']").evaluate(
            "b => { b.disabled = false; b.click(); }")
        error = page.locator("#nodes-notice .error")
        error.wait_for()
        assert error.inner_text().startswith("403 ") and "read role" in error.inner_text(), error.inner_text()
        assert not errors, errors
    finally:
        context.close()
