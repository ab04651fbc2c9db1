"""slurmrestd 26.05 writes a second answer after an error answer on a closed connection; the first one counts.

The messages below are the text aiohttp gives its protocol error for the bytes slurmrestd 26.05.5 sent
(read from a live 26.05 cluster: ``hack/slurm-root.sh build 26.05``); the live path is covered by
``tests/integration/schedulers/test_slurm_rest_errors.py`` on that root.
"""

from __future__ import annotations

import aiohttp
import pytest

from trainguard.schedulers import slurm_rest

pytestmark = pytest.mark.unit

BODY = b'{\n  "errors": [\n    {\n      "error_number": 2017,\n      "error": "Invalid job id specified"\n    }\n  ]\n}'


def protocol_error(excess: bytes) -> aiohttp.ClientResponseError:
    """aiohttp's error for data after a ``Connection: close`` answer: the bytes it read, then a caret line."""
    message = f"Data after `Connection: close`:\n\n  {excess!r}\n{' ' * 20}^"
    return aiohttp.ClientResponseError(None, (), status=400, message=message)  # type: ignore[arg-type]


def test_the_first_answer_is_read_with_the_second_ones_status() -> None:
    got = slurm_rest._answer_before_close(protocol_error(BODY + b"HTTP/1.1 404 NOT FOUND"))
    assert got == (404, BODY.decode())


def test_a_rejected_token_keeps_its_status() -> None:
    got = slurm_rest._answer_before_close(protocol_error(BODY + b"HTTP/1.1 511 Network Authentication Required"))
    assert got is not None and got[0] in slurm_rest.TOKEN_REJECTED


@pytest.mark.parametrize("message", ["Bad status line", "Data after `Connection: close`:\n\n  b'no second answer'\n ^"])
def test_other_protocol_errors_stay_failures(message: str) -> None:
    error = aiohttp.ClientResponseError(None, (), status=400, message=message)  # type: ignore[arg-type]
    assert slurm_rest._answer_before_close(error) is None
