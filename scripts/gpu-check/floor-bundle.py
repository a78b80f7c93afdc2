#!/usr/bin/env python3
"""Writes a CDI device's container edits into an OCI bundle's config.json, as static fields.

The floor of a start-cost comparison: runc given the same device nodes, mounts and environment
that the CDI spec names, with nothing run at start (the spec's hooks are left out). Device nodes
without a type or numbers take them from the host node (CDI: "deviceNodes", "mounts", "env").

    floor-bundle.py SPEC.json DEVICE CONFIG.json
"""
import json
import os
import stat
import sys


def node(edit):
    path = edit["path"]
    host = edit.get("hostPath", path)
    st = os.stat(host)
    kind = edit.get("type") or ("c" if stat.S_ISCHR(st.st_mode) else "b")
    major = edit.get("major", os.major(st.st_rdev))
    minor = edit.get("minor", os.minor(st.st_rdev))
    mode = edit.get("fileMode", stat.S_IMODE(st.st_mode))
    device = {"path": path, "type": kind, "major": major, "minor": minor, "fileMode": mode,
              "uid": edit.get("uid", 0), "gid": edit.get("gid", 0)}
    rule = {"allow": True, "type": kind, "major": major, "minor": minor,
            "access": edit.get("permissions", "rwm")}
    return device, rule


def main():
    spec_path, device, config_path = sys.argv[1:4]
    with open(spec_path) as f:
        spec = json.load(f)
    with open(config_path) as f:
        config = json.load(f)
    edits = [spec.get("containerEdits", {})]
    found = [d for d in spec.get("devices", []) if d.get("name") == device]
    if not found:
        sys.exit(f"floor-bundle: {spec_path} has no device {device!r}")
    edits.append(found[0].get("containerEdits", {}))
    linux = config.setdefault("linux", {})
    devices = linux.setdefault("devices", [])
    rules = linux.setdefault("resources", {}).setdefault("devices", [])
    env = config.setdefault("process", {}).setdefault("env", [])
    mounts = config.setdefault("mounts", [])
    for edit in edits:
        env.extend(edit.get("env", []))
        for n in edit.get("deviceNodes", []):
            d, r = node(n)
            devices.append(d)
            rules.append(r)
        for m in edit.get("mounts", []):
            mounts.append({"destination": m["containerPath"], "source": m["hostPath"],
                           "type": m.get("type", "bind"),
                           "options": m.get("options", ["ro", "nosuid", "nodev", "bind"])})
    with open(config_path, "w") as f:
        json.dump(config, f)
    print(f"floor-bundle: {len(devices)} device nodes, {len(mounts)} mounts, no hooks")


if __name__ == "__main__":
    main()
