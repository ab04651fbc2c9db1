"""Build a one-layer OCI image archive from files of this host (hack/lib/real-node.sh): the pause
image and the small workload image of the real node, imported with `ctr images import` because
there is no registry here.

Usage: python3 oci.py OUT.tar NAME CONFIG_JSON SRC:DEST[:MODE]... [LINK=TARGET]...
CONFIG_JSON is the image config's "config" object (Entrypoint, Cmd, User, Env, WorkingDir).
"""

import hashlib
import io
import json
import sys
import tarfile


def add_dir(tar: tarfile.TarFile, path: str, seen: set[str]) -> None:
    parts = path.strip("/").split("/")[:-1]
    for i in range(1, len(parts) + 1):
        d = "/".join(parts[:i])
        if d not in seen:
            seen.add(d)
            info = tarfile.TarInfo(d)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)


def layer(entries: list[str]) -> bytes:
    buf = io.BytesIO()
    seen: set[str] = set()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for dest in ("tmp/", "etc/", "proc/", "sys/", "dev/"):
            add_dir(tar, dest + "x", seen)
        for entry in entries:
            if "=" in entry:
                link, target = entry.split("=", 1)
                add_dir(tar, link, seen)
                info = tarfile.TarInfo(link.strip("/"))
                info.type, info.linkname, info.mode = tarfile.SYMTYPE, target, 0o777
                tar.addfile(info)
                continue
            src, dest, *mode = entry.split(":")
            add_dir(tar, dest, seen)
            with open(src, "rb") as f:
                data = f.read()
            info = tarfile.TarInfo(dest.strip("/"))
            info.size, info.mode = len(data), int(mode[0], 8) if mode else 0o755
            tar.addfile(info, io.BytesIO(data))
        passwd = b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"
        for name, data in (("etc/passwd", passwd), ("etc/group", b"root:x:0:\nnogroup:x:65534:\n")):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def main(out: str, name: str, config: str, entries: list[str]) -> None:
    blobs: dict[str, bytes] = {}

    def blob(data: bytes, media: str) -> dict[str, object]:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        blobs[digest] = data
        return {"mediaType": media, "digest": digest, "size": len(data)}

    tar_layer = layer(entries)
    diff_id = "sha256:" + hashlib.sha256(tar_layer).hexdigest()
    image_config = {"architecture": "amd64", "os": "linux", "config": json.loads(config),
                    "rootfs": {"type": "layers", "diff_ids": [diff_id]}}
    manifest = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "config": blob(json.dumps(image_config).encode(), "application/vnd.oci.image.config.v1+json"),
                "layers": [blob(tar_layer, "application/vnd.oci.image.layer.v1.tar")]}
    desc = blob(json.dumps(manifest).encode(), "application/vnd.oci.image.manifest.v1+json")
    desc["annotations"] = {"io.containerd.image.name": name, "org.opencontainers.image.ref.name": name}
    index = {"schemaVersion": 2, "manifests": [desc]}
    with tarfile.open(out, "w") as tar:
        for path, data in [("oci-layout", b'{"imageLayoutVersion":"1.0.0"}'), ("index.json", json.dumps(index).encode()),
                           *((f"blobs/sha256/{d.split(':')[1]}", b) for d, b in blobs.items())]:
            info = tarfile.TarInfo(path)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:])
