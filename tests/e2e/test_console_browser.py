"""The web console in a real Chromium, against a real ``trainguard run`` on the real local Slurm cluster.

One runner (Action mode, the session's own policy, a bearer-token file with a write and a read
token) serves the console and the API; one real PyTorch training job that opted in fails on
rank 1 with a GPU hardware error (Xid 79). The browser, logged in with the write token:

- sees the job appear in the workloads table while the page stays loaded (live events over SSE,
  no reload: a marker set on ``window`` before the job exists is still there afterwards);
- after Slurm reports the job COMPLETED, finds on the workload page the first attempt's timeline
  picture with detection -> node exclusion -> requeue in that order, and the second attempt
  COMPLETED, the evidence line highlighted; acknowledges it (an audit record with the note);
- finds the job's records with the audit search, and the excluded node's incident on the nodes page.

The browser logs in through the server's script-free form (``/`` answers 401 with it); the session
cookie it gets is HttpOnly and SameSite=Strict and holds no token. A second browser context, logged
in with the read token, sees the policy switch disabled, follows a switch made by a write user
live, and a forced click gets the API's 403 shown; the policy's mode is unchanged. Without a login
nothing but the probes and the form answers; logout ends the session on the server too. Screenshots of each page go to
the session's artifacts directory (``tests/support/browser.py``).
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.e2e import harness
from tests.support.slurm import SlurmCluster

pytestmark = [pytest.mark.e2e, pytest.mark.slurm, pytest.mark.browser]

WRITE_TOKEN = "console-e2e-write-token-5f1c"
READ_TOKEN = "console-e2e-read-token-9a2e"
RECOVERY_TIMEOUT = 300.0
UI_TIMEOUT_MS = 120_000
"""How long the browser waits for something the engine must first do (a busy 2-core machine)."""


@dataclass
class Console:
    runner: harness.Trainguard
    policy: str
    url: str
    job_id: str
    workload: str
    workdir: Path


def _api(url: str, token: str, path: str) -> Any:
    request = urllib.request.Request(url + path, headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.load(response)


def _wait_api(url: str, path: str, predicate: Callable[[Any], bool], *, what: str, timeout: float = 90.0) -> Any:
    """Read ``path`` (write token) until ``predicate`` holds on its JSON; fail with the last answer."""
    deadline = time.monotonic() + timeout
    while True:
        data = _api(url, WRITE_TOKEN, path)
        if predicate(data):
            return data
        if time.monotonic() >= deadline:
            raise AssertionError(f"{path}: not {what} within {timeout:.0f} s: {json.dumps(data)[:2000]}")
        time.sleep(0.5)


def _post_api(url: str, token: str, path: str, body: Any) -> Any:
    request = urllib.request.Request(url + path, data=json.dumps(body).encode(), method="POST", headers={
        "Authorization": f"Bearer {token}", "Content-Type": "application/json", "X-Trainguard-Request": "1"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.load(response)


def _status(url: str, path: str, cookie: str = "") -> int:
    """The status of a GET of ``path`` (with ``cookie`` as the session cookie when given)."""
    headers = {"Cookie": f"trainguard_session={cookie}"} if cookie else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url + path, headers=headers), timeout=30) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def _login(context: Any, url: str, token: str, errors: list[str]) -> Any:
    """Open the console and log in with ``token`` through the server's login form, as a remote user
    would; check the session cookie it sets; uncaught page errors are appended to ``errors``."""
    page = context.new_page()
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    response = page.goto(url + "/")
    assert response is not None and response.status == 401, "the console without a login"
    page.locator("input#token").fill(token)
    page.locator("button#login").click()
    # a selector, not wait_for_function: polling a JS predicate needs eval, which the console's CSP forbids
    page.wait_for_selector("body[data-role=read], body[data-role=write]", state="attached")
    page.wait_for_selector("#live[data-state=live]")
    cookies = {c["name"]: c for c in context.cookies(url)}
    session = cookies["trainguard_session"]
    assert session["httpOnly"] and session["sameSite"] == "Strict" and session["path"] == "/", session
    assert token not in session["value"], "the cookie holds a session id, never the token"
    assert "trainguard_session" not in page.evaluate("document.cookie"), "HttpOnly: no script can read it"
    return page


@pytest.fixture(scope="module")
def runner(slurm_cluster: SlurmCluster, e2e_dir: Path,
           request: pytest.FixtureRequest) -> Iterator[tuple[harness.Trainguard, str]]:
    directory = e2e_dir / "trainguard-console"
    directory.mkdir(parents=True, exist_ok=True)
    tokens = directory / "tokens"
    tokens.write_text(f"{WRITE_TOKEN} write\n{READ_TOKEN} read\n")
    tokens.chmod(0o600)
    policy, policy_name = harness.isolated_policy(directory, spec=harness.NO_LEMONS)
    tg = harness.Trainguard(slurm_cluster, directory, mode="action", policy=policy)
    tg.argv += ["--http-token-file", str(tokens)]
    tg.start()
    try:
        yield tg, policy_name
    finally:
        code = tg.stop()
        if code != 0 or request.session.testsfailed:
            print(f"\n--- {tg.log_path} (exit {code}) ---\n{tg.log()}")


@pytest.mark.slow(reason="a real job fails and recovers while Chromium watches the live timeline page update")
def test_failing_job_live_timeline_and_audit(runner: tuple[harness.Trainguard, str], chromium: Any,
                                             slurm_cluster: SlurmCluster, e2e_dir: Path, artifacts_dir: Path) -> None:
    tg, policy = runner
    url = tg.http_url
    context = chromium.new_context(viewport={"width": 1400, "height": 1000})
    workdir = e2e_dir / "console-jobs"
    job_id = ""
    errors: list[str] = []
    try:
        page = _login(context, url, WRITE_TOKEN, errors)
        page.goto(url + "/#/workloads")
        page.wait_for_selector("#workloads-table tbody tr")
        page.evaluate("window.__sameDocument = 'still here'")

        job_id = harness.submit(slurm_cluster, workdir, job_name="e2e-console", nodes=2, steps=100, step_time=0.1,
                                log_every=5, ckpt_every=20, fault="xid", fault_rank=1, fault_step=15,
                                comment=f"trainguard policy={policy}")
        row = page.locator("#workloads-table tbody tr[data-workload$='/" + job_id + "']")
        row.wait_for(timeout=UI_TIMEOUT_MS)
        assert page.evaluate("window.__sameDocument") == "still here", "the row came with a reload"
        workload = row.get_attribute("data-workload")
        assert workload is not None and workload.startswith("slurm/")
        page.screenshot(path=str(artifacts_dir / "workloads.png"), full_page=True)

        job = harness.wait_job(slurm_cluster, job_id, harness.final_and_restarted(1), timeout=RECOVERY_TIMEOUT,
                               what="final after one requeue", runner=tg, workdir=workdir)
        assert (job["JobState"], job["Restarts"]) == ("COMPLETED", "1"), harness.diagnosis(tg, workdir, job_id)
        harness.wait_audit(tg, job_id, lambda rs: bool(harness.of_kind(rs, "outcome", 0)), timeout=60,
                           what="outcome of attempt 0")
        bad_node = job["ExcNodeList"]
        # The engine records an attempt's end when it next reads the scheduler, and the live stream
        # carries audit records only: wait until the API knows the completion, then open the page.
        _wait_api(url, "/api/v1/workloads/" + workload, lambda d: any(
            a["attempt"] == 1 and a["state"] == "COMPLETED" for a in d["attempts"]), what="attempt 1 COMPLETED")

        page.goto(url + "/#/workload/" + workload)
        first = page.locator("section.attempt[data-attempt='0'] svg.timeline")
        first.wait_for(timeout=UI_TIMEOUT_MS)
        page.locator("section.attempt[data-attempt='1'] .badge.state-completed").wait_for(timeout=UI_TIMEOUT_MS)
        steps = first.locator("g.step").evaluate_all(
            "gs => gs.map(g => [g.dataset.kind, g.dataset.operation, g.dataset.label])")
        kinds = [kind for kind, _, _ in steps]
        done = [op for kind, op, label in steps if kind == "action" and label.endswith("done")]
        assert kinds[0] == "anomaly", steps
        order = [op for op in done if op in ("requeue_hold", "exclude_nodes", "release")]
        assert order == ["requeue_hold", "exclude_nodes", "release"], steps
        assert "outcome" in kinds, steps
        evidence = page.locator("section.attempt[data-attempt='0'] .evidence-line mark")
        assert "Xid" in evidence.first.inner_text()
        assert bad_node in page.locator("section.attempt[data-attempt='0'] .evidence").inner_text()
        page.screenshot(path=str(artifacts_dir / "workload.png"), full_page=True)
        page.locator("section.attempt[data-attempt='0']").screenshot(path=str(artifacts_dir / "timeline.png"))
        page.locator("#ack-form input[name=note]").fill("seen in the browser test")
        page.locator("#ack-form button").click()
        assert page.locator("#workload-notice .ok").inner_text() == f"{workload} acknowledged"
        page.mouse.move(0, 0)  # no hover highlight left in the later screenshots
        ack = [r for r in tg.audit(job_id) if r["payload"].get("operation") == "acknowledge"]
        assert [(r["decided_by"], r["payload"]["arguments"]["note"]) for r in ack] == [
            ("api", "seen in the browser test")], ack

        page.goto(url + "/#/audit?workload=" + workload)
        page.locator("#audit-table tbody tr[data-kind=anomaly]").first.wait_for(timeout=UI_TIMEOUT_MS)
        audit_kinds = set(page.locator("#audit-table tbody tr").evaluate_all("rs => rs.map(r => r.dataset.kind)"))
        assert {"anomaly", "verdict", "advice", "action", "outcome"} <= audit_kinds, audit_kinds
        page.screenshot(path=str(artifacts_dir / "audit.png"), full_page=True)

        page.goto(url + "/#/nodes")
        node_row = page.locator(f"#nodes-table tbody tr[data-node='{bad_node}']")
        node_row.wait_for(timeout=UI_TIMEOUT_MS)
        assert workload in node_row.inner_text(), "the node's incident names the workload"
        page.screenshot(path=str(artifacts_dir / "nodes.png"), full_page=True)

        page.goto(url + "/#/")
        page.locator(f"li[data-policy='{policy}'] .badge.mode-action").wait_for(timeout=UI_TIMEOUT_MS)
        assert "engine running here" in page.locator("ul.health").inner_text()
        assert "acknowledge" not in page.locator(".slot.wide").last.inner_text(), "a person's note is no recovery"
        page.screenshot(path=str(artifacts_dir / "overview.png"), full_page=True)
        assert not errors, errors
    except BaseException:
        for page in context.pages:
            page.screenshot(path=str(artifacts_dir / "failure.png"), full_page=True)
        raise
    finally:
        context.close()
        if job_id:
            harness.cancel_if_active(slurm_cluster, job_id)


def test_read_only_user_cannot_switch_a_policy(runner: tuple[harness.Trainguard, str], chromium: Any,
                                               artifacts_dir: Path) -> None:
    tg, policy = runner
    url = tg.http_url
    before = {p["name"]: p for p in _api(url, WRITE_TOKEN, "/api/v1/policies")["items"]}[policy]
    context = chromium.new_context(viewport={"width": 1400, "height": 900})
    try:
        errors: list[str] = []
        page = _login(context, url, READ_TOKEN, errors)
        page.goto(url + "/#/policies")
        button = page.locator(f"button[data-switch='{policy}']")
        button.wait_for()
        assert button.is_disabled(), "a read-only user is offered the switch"
        # live updates reach the read-only page (EventSource with the session cookie): a write user
        # switches the policy elsewhere and back, the page follows without a reload
        page.evaluate("window.__sameDocument = 'still here'")
        card = page.locator(f".policy[data-policy='{policy}']")
        _post_api(url, WRITE_TOKEN, f"/api/v1/policies/{policy}/mode", {"mode": "Monitor"})
        card.locator(".badge.mode-monitor").wait_for(timeout=UI_TIMEOUT_MS)
        _post_api(url, WRITE_TOKEN, f"/api/v1/policies/{policy}/mode", {"mode": "Action"})
        card.locator(".badge.mode-action").wait_for(timeout=UI_TIMEOUT_MS)
        assert page.evaluate("window.__sameDocument") == "still here", "the update came with a reload"
        # the server decides, not the page: a forced attempt gets the API's 403, shown as it is
        button.evaluate("b => { b.disabled = false; b.click(); }")
        error = page.locator("#policy-notice .error")
        error.wait_for()
        assert error.inner_text().startswith("403 ") and "read role" in error.inner_text()
        page.screenshot(path=str(artifacts_dir / "policies-read-only.png"), full_page=True)
        assert not errors, errors
    finally:
        context.close()
    after = {p["name"]: p for p in _api(url, WRITE_TOKEN, "/api/v1/policies")["items"]}[policy]
    assert (after["declared_mode"], after["mode"]) == (before["declared_mode"], before["mode"]) == ("Action", "action")


def test_nothing_without_a_login_and_logout_ends_the_session(runner: tuple[harness.Trainguard, str], chromium: Any,
                                                             artifacts_dir: Path) -> None:
    """With a token file nothing but the probes and the login form answers without credentials, the
    console's own code included; a wrong token gets the form again; logging out ends the session on
    the server, so the old cookie is refused afterwards."""
    tg, _ = runner
    url = tg.http_url
    for path in ("/", "/console/app.js", "/console/api.js", "/api/v1/workloads", "/api/v1/events", "/metrics",
                 "/no/such/path"):
        assert _status(url, path) == 401, path
    assert _status(url, "/healthz") == 200
    context = chromium.new_context(viewport={"width": 1400, "height": 900})
    errors: list[str] = []
    try:
        page = context.new_page()
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(url + "/")
        page.locator("input#token").fill("not-the-token-at-all-0000")
        with page.expect_navigation() as navigation:
            page.locator("button#login").click()
        assert navigation.value is not None and navigation.value.status == 401
        assert "not accepted" in page.locator("#login-error").inner_text()
        assert not context.cookies(url), "no cookie for a wrong token"
        page.screenshot(path=str(artifacts_dir / "login-refused.png"), full_page=True)
        page.close()

        page = _login(context, url, READ_TOKEN, errors)
        session = {c["name"]: c["value"] for c in context.cookies(url)}["trainguard_session"]
        assert _status(url, "/console/app.js", session) == 200
        assert page.locator("#who").inner_text().endswith("read")
        page.screenshot(path=str(artifacts_dir / "logged-in-read.png"), full_page=True)
        with page.expect_navigation():
            page.locator("button#logout").click()
        page.locator("form[action='/login'] input#token").wait_for()
        assert "trainguard_session" not in {c["name"] for c in context.cookies(url) if c["value"]}
        assert _status(url, "/api/v1/whoami", session) == 401, "the server forgot the session"
        assert _status(url, "/api/v1/whoami", "forged" + session[6:]) == 401
        assert not errors, errors
    finally:
        context.close()


def test_write_user_switches_a_policy(runner: tuple[harness.Trainguard, str], chromium: Any,
                                      artifacts_dir: Path) -> None:
    """The switch as a write user: the page shows the new effective mode and who switched it; the
    switch is in the audit log under the user's name; switched back, the policy acts again."""
    tg, policy = runner
    url = tg.http_url
    # the read-only test switched this policy too (through the API): only this test's switches count
    earlier = {r["id"] for r in _api(url, WRITE_TOKEN, f"/api/v1/audit?workload=policy:{policy}")["items"]}
    context = chromium.new_context(viewport={"width": 1400, "height": 900})
    errors: list[str] = []
    try:
        page = _login(context, url, WRITE_TOKEN, errors)
        page.goto(url + "/#/policies")
        card = page.locator(f".policy[data-policy='{policy}']")
        card.locator(".badge.mode-action").wait_for()
        card.locator(f"button[data-switch='{policy}']").click()
        card.locator(".badge.mode-monitor").wait_for()
        assert "switched by token:" in card.inner_text()
        assert page.locator("#policy-notice .ok").inner_text().startswith(f"policy {policy} is now Monitor")
        page.screenshot(path=str(artifacts_dir / "policies-switched.png"), full_page=True)
        card.locator(f"button[data-switch='{policy}']").click()
        card.locator(".badge.mode-action").wait_for()
        assert not errors, errors
    finally:
        context.close()
    switches = [r for r in _api(url, WRITE_TOKEN, f"/api/v1/audit?workload=policy:{policy}")["items"]
                if r["payload"].get("operation") == "set_policy_mode" and r["id"] not in earlier]
    assert [s["payload"]["arguments"]["to"] for s in reversed(switches)] == ["Monitor", "Action"], switches
    assert all(s["decided_by"] == "api" and s["payload"]["by"].startswith("token:") for s in switches), switches


def test_read_only_user_backtests_a_changed_policy(runner: tuple[harness.Trainguard, str], chromium: Any,
                                                   artifacts_dir: Path) -> None:
    """The backtest page as a read-only user (a backtest changes nothing): paste a changed policy,
    replay, and see the same summary and rows the API gives for it."""
    tg, policy = runner
    url = tg.http_url
    changed = (f"apiVersion: trainguard.dev/v1alpha1\nkind: RecoveryPolicy\nmetadata: {{name: {policy}}}\n"
               "spec:\n  mode: Action\n  retries: {maxRetries: 0}\n")
    request = urllib.request.Request(
        url + "/api/v1/backtest", data=json.dumps({"policy": changed}).encode(), method="POST",
        headers={"Authorization": f"Bearer {READ_TOKEN}", "Content-Type": "application/json",
                 "X-Trainguard-Request": "1"})
    with urllib.request.urlopen(request, timeout=60) as response:
        expected = json.load(response)
    context = chromium.new_context(viewport={"width": 1400, "height": 900})
    try:
        errors: list[str] = []
        page = _login(context, url, READ_TOKEN, errors)
        page.goto(url + "/#/backtest")
        page.locator("#backtest-policy").fill(changed)
        page.locator("#backtest-run").click()
        summary = page.locator("#backtest-summary")
        summary.wait_for()
        decisions = expected["summary"]["decisions"]
        assert f"{decisions} decisions of {expected['summary']['workloads']} workloads replayed" in summary.inner_text()
        assert page.locator("#backtest-table tbody tr[data-workload]").count() == len(expected["rows"])
        page.screenshot(path=str(artifacts_dir / "backtest.png"), full_page=True)
        assert not errors, errors
    finally:
        context.close()


def test_write_user_pauses_and_resumes_every_action(runner: tuple[harness.Trainguard, str], chromium: Any,
                                                    artifacts_dir: Path) -> None:
    """The runtime pause from the console's bar: a write user pauses every action (the console asks why),
    the bar then says who paused and why, the API agrees, a read-only user sees the bar without the
    button; resumed the same way. Both changes are in the audit log under the user's name."""
    tg, _ = runner
    url = tg.http_url
    writer = chromium.new_context(viewport={"width": 1400, "height": 900})
    reader = chromium.new_context(viewport={"width": 1400, "height": 900})
    errors: list[str] = []
    try:
        page = _login(writer, url, WRITE_TOKEN, errors)
        page.locator("#pausebar[data-paused=false] #pause-actions").wait_for()
        page.once("dialog", lambda dialog: dialog.accept("rack 12 maintenance"))
        page.locator("#pause-actions").click()
        page.locator("#pausebar[data-paused=true]").wait_for()
        text = page.locator("#pausebar").inner_text()
        assert "Actions paused" in text and "rack 12 maintenance" in text and "token:" in text, text
        state = _api(url, READ_TOKEN, "/api/v1/actions")
        assert (state["paused"], state["acting"], state["reason"]) == (True, False, "rack 12 maintenance"), state
        page.screenshot(path=str(artifacts_dir / "actions-paused.png"), full_page=True)

        other = _login(reader, url, READ_TOKEN, errors)
        other.locator("#pausebar[data-paused=true]").wait_for()
        assert other.locator("#resume-actions").count() == 0, "a read-only user cannot resume"

        page.locator("#resume-actions").click()
        page.locator("#pausebar[data-paused=false]").wait_for()
        assert _api(url, READ_TOKEN, "/api/v1/actions")["acting"] is True
        assert not errors, errors
    finally:
        writer.close()
        reader.close()
        _post_api(url, WRITE_TOKEN, "/api/v1/actions/resume", {})  # the module's runner acts again
    changes = [r["payload"] for r in _api(url, WRITE_TOKEN, "/api/v1/audit?kind=action&order=asc&limit=500")["items"]
               if r["payload"].get("control") == "actions-paused"]
    assert [c["operation"] for c in changes][:2] == ["pause", "resume-actions"], changes
    assert all(c["by"].startswith("token:") for c in changes[:2]), changes
