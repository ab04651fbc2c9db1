"""The container image built from Debian packages (``hack/build-image.sh``) runs its entrypoint.

No container runtime works on the build hosts, so the OCI image is checked the way a runtime would
start it, minus the runtime: ``umoci unpack`` (Debian's umoci) extracts its root file system, the
image config gives the entrypoint, user, environment and working directory, and the entrypoint runs
in a chroot of that root as the image's user (``chroot --userspec``, in fresh mount and PID
namespaces with their own /proc). Needs root; ``TG_SKIP_IMAGE=1`` skips. The build is cached
(``~/.cache/trainguard/image``): cold it takes minutes (debootstrap), warm seconds.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

import trainguard

pytestmark = [pytest.mark.integration, pytest.mark.image, pytest.mark.timeout(3600)]

REPO_ROOT = Path(__file__).resolve().parents[3]
SCRIPT = REPO_ROOT / "hack" / "build-image.sh"
COMPILERS = ("gcc", "cc", "c++", "g++", "clang", "x86_64-linux-gnu-gcc-12", "as", "ld")


@dataclasses.dataclass(frozen=True)
class Image:
    rootfs: Path
    config: dict[str, object]
    """The OCI image config's ``config`` object (Entrypoint, Cmd, User, Env, WorkingDir)."""

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        """The entrypoint with ``args`` as the image's user, in a chroot of its root."""
        entrypoint = [str(a) for a in self.config["Entrypoint"]]  # type: ignore[attr-defined]
        env = [str(e) for e in self.config.get("Env") or []]  # type: ignore[attr-defined]
        return subprocess.run(
            ["unshare", "--mount", "--pid", "--fork", f"--mount-proc={self.rootfs / 'proc'}",
             "chroot", f"--userspec={self.config['User']}", str(self.rootfs),
             "/usr/bin/env", "-i", "-C", str(self.config.get("WorkingDir") or "/"), *env, *entrypoint, *args],
            capture_output=True, text=True, timeout=300, check=False, stdin=subprocess.DEVNULL,
        )


def _blob(layout: Path, digest: str) -> dict[str, object]:
    algorithm, value = digest.split(":", 1)
    loaded: dict[str, object] = json.loads((layout / "blobs" / algorithm / value).read_text())
    return loaded


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Image]:
    if os.environ.get("TG_SKIP_IMAGE") == "1":
        pytest.skip("TG_SKIP_IMAGE=1")
    if os.geteuid() != 0:
        pytest.skip("building and entering the image root needs root (debootstrap, chroot)")
    built = subprocess.run([str(SCRIPT), "build"], capture_output=True, text=True, timeout=3600, check=False,
                           stdin=subprocess.DEVNULL)
    assert built.returncode == 0, built.stderr[-4000:]
    reference = built.stdout.strip().splitlines()[-1]
    layout, tag = reference.rsplit(":", 1)
    index = json.loads((Path(layout) / "index.json").read_text())
    manifests = [m for m in index["manifests"]
                 if (m.get("annotations") or {}).get("org.opencontainers.image.ref.name") == tag]
    assert len(manifests) == 1, index
    manifest = _blob(Path(layout), manifests[0]["digest"])
    config = _blob(Path(layout), manifest["config"]["digest"])  # type: ignore[index]
    bundle = tmp_path_factory.mktemp("image") / "bundle"
    unpacked = subprocess.run(["umoci", "unpack", "--image", reference, str(bundle)], capture_output=True,
                              text=True, timeout=600, check=False)
    assert unpacked.returncode == 0, unpacked.stderr
    yield Image(bundle / "rootfs", config["config"])  # type: ignore[arg-type]
    subprocess.run(["rm", "-rf", "--one-file-system", str(bundle)], check=False)


def test_entrypoint_prints_the_version_as_the_non_root_user(image: Image) -> None:
    user = str(image.config["User"])
    uid = int(user.split(":", maxsplit=1)[0])
    assert uid != 0
    assert f"trainguard:x:{uid}:" in (image.rootfs / "etc" / "passwd").read_text()
    done = image.run("--version")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"trainguard {trainguard.__version__}"


def test_entrypoint_runs_operator_help(image: Image) -> None:
    done = image.run("operator", "--help")
    assert done.returncode == 0, done.stderr
    assert "--scheduler" in done.stdout and "--namespace" in done.stdout
    assert image.config["Cmd"] == ["operator"]


def test_final_image_has_no_compiler_and_no_test_only_dependencies(image: Image) -> None:
    present = [name for name in COMPILERS
               for directory in ("usr/bin", "usr/local/bin") if (image.rootfs / directory / name).exists()]
    assert present == [], f"compilers/binutils in the image: {present}"
    site = next((image.rootfs / "opt" / "trainguard" / "lib").glob("python3*/site-packages"))
    installed = {p.name.split("-")[0].lower() for p in site.glob("*.dist-info")}
    assert {"trainguard", "kopf", "aiohttp", "sqlalchemy", "aiomysql"} <= installed, installed
    assert not installed & {"torch", "pytest", "numpy", "playwright"}, installed & {"torch", "pytest", "numpy"}
