"""A gate in front of the operator's cordon write: a validating admission webhook of the real
kube-apiserver (as the scontrol gate of ``tests/e2e/adversarial/test_leadership_handover.py`` is in
front of Slurm).

The webhook matches only an update of a Node by the operator's ServiceAccount whose new object carries
Slinky's cordon-reason annotation (our cordon; the uncordon removes it), plus a probe annotation that
shows the webhook is in force. While ``holding``, the write waits in the apiserver until the test
lets it go (refused: the writer was killed meanwhile); afterwards every matched write is admitted and
counted. The server is HTTPS on 127.0.0.1 with a CA of its own (the apiserver calls webhooks over TLS).
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import json
import secrets
import ssl
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from ipaddress import IPv4Address
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.support import slinky as sl
from trainguard.k8s import slinky

PROBE_ANNOTATION = "e2e.trainguard.dev/gate-probe"
HOLD_S = 25.0
"""Longest a write is held (below the webhook's 30 s timeout, after which the apiserver fails it)."""


def _certificates(directory: Path) -> tuple[bytes, Path, Path]:
    """A CA (its PEM) and a server certificate for IP 127.0.0.1 signed by it (files for ``ssl``)."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "trainguard e2e gate CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
          .not_valid_after(now + datetime.timedelta(hours=2))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .sign(ca_key, hashes.SHA256()))
    cert = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(hours=2))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(IPv4Address("127.0.0.1"))]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    cert_path, key_path = directory / "gate.crt", directory / "gate.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return ca.public_bytes(serialization.Encoding.PEM), cert_path, key_path


class CordonGate:
    """The webhook server and what it saw: ``held`` (writes held, then refused) and ``admitted``."""

    def __init__(self, directory: Path, user: str) -> None:
        self.user = user
        self.name = f"tg-e2e-cordon-gate-{secrets.token_hex(3)}"
        self.reached = threading.Event()
        """A cordon write of the operator is held in the apiserver."""
        self._release = threading.Event()
        self.holding = True
        self.held: list[str] = []
        self.admitted: list[str] = []
        self.probes = 0
        self._lock = threading.Lock()
        ca, cert, key = _certificates(directory)
        self.ca_bundle = base64.b64encode(ca).decode()
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
        self._thread = threading.Thread(target=self._server.serve_forever, name="cordon-gate", daemon=True)

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self._server.server_address[1]}/validate"

    def configuration(self) -> str:
        """The ValidatingWebhookConfiguration (JSON) that sends the matched writes here."""
        annotation = slinky.CORDON_REASON_ANNOTATION
        ours = (f"request.userInfo.username == '{self.user}' && has(object.metadata.annotations) && "
                f"'{annotation}' in object.metadata.annotations")
        probe = f"has(object.metadata.annotations) && '{PROBE_ANNOTATION}' in object.metadata.annotations"
        return json.dumps({
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": self.name},
            "webhooks": [{
                "name": "cordon-gate.e2e.trainguard.dev",
                "clientConfig": {"url": self.url, "caBundle": self.ca_bundle},
                "rules": [{"operations": ["UPDATE"], "apiGroups": [""], "apiVersions": ["v1"],
                           "resources": ["nodes"], "scope": "Cluster"}],
                "matchConditions": [{"name": "our-cordon-or-the-probe", "expression": f"({ours}) || ({probe})"}],
                "failurePolicy": "Fail", "sideEffects": "None", "admissionReviewVersions": ["v1"],
                "timeoutSeconds": 30,
            }],
        })

    def release(self) -> None:
        """Let the held write go (refused) and admit every later one."""
        self.holding = False
        self._release.set()

    def _decide(self, review: dict[str, Any]) -> tuple[bool, str]:
        request = review["request"]
        annotations = (request.get("object") or {}).get("metadata", {}).get("annotations") or {}
        node = str(request.get("name"))
        if PROBE_ANNOTATION in annotations and slinky.CORDON_REASON_ANNOTATION not in annotations:
            with self._lock:
                self.probes += 1
            return True, ""
        with self._lock:
            hold = self.holding
            (self.held if hold else self.admitted).append(node)
        if not hold:
            return True, ""
        self.reached.set()
        self._release.wait(HOLD_S)
        return False, "e2e gate: the writer was killed while this write was held"

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        gate = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                allowed, message = gate._decide(review)
                answer: dict[str, Any] = {"uid": review["request"]["uid"], "allowed": allowed}
                if message:
                    answer["status"] = {"code": 403, "message": message}
                body = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                                   "response": answer}).encode()
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except OSError:  # the apiserver gave up on the call (its client went away)
                    pass

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler

    def __enter__(self) -> CordonGate:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
        self._server.shutdown()
        self._server.server_close()


@contextlib.contextmanager
def installed(cluster: sl.SlinkyCluster, gate: CordonGate, probe_node: str) -> Iterator[None]:
    """The gate's configuration applied and in force (a probe write on ``probe_node`` went through it:
    the apiserver loads a webhook configuration a moment after it is written); removed on exit."""
    cluster.kubectl("apply", "-f", "-", input=gate.configuration())
    try:
        attempt = 0
        while gate.probes == 0:
            attempt += 1
            assert attempt <= 240, "the admission gate never saw a probe write"
            cluster.kubectl("annotate", "--overwrite", "node", probe_node, f"{PROBE_ANNOTATION}={attempt}")
            if gate.probes == 0:
                threading.Event().wait(0.5)
        cluster.kubectl("annotate", "node", probe_node, f"{PROBE_ANNOTATION}-")
        yield
    finally:
        cluster.kubectl("delete", "validatingwebhookconfiguration", gate.name, "--ignore-not-found")
