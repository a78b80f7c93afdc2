"""Writes a multi-platform image as an OCI image layout archive (the `oci-archive:` of skopeo and
podman, what `ctr images import` and `docker load` read): an image index with one manifest per
platform, each of one layer, the platform's staged tree, named REF in the layout's index.json.

    python3 scripts/lib/oci-image.py OUT.tar DOCKERFILE REF PLATFORM=STAGE_DIR...

The image's configuration (the entrypoint and the labels) is read from DOCKERFILE, the file
`docker build` builds the single-platform image from, so both say the same. The layers are
reproducible: entries sorted, owned by 0:0, time 0, gzip without a name or time. REF (e.g.
`devinject:1.2.0`) is the image's `org.opencontainers.image.ref.name`.

Spec: https://github.com/opencontainers/image-spec (image-layout.md, image-index.md).
"""

import gzip
import hashlib
import io
import json
import os
import re
import sys
import tarfile
import tempfile

MEDIA = {
    "index": "application/vnd.oci.image.index.v1+json",
    "manifest": "application/vnd.oci.image.manifest.v1+json",
    "config": "application/vnd.oci.image.config.v1+json",
    "layer": "application/vnd.oci.image.layer.v1.tar+gzip",
}


def dockerfile_config(path):
    """The ENTRYPOINT (exec form) and the LABELs of a Dockerfile."""
    text = re.sub(r"\\\n", " ", open(path).read())
    entrypoint, labels = None, {}
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("ENTRYPOINT "):
            entrypoint = json.loads(line[len("ENTRYPOINT "):])
        elif line.startswith("LABEL "):
            for key, value in re.findall(r'([\w.\-]+)="((?:[^"\\]|\\.)*)"', line):
                labels[key] = value
    if entrypoint is None:
        sys.exit(f"oci-image: {path} has no ENTRYPOINT in exec form")
    return entrypoint, labels


def layer(stage):
    """The layer of the tree at `stage`: (uncompressed tar, gzip)."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        paths = []
        for root, dirs, files in os.walk(stage):
            dirs.sort()
            for name in sorted(dirs + files):
                paths.append(os.path.join(root, name))
        for full in sorted(paths, key=lambda p: os.path.relpath(p, stage)):
            info = tar.gettarinfo(full, arcname=os.path.relpath(full, stage))
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mtime = 0
            if info.isreg():
                with open(full, "rb") as f:
                    tar.addfile(info, f)
            else:
                tar.addfile(info)
    data = raw.getvalue()
    packed = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=packed, mtime=0) as gz:
        gz.write(data)
    return data, packed.getvalue()


def main():
    if len(sys.argv) < 5:
        sys.exit(__doc__)
    out, dockerfile, ref = sys.argv[1:4]
    entrypoint, labels = dockerfile_config(dockerfile)
    with tempfile.TemporaryDirectory() as work:
        blobs = os.path.join(work, "blobs", "sha256")
        os.makedirs(blobs)

        def blob(data, media):
            digest = hashlib.sha256(data).hexdigest()
            with open(os.path.join(blobs, digest), "wb") as f:
                f.write(data)
            return {"mediaType": media, "digest": "sha256:" + digest, "size": len(data)}

        manifests = []
        for spec in sys.argv[4:]:
            platform, _, stage = spec.partition("=")
            os_name, _, arch = platform.partition("/")
            if os_name != "linux" or not arch or not os.path.isdir(stage):
                sys.exit(f"oci-image: {spec!r} is not linux/ARCH=STAGE_DIR")
            tar, packed = layer(stage)
            config = {
                "architecture": arch,
                "os": os_name,
                "config": {"Entrypoint": entrypoint, "Labels": labels},
                "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(tar).hexdigest()]},
            }
            manifest = {
                "schemaVersion": 2,
                "mediaType": MEDIA["manifest"],
                "config": blob(json.dumps(config, sort_keys=True).encode(), MEDIA["config"]),
                "layers": [blob(packed, MEDIA["layer"])],
            }
            entry = blob(json.dumps(manifest, sort_keys=True).encode(), MEDIA["manifest"])
            entry["platform"] = {"architecture": arch, "os": os_name}
            manifests.append(entry)
        # The image is an index of the platforms' manifests; the layout's own index.json names
        # it by REF, as `docker buildx build --output type=oci` and skopeo lay a multi-platform
        # image out.
        image = {"schemaVersion": 2, "mediaType": MEDIA["index"], "manifests": manifests}
        entry = blob(json.dumps(image, sort_keys=True).encode(), MEDIA["index"])
        entry["annotations"] = {"org.opencontainers.image.ref.name": ref}
        layout = {"schemaVersion": 2, "mediaType": MEDIA["index"], "manifests": [entry]}
        with open(os.path.join(work, "index.json"), "w") as f:
            json.dump(layout, f, sort_keys=True)
        with open(os.path.join(work, "oci-layout"), "w") as f:
            json.dump({"imageLayoutVersion": "1.0.0"}, f)
        with tarfile.open(out + ".part", "w", format=tarfile.PAX_FORMAT) as archive:
            for name in ["oci-layout", "index.json", "blobs"]:
                archive.add(os.path.join(work, name), arcname=name)
        os.replace(out + ".part", out)


main()
