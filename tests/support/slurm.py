"""pytest plugin: the real local Slurm cluster (``hack/local-slurm.sh``) as a session fixture.

``slurm_cluster`` brings the cluster up once per session, or reuses a running one, and
yields a :class:`SlurmCluster`: the environment to hand to subprocesses (``SLURM_CONF`` and
friends from ``.local/slurm/env``), the node names, the slurmrestd URL, token and API version,
and helpers to submit, inspect, wait for and cancel jobs. Every Slurm command runs as an argv
list with a timeout. Jobs this session submitted and left behind are cancelled at the end; the
cluster is stopped only if pytest started it (see ``tests.support.services``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import secrets
import subprocess
import time
from collections.abc import Callable, Collection, Iterator
from pathlib import Path

import pytest

from . import services

SCRIPT = services.HACK_DIR / "local-slurm.sh"

COMMAND_TIMEOUT = 30.0
"""Seconds any single Slurm client command may take before the test fails."""

JobPredicate = Callable[[dict[str, str]], bool]

FINAL_STATES = frozenset({"CANCELLED", "COMPLETED", "FAILED", "TIMEOUT", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE"})
"""Job states that do not change by themselves: waiting for something else is pointless.
(NODE_FAIL and PREEMPTED are left out: with JobRequeue=1 the job comes back.)"""

# `scontrol -o show job` prints `Key=Value` pairs separated by spaces; values may contain
# spaces (e.g. Comment=trainguard policy=x), so a new pair starts only at a CamelCase key.
_PAIR = re.compile(r"(?:^|\s)([A-Z][A-Za-z0-9_/:]*)=")


def state_dir() -> Path:
    """The directory hack/local-slurm.sh uses (``TG_SLURM_DIR``, else ``.local/slurm``, or
    ``.local/slurm-root`` for a cluster run from ``TG_SLURM_ROOT``)."""
    default = "slurm-root" if os.environ.get("TG_SLURM_ROOT") else "slurm"
    return Path(os.environ.get("TG_SLURM_DIR") or services.REPO_ROOT / ".local" / default)


def parse_scontrol_line(line: str) -> dict[str, str]:
    """Parse one line of ``scontrol -o show job|node`` into a dict."""
    matches = list(_PAIR.finditer(line))
    result: dict[str, str] = {}
    for index, match in enumerate(matches):
        end = matches[index + 1].start() if index + 1 < len(matches) else len(line)
        result[match.group(1)] = line[match.end() : end].strip()
    return result


def expand_hostlist(hostlist: str) -> list[str]:
    """Expand a Slurm hostlist such as ``node[1-2,4]`` (one bracket group) into names."""
    names: list[str] = []
    for part in re.findall(r"[^,\[]+(?:\[[^\]]*\])?", hostlist):
        match = re.fullmatch(r"([^\[]*)\[([^\]]*)\]", part)
        if match is None:
            if part and part != "(null)":
                names.append(part)
            continue
        prefix, ranges = match.groups()
        for item in ranges.split(","):
            low, _, high = item.partition("-")
            width = len(low)
            for number in range(int(low), int(high or low) + 1):
                names.append(f"{prefix}{number:0{width}d}")
    return names


@dataclasses.dataclass
class SlurmCluster:
    """A running local Slurm cluster and helpers to drive it from tests."""

    env: dict[str, str]
    """Environment for subprocesses: ours plus SLURM_CONF, SLURMRESTD_URL, SLURM_JWT, ..."""
    nodes: list[str]
    rest_url: str
    jwt: str
    api_version: str
    version: str
    jobs_dir: Path
    started: bool
    """True when this session started the cluster."""
    submitted: list[str] = dataclasses.field(default_factory=list)

    @property
    def spoken_api_version(self) -> str:
        """The slurmrestd API version our adapter uses here: the server's newest, up to the newest it
        parses (26.05 also offers v0.0.45; we, like slurm-operator v1.x, speak v0.0.44 there)."""
        from trainguard.schedulers import slurm_rest

        newest = int(self.api_version.rsplit(".", 1)[1])
        return f"v0.0.{min(newest, slurm_rest.SUPPORTED_MINORS[-1])}"

    @property
    def client_env(self) -> dict[str, str]:
        """What a scheduler adapter needs to address this cluster: ``SLURM_CONF``, and ``PATH``
        when the cluster runs from a root (``TG_SLURM_ROOT``), whose client commands must be used."""
        env = {"SLURM_CONF": self.env["SLURM_CONF"]}
        if self.env.get("TG_SLURM_BIN"):
            env["PATH"] = self.env["PATH"]
        return env

    def run(self, *argv: str, timeout: float = COMMAND_TIMEOUT) -> str:
        """Run a Slurm client command (argv, no shell); return stdout or fail with its output."""
        proc = subprocess.run(
            list(argv),
            env=self.env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if proc.returncode != 0:
            raise AssertionError(f"{' '.join(argv)} exited with {proc.returncode}: {proc.stderr.strip()}")
        return proc.stdout

    def scontrol(self, *args: str) -> str:
        return self.run("scontrol", *args)

    def submit(self, script_text: str, *sbatch_args: str) -> str:
        """Write the batch script into ``jobs_dir`` and ``sbatch --parsable`` it; return the job id.

        The job runs in ``jobs_dir`` (so ``slurm-<id>.out`` lands there unless ``--output`` says
        otherwise).
        """
        path = self.jobs_dir / f"job-{secrets.token_hex(6)}.sh"
        path.write_text(script_text)
        path.chmod(0o755)
        out = self.run("sbatch", "--parsable", f"--chdir={self.jobs_dir}", *sbatch_args, str(path))
        job_id = out.strip().split(";", 1)[0]
        if not job_id.isdigit():
            raise AssertionError(f"sbatch printed no job id: {out!r}")
        self.submitted.append(job_id)
        return job_id

    def show(self, job_id: str) -> dict[str, str]:
        """``scontrol -o show job`` as a dict (keys as Slurm prints them: JobState, NodeList, ...)."""
        out = self.scontrol("-o", "show", "job", job_id).strip()
        if not out:
            raise AssertionError(f"scontrol show job {job_id} printed nothing")
        return parse_scontrol_line(out.splitlines()[0])

    def wait_for(
        self,
        job_id: str,
        until: JobPredicate | str | Collection[str],
        timeout: float = 60.0,
        interval: float = 0.5,
        fail_fast: bool = True,
    ) -> dict[str, str]:
        """Poll the job until ``until`` holds: a predicate on :meth:`show`, or a JobState (or set).

        Fails with the last seen state when ``timeout`` seconds pass first, or at once when the
        job reached a final state that does not satisfy ``until`` (``fail_fast``); the message
        then includes the end of the job's output file.
        """
        if isinstance(until, str):
            states = {until}
            predicate: JobPredicate = lambda job: job.get("JobState") in states  # noqa: E731
            wanted = until
        elif callable(until):
            predicate = until
            wanted = getattr(until, "__name__", "condition")
        else:
            states = set(until)
            predicate = lambda job: job.get("JobState") in states  # noqa: E731
            wanted = "|".join(sorted(states))
        deadline = time.monotonic() + timeout
        last: dict[str, str] = {}
        while True:
            last = self.show(job_id)
            if predicate(last):
                return last
            final = fail_fast and last.get("JobState") in FINAL_STATES
            if final or time.monotonic() >= deadline:
                seen = {k: last.get(k, "?") for k in ("JobState", "Reason", "NodeList", "Restarts", "ExcNodeList")}
                why = "job ended" if final else f"no {wanted} within {timeout:.0f} s"
                raise AssertionError(f"job {job_id}: {why}; last seen {seen}{self._output_tail(last)}")
            time.sleep(interval)

    @staticmethod
    def _output_tail(job: dict[str, str], lines: int = 15) -> str:
        path = Path(job.get("StdOut", ""))
        if not path.is_file():
            return ""
        tail = path.read_text(errors="replace").splitlines()[-lines:]
        return f"\n--- end of {path} ---\n" + "\n".join(tail)

    def cancel(self, job_id: str) -> None:
        self.run("scancel", job_id)

    def cancel_leftovers(self) -> None:
        """Cancel this session's jobs that are still queued or running."""
        if not self.submitted:
            return
        subprocess.run(
            ["scancel", *self.submitted],
            env=self.env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=COMMAND_TIMEOUT,
            check=False,
        )


@contextlib.contextmanager
def _slurm_commands_first(directory: Path) -> Iterator[None]:
    """For a cluster run from a root (``TG_SLURM_BIN`` in its env file), put that root's client
    commands first on this process's PATH for the session, as on a machine where that Slurm is
    installed: the adapters under test resolve ``scontrol`` and ``squeue`` from PATH."""
    values = services.read_env_file(directory / "env")
    bin_dir = values.get("TG_SLURM_BIN")
    if not bin_dir:
        yield
        return
    before = os.environ.get("PATH", "")
    os.environ["PATH"] = f"{bin_dir}{os.pathsep}{before}"
    try:
        yield
    finally:
        os.environ["PATH"] = before


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmCluster]:
    """The local Slurm cluster, up for the whole session.

    ``env`` includes ``SLURM_JWT`` (as ``source .local/slurm/env`` does): client commands then
    authenticate by JWT; jobs drop the token (TaskProlog), but an ``srun`` started directly from
    a test needs ``SLURM_JWT`` removed from its environment (slurmd has no auth/jwt).
    """
    if os.environ.get("TG_SKIP_SLURM") == "1":
        pytest.skip("TG_SKIP_SLURM=1")
    directory = state_dir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SLURMRESTD_"))}
    try:
        with services.shared_service(SCRIPT, directory, env) as started, _slurm_commands_first(directory):
            values = services.read_env_file(directory / "env")
            if values.get("TG_SLURM_BIN"):
                values["PATH"] = os.environ["PATH"]
            cluster = SlurmCluster(
                env={**env, **values},
                nodes=[f"node{i}" for i in range(1, int(values["TG_SLURM_NODES"]) + 1)],
                rest_url=values["SLURMRESTD_URL"],
                jwt=values["SLURM_JWT"],
                api_version=values["SLURM_API_VERSION"],
                version=values["SLURM_VERSION"],
                jobs_dir=Path(values.get("TG_SLURM_JOBS_DIR", str(directory / "jobs"))),
                started=started,
            )
            try:
                yield cluster
            finally:
                cluster.cancel_leftovers()
    except services.ServiceError as exc:
        pytest.fail(f"local Slurm cluster: {exc}", pytrace=False)
