"""``exclusion.validation``: the site's check that a node we took out of service must pass before we return it.

Place: a section of the RecoveryPolicy schema (``policy.model.Exclusion.validation``), read by the engine
(``engine.policies``) into the undrain rule that ``act.validate`` carries out. Absent (the default), a node
returns by time alone, as before (docs/policy.md "Resuming drained nodes").

The check is an argv list, never a shell line: the scheduler runs its first word with the rest as
arguments. On Slurm the first word is the script ``sbatch`` submits (``#!`` on its first line), so it must
be an absolute path that exists on the node; on Kubernetes it is the container's command, run in ``image``
(``k8s.kubejobs.node_checks``). Nothing of ours interpolates a word into a shell.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, field_validator

from trainguard.policy import fields

MAX_WORDS = 64
"""Most words of a check's argv: a diagnostic script with its flags, not a program in a YAML list."""

Word = Annotated[str, Field(min_length=1, max_length=1024)]

_PARTITION = r"^[A-Za-z0-9._-]{1,64}$"
_IMAGE = r"^[A-Za-z0-9][A-Za-z0-9._/:@+-]*$"
"""A container image reference (registry/path:tag or @sha256:digest): no spaces, no shell."""
_PATH = r"^/[A-Za-z0-9._/+@=-]*$"
"""No repeat count: the apiserver compiles CRD patterns with Go's regexp, which refuses counts over 1000;
the length is ``max_length``."""


class Validation(fields.Section):
    """The check run on a node before its return (Slurm: a job pinned to the node in our reservation;
    Kubernetes: a Job pinned to the node, tolerating our taints)."""

    command: list[Word] = Field(
        min_length=1,
        max_length=MAX_WORDS,
        description="The check as argv (no shell): the first word an absolute path to a script on the node "
        "(Slurm: sbatch submits it, so it starts with #!; Kubernetes: the container's command in image), the "
        "rest its arguments. Exit 0 passes, any other "
        "exit code fails and holds the node for repair with the code and the tail of the output as evidence.",
    )
    timeout: fields.Duration = Field(
        default=fields.duration_default("30m"),
        description="Longest time from our reservation of the node to the check's verdict, waiting in the "
        "queue included; also the check job's time limit. Past it the validation is inconclusive: the node is "
        "drained again and due at the next undrainAfter. 30m covers a full dcgmi diag -r 3.",
    )
    partition: Annotated[str, Field(pattern=_PARTITION)] | None = Field(
        default=None,
        description="Partition the check job is submitted to; null: the cluster's default partition. Slurm only.",
    )
    image: Annotated[str, Field(pattern=_IMAGE, max_length=512)] | None = Field(
        default=None,
        description="Kubernetes only (required there, ignored by Slurm): the container image the check Job "
        "runs command in, on the node, with every GPU the node has. Without it a Kubernetes check cannot run "
        "and the round ends inconclusive (the node stays out of service).",
    )
    output_dir: Annotated[str, Field(pattern=_PATH, max_length=1024)] = Field(
        description="Absolute directory for the check's output (and its working directory): storage both the "
        "node and Trainguard can read at this same path (a shared file system). Kubernetes: only the check "
        "container's working directory; the evidence is the pod's log. The output's tail is the "
        "evidence of a failure; when it cannot be read, the verdict still stands on the exit code.",
    )

    @field_validator("command")
    @classmethod
    def _absolute(cls, command: list[str]) -> list[str]:
        if not command[0].startswith("/"):
            raise ValueError(f"the check's first word must be an absolute path to a script, not {command[0]!r}")
        if any("\x00" in word or "\n" in word for word in command):
            raise ValueError("a word of the check contains a NUL or a newline")
        return command

    @field_validator("timeout")
    @classmethod
    def _at_least_a_minute(cls, timeout: float) -> float:
        if timeout < 60:
            raise ValueError("the check's timeout must be at least 1m (Slurm's time limits are in minutes)")
        return timeout
