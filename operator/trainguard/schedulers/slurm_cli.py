"""Slurm text and JSON parsing, shared by every Slurm transport.

Pure functions, no I/O: ``slurm_local`` (commands on this host), ``slurm_ssh`` (the same
commands over SSH) and ``slurm_rest`` (slurmrestd JSON) turn what Slurm prints into
``workloads.JobSnapshot`` / ``NodeSnapshot`` here, so all three agree on what a job is. The
commands themselves, and the refusals they print, are ``slurm_commands``.

Shapes handled (checked on Slurm 22.05.8; 24.11 shapes from the data_parser sources):
- ``scontrol -o show job|node``: one line of ``Key=value`` pairs; values may contain spaces
  (``Comment=trainguard policy=x``, ``OS=Linux 6.1 #1 SMP``, a node ``Reason=`` last);
- ``squeue --json`` / slurmrestd v0.0.38: ``job_state`` a string, ``exit_code`` the raw wait
  status (768 = exit 3, 9 = SIGKILL), numbers plain;
- v0.0.40+ (24.11): ``job_state`` a list, numbers as ``{"set": .., "number": ..}``,
  ``exit_code`` as ``{"return_code": .., "signal": {"id": ..}}``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from trainguard.model import times, workloads
from trainguard.schedulers import base

JOB_ID_RE = re.compile(r"^[0-9]{1,12}(_[0-9]{1,9})?$")
"""A job id we accept: ``123`` or an array task ``123_4``. Anything else never reaches a command."""

NODE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
"""A Slurm node name (RFC 1123-ish host label, plus ``_``/``.``)."""

OPT_IN_TOKEN = "trainguard"
"""A job opts in when the first whitespace token of its comment is exactly this."""

_KEY_RE = re.compile(r"(?:^|(?<= ))([A-Z][A-Za-z0-9/:_]*)=")
_BRACKET_RE = re.compile(r"\[([^\[\]]*)\]")
_REASON_STAMP_RE = re.compile(r"\s*\[[^\[\]@]*@[^\[\]]*\]$")


def validate_job_id(job_id: str) -> str:
    if not isinstance(job_id, str) or not JOB_ID_RE.match(job_id):
        raise base.SchedulerError(f"not a Slurm job id: {job_id!r} (expected 123 or 123_4)")
    return job_id


def validate_node(node: str) -> str:
    if not isinstance(node, str) or not NODE_RE.match(node):
        raise base.SchedulerError(f"not a Slurm node name: {node!r}")
    return node


def opted_in(comment: str) -> bool:
    words = comment.split()
    return bool(words) and words[0] == OPT_IN_TOKEN


def workload_id(cluster: str, job_id: str) -> str:
    """``slurm/<cluster>/<job id>`` (see ``model.ids.WorkloadId``)."""
    return f"slurm/{cluster or 'default'}/{job_id}"


# ---------------------------------------------------------------- hostlists


def _split_top(expr: str) -> list[str]:
    parts: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in expr:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise ValueError(f"unbalanced ']' in hostlist {expr!r}")
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if depth != 0:
        raise ValueError(f"unbalanced '[' in hostlist {expr!r}")
    parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip()]


def _expand_range(body: str, expr: str) -> list[str]:
    out: list[str] = []
    for piece in body.split(","):
        lo, sep, hi = piece.strip().partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise ValueError(f"bad range {piece!r} in hostlist {expr!r}")
        if not sep:
            out.append(lo)
            continue
        width = len(lo) if lo.startswith("0") else 0
        a, b = int(lo), int(hi)
        if b < a or b - a > 100_000:
            raise ValueError(f"bad range {piece!r} in hostlist {expr!r}")
        out.extend(str(i).zfill(width) for i in range(a, b + 1))
    return out


def _expand_one(item: str, expr: str) -> list[str]:
    m = _BRACKET_RE.search(item)
    if m is None:
        return [item]
    head, tail = item[: m.start()], item[m.end() :]
    return [head + value + rest for value in _expand_range(m.group(1), expr) for rest in _expand_one(tail, expr)]


def expand_hostlist(expr: str | None) -> list[str]:
    """``node[1-3,5],gpu-a[01-02]`` -> ``node1 node2 node3 node5 gpu-a01 gpu-a02`` (order kept).

    Several bracket groups in one name give their product (``r[1-2]n[1-2]``); zero padding
    of the lower bound is kept. ``(null)``, ``None`` and empty give ``[]``.
    """
    if not expr or expr in ("(null)", "None", "N/A"):
        return []
    names: list[str] = []
    for item in _split_top(expr):
        names.extend(_expand_one(item, expr))
    return names


# ---------------------------------------------------------------- scontrol -o


def parse_kv_line(line: str) -> dict[str, str]:
    """Split one ``scontrol -o show ...`` line into ``Key -> value``.

    A key is a capitalised word followed by ``=`` at the start or after a space; everything up
    to the next key is the value (so values with spaces survive, e.g. a comment
    ``trainguard policy=x max-retries=3``: its lowercase keys are not scontrol keys).
    """
    line = line.rstrip("\n")
    matches = list(_KEY_RE.finditer(line))
    fields: dict[str, str] = {}
    for i, m in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(line)
        fields.setdefault(m.group(1), line[m.end() : end].strip())
    return fields


def _null(value: str | None) -> str:
    return "" if value in (None, "(null)", "None", "N/A") else str(value)


def _int_or_none(value: str | None) -> int | None:
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return None


def _parse_time(value: str | None) -> float | None:
    """scontrol prints local time without a zone (``2026-11-29T15:44:37``)."""
    text = _null(value)
    if not text or text == "Unknown":
        return None
    try:
        return times.parse_iso(text).timestamp()  # naive: the host's local time
    except ValueError:
        return None


def job_state(text: str | Sequence[str] | None) -> workloads.JobState:
    """Slurm's state (``RUNNING``, or ``["PENDING", "REQUEUED"]`` on 24.11) -> JobState.

    The first name we know wins, except that the COMPLETING flag wins over the base state, as
    ``scontrol show job`` prints it: 24.11's JSON says ``["PENDING", "COMPLETING"]`` for a job
    requeued (held) whose processes are still ending, and those may still write output.
    """
    if isinstance(text, str):
        names = [text]
    elif text:
        names = [str(t) for t in text]
    else:
        names = []
    if len(names) > 1 and any(name.strip().upper() == "COMPLETING" for name in names):
        return workloads.JobState.COMPLETING
    for name in names:
        base_name = name.split("+")[0].strip().upper()
        try:
            return workloads.JobState(base_name)
        except ValueError:
            continue
    return workloads.JobState.UNKNOWN


def _user_name(value: str | None) -> str:
    """``UserId=alice(1000)`` -> ``alice``; a bare uid stays as printed."""
    text = _null(value)
    name, _, _ = text.partition("(")
    return name.strip()


def _text(value: Any) -> str:
    """A JSON string field (the same plain string from v0.0.38 to v0.0.44); anything else is empty."""
    return _null(value).strip() if isinstance(value, str) else ""


HOLD_REASONS = ("JobHeldUser", "JobHeldAdmin")
REQUEUE_HOLD_DETAIL = "job requeued in held state"
"""Slurm's description of a hold placed by ``scontrol requeuehold`` (with reason ``JobHeldUser``,
checked on 22.05). A person's ``scontrol hold`` on top turns the reason into ``JobHeldAdmin``;
a release clears the description."""


def _held(priority: int | None, reason: str) -> bool:
    return priority == 0 or reason in HOLD_REASONS


def _hold_of_text(held: bool, printed: str) -> tuple[str, str]:
    """(reason code, description) of a hold from ``scontrol -o show job``'s ``Reason=``, which is
    the description (blanks as ``_``) when there is one, else the code: so after a requeuehold
    the code is not shown and stays "" (``slurm_local`` reads it from ``squeue --json``)."""
    if not held:
        return "", ""
    if printed in HOLD_REASONS:
        return printed, ""
    return "", printed.replace("_", " ")


def job_from_scontrol(fields: Mapping[str, str], cluster: str) -> workloads.JobSnapshot:
    """One ``scontrol -o show job`` record. Its StdOut/StdErr already have %j/%x/%A/%a expanded."""
    array_job, array_task = _null(fields.get("ArrayJobId")), _null(fields.get("ArrayTaskId"))
    job_id = f"{array_job}_{array_task}" if array_job and array_task.isdigit() else fields.get("JobId", "")
    code, _, sig = fields.get("ExitCode", "").partition(":")
    reason = _null(fields.get("Reason"))
    priority = _int_or_none(fields.get("Priority"))
    state = job_state(fields.get("JobState"))
    held = _held(priority, reason)
    hold_reason, hold_detail = _hold_of_text(held, reason)
    return workloads.JobSnapshot(
        workload=workload_id(cluster, job_id),
        job_id=job_id,
        name=_null(fields.get("JobName")),
        state=state,
        reason="" if reason == "None" else reason,
        exit_code=_int_or_none(code),
        exit_signal=_int_or_none(sig),
        attempt=_int_or_none(fields.get("Restarts")) or 0,
        num_tasks=_int_or_none(fields.get("NumTasks")),
        nodes=expand_hostlist(fields.get("NodeList")),
        excluded_nodes=expand_hostlist(fields.get("ExcNodeList")),
        comment=_null(fields.get("Comment")),
        partition=_null(fields.get("Partition")),
        account=_null(fields.get("Account")),
        user=_user_name(fields.get("UserId")),
        qos=_null(fields.get("QOS")),
        stdout_path=_null(fields.get("StdOut")) or None,
        stderr_path=_null(fields.get("StdErr")) or None,
        held=held,
        hold_reason=hold_reason,
        hold_detail=hold_detail,
        requeue_allowed=fields.get("Requeue", "1") != "0",
        array_job_id=array_job or None,
        array_task_id=array_task if array_task.isdigit() else None,
        submitted_at=_parse_time(fields.get("SubmitTime")),
        started_at=None if state is workloads.JobState.PENDING else _parse_time(fields.get("StartTime")),
        ended_at=_parse_time(fields.get("EndTime")) if state.finished else None,
    )


def node_from_fields(name: str, state: str, reason: str, partitions: str | Sequence[str]) -> workloads.NodeSnapshot:
    """Node state as Slurm prints it (``IDLE+DRAIN``, ``MIXED``, or a list on 24.11)."""
    reason = _REASON_STAMP_RE.sub("", _null(reason))
    parts = partitions.split(",") if isinstance(partitions, str) else list(partitions)
    return workloads.NodeSnapshot(
        name=name,
        state=state.upper(),
        reason=reason,
        partitions=[p for p in (_null(x).strip() for x in parts) if p],
        drained="DRAIN" in state.upper(),
    )


def node_from_json(rec: Mapping[str, Any]) -> workloads.NodeSnapshot:
    """One node of slurmrestd's ``nodes[]`` (``state`` a string before v0.0.40, a list after)."""
    state = rec.get("state")
    words = [str(s) for s in state] if isinstance(state, list) else [str(state or "")]
    words += [str(f) for f in rec.get("state_flags") or []]
    return node_from_fields(str(rec.get("name", "")), "+".join(w.upper() for w in words if w),
                            str(rec.get("reason") or ""), rec.get("partitions") or [])


def node_from_scontrol(fields: Mapping[str, str]) -> workloads.NodeSnapshot:
    return node_from_fields(
        fields.get("NodeName", ""), fields.get("State", ""), fields.get("Reason", ""), fields.get("Partitions", "")
    )


# ---------------------------------------------------------------- JSON (squeue --json, slurmrestd)


def _num(value: Any) -> int | None:
    """A plain number (v0.0.38) or ``{"set": true, "number": n}`` (v0.0.40+)."""
    if isinstance(value, dict):
        if not value.get("set", True) or value.get("infinite"):
            return None
        value = value.get("number")
    if isinstance(value, bool) or value is None:
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _exit(value: Any) -> tuple[int | None, int | None]:
    if isinstance(value, dict) and ("return_code" in value or "signal" in value):
        sig = value.get("signal") or {}
        signal = _num(sig.get("id")) if isinstance(sig, dict) else None
        return _num(value.get("return_code")), signal or 0
    raw = _num(value)
    if raw is None:
        return None, None
    return (raw >> 8) & 0xFF, raw & 0x7F


def _str_list(value: Any) -> str:
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    return _null(value if isinstance(value, str) else None)


def expand_output_path(pattern: str, *, job_id: str, name: str, user: str, array_job: str, array_task: str,
                       first_node: str) -> str:
    """Expand sbatch's filename pattern like slurmctld does for ``scontrol show job`` (%j %x %A %a %u %N %%).

    Needed for ``squeue --json`` and slurmrestd, which return the raw pattern.
    """
    def repl(m: re.Match[str]) -> str:
        width, code = m.group(1), m.group(2)
        values = {"j": job_id, "J": job_id, "x": name, "u": user, "A": array_job or job_id,
                  "a": array_task or "4294967294", "N": first_node, "%": "%"}
        if code not in values:
            return m.group(0)
        value = values[code]
        return value.zfill(int(width)) if width and value.isdigit() else value

    return re.sub(r"%(\d*)([jJxuAaN%])", repl, pattern)


def _json_reason(rec: Mapping[str, Any]) -> str:
    """The job's reason as ``scontrol show job`` prints it: the state description, blanks turned
    into underscores, when there is one, else the reason code. A job requeued held is
    ``job_requeued_in_held_state`` in both; JSON's ``state_reason`` alone says ``JobHeldUser``
    there on 24.11, the same as a person's ``scontrol uhold``."""
    description = "_".join(_null(rec.get("state_description")).split())
    reason = description or _null(rec.get("state_reason"))
    return "" if reason == "None" else reason


def job_from_json(rec: Mapping[str, Any], cluster: str = "") -> workloads.JobSnapshot | None:
    """One job of ``squeue --json`` / slurmrestd ``jobs[]``; None for a not-yet-split array record."""
    raw_id = _num(rec.get("job_id"))
    if raw_id is None:
        return None
    array_job = _num(rec.get("array_job_id")) or 0
    array_task = _num(rec.get("array_task_id"))
    if array_job and array_task is None:
        return None  # pending array tasks still in one record (e.g. 12_[4-10]): seen once they split
    job_id = f"{array_job}_{array_task}" if array_job and array_task is not None else str(raw_id)
    name = _null(rec.get("name"))
    state = job_state(rec.get("job_state"))
    reason = _json_reason(rec)
    priority = _num(rec.get("priority"))
    code, signal = _exit(rec.get("exit_code"))
    nodes = expand_hostlist(_str_list(rec.get("nodes")))
    first_node = _null(rec.get("batch_host")) or (nodes[0] if nodes else "")
    fmt = dict(job_id=str(raw_id), name=name, user=_null(rec.get("user_name")),
               array_job=str(array_job) if array_job else "",
               array_task=str(array_task) if array_task is not None else "", first_node=first_node)
    stdout = _null(rec.get("standard_output"))
    workdir = _null(rec.get("current_working_directory"))
    if not stdout and workdir and rec.get("batch_flag", True):
        # sbatch's default output file, relative to the job's working directory
        stdout = f"{workdir.rstrip('/')}/slurm-{'%A_%a' if array_job else '%j'}.out"
    stderr = _null(rec.get("standard_error")) or stdout
    started = _num(rec.get("start_time"))
    ended = _num(rec.get("end_time"))
    code_reason = _null(rec.get("state_reason"))
    code_reason = "" if code_reason == "None" else code_reason
    # The hold's reason *code* (JobHeldUser / JobHeldAdmin), not the description-first ``reason``:
    # a person's `scontrol hold` on top of our requeue-hold changes the code and may keep the
    # description, and the watchdog compares both to tell our hold from theirs.
    held = _held(priority, code_reason) or _held(priority, reason) or rec.get("hold") is True
    return workloads.JobSnapshot(
        workload=workload_id(cluster or _null(rec.get("cluster")), job_id),
        job_id=job_id,
        name=name,
        state=state,
        reason=reason,
        exit_code=code,
        exit_signal=signal,
        attempt=_num(rec.get("restart_cnt")) or 0,
        num_tasks=_num(rec.get("tasks")),
        nodes=nodes,
        excluded_nodes=expand_hostlist(_str_list(rec.get("excluded_nodes"))),
        comment=_null(rec.get("comment")) if isinstance(rec.get("comment"), str) else "",
        partition=_null(rec.get("partition")),
        account=_text(rec.get("account")),
        user=_text(rec.get("user_name")),
        qos=_text(rec.get("qos")),
        stdout_path=expand_output_path(stdout, **fmt) if stdout else None,
        stderr_path=expand_output_path(stderr, **fmt) if stderr else None,
        held=held,
        hold_reason=code_reason if held else "",
        hold_detail=_null(rec.get("state_description")) if held and isinstance(rec.get("state_description"), str)
        else "",
        requeue_allowed=bool(rec.get("requeue", True)),
        array_job_id=str(array_job) if array_job else None,
        array_task_id=str(array_task) if array_job and array_task is not None else None,
        submitted_at=float(v) if (v := _num(rec.get("submit_time"))) else None,
        started_at=float(started) if started and state is not workloads.JobState.PENDING else None,
        ended_at=float(ended) if ended and state.finished else None,
    )
