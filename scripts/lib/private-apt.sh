# shellcheck shell=bash
# A private apt configuration, sourced by the scripts that fetch packages the tests run but the
# machine must not have installed (scripts/kube-build.sh, scripts/runtimes-fetch.sh,
# scripts/vendor-stacks-fetch.sh).
#
#   private_apt DIR TYPES [SUITE [COMPONENTS]]
#
# makes DIR/apt.conf with its own lists, cache, state and (empty) configuration parts, whose
# sources are this machine's own (same mirrors, components and keys, from its deb822 and
# one-line sources) for this release's suites, as TYPES ("deb" or "deb deb-src"); with SUITE,
# only the release's main suite, renamed SUITE (e.g. trixie, sid: no -updates or -security,
# whose names differ between suites; "" keeps the release's suites). COMPONENTS (e.g.
# "contrib non-free") are added to each source's own components. Exports APT_CONFIG and runs
# `apt-get update`. The machine's sources, lists and package state are never touched, and no
# mirror's host is written anywhere but DIR.
private_apt() {
  local dir=$1 types=$2 suite=${3:-} components=${4:-}
  mkdir -p "$dir"/{lists/partial,cache/archives/partial,parts,sources.d,state}
  python3 - "$dir/sources.d/machine.sources" "$types" "$suite" "$components" <<'PY'
import glob, re, sys
out, types, suite, extra = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4].split()
codename = dict(l.strip().split("=", 1) for l in open("/etc/os-release") if "=" in l)["VERSION_CODENAME"].strip('"')

def wanted(s):
    return s == codename if suite else s.split("-")[0] == codename

def components(c):
    return c + "".join(" " + e for e in extra if e not in c.split())

stanzas = []
for path in sorted(glob.glob("/etc/apt/sources.list.d/*.sources")):
    for block in re.split(r"\n\s*\n", open(path).read()):
        fields = {}
        for line in block.splitlines():
            if line.startswith("#") or ":" not in line or line[0].isspace():
                continue
            k, v = line.split(":", 1)
            fields[k.strip()] = v.strip()
        if fields.get("Enabled", "yes") == "no" or "URIs" not in fields:
            continue
        suites = [s for s in fields.get("Suites", "").split() if wanted(s)]
        if suites:
            fields["Suites"] = suite or " ".join(suites)
            fields["Types"] = types
            if "Components" in fields:
                fields["Components"] = components(fields["Components"])
            stanzas.append(fields)
for path in ["/etc/apt/sources.list"] + sorted(glob.glob("/etc/apt/sources.list.d/*.list")):
    try:
        lines = open(path).read().splitlines()
    except FileNotFoundError:
        continue
    for line in lines:
        m = re.match(r"^deb\s+(\[[^]]*\]\s+)?(\S+)\s+(\S+)\s+(.+)$", line.strip())
        if m and wanted(m.group(3)):
            opts = dict(o.split("=", 1) for o in (m.group(1) or "").strip("[] \n").split() if "=" in o)
            f = {"Types": types, "URIs": m.group(2), "Suites": suite or m.group(3), "Components": components(m.group(4))}
            if "signed-by" in opts:
                f["Signed-By"] = opts["signed-by"]
            stanzas.append(f)
if not stanzas:
    sys.exit("private-apt: no apt source for this release (%s) in /etc/apt" % codename)
with open(out, "w") as f:
    f.write("\n\n".join("\n".join(f"{k}: {v}" for k, v in s.items()) for s in stanzas) + "\n")
PY
  cat >"$dir/apt.conf" <<CONF
Dir::State "$dir/state";
Dir::State::Lists "$dir/lists";
Dir::State::status "/var/lib/dpkg/status";
Dir::Cache "$dir/cache";
Dir::Etc::SourceList "/dev/null";
Dir::Etc::SourceParts "$dir/sources.d";
Dir::Etc::Parts "$dir/parts";
Acquire::Check-Valid-Until "false";
CONF
  export APT_CONFIG=$dir/apt.conf
  apt-get -qq -o APT::Sandbox::User=root update
}

#   debian_orig DIR SUITE PACKAGE ORIG SHA256 TO
#
# fetches ORIG, the orig tarball of Debian's source package PACKAGE in SUITE, into TO/ORIG
# through a private deb-src configuration in DIR (above), and checks its SHA-256; on a miss it
# calls the caller's `fail` with the reason (the suite moved on, the download failed or differs).
debian_orig() {
  local dir=$1 suite=$2 package=$3 orig=$4 sha256=$5 to=$6 uri
  private_apt "$dir" deb-src "$suite" >/dev/null
  # The tarball's address in the source package's pool, on this machine's own mirror.
  uri=$(apt-get -qq source --print-uris "$package" 2>/dev/null | awk -v f="$orig" '$2 == f { gsub("\047", "", $1); print $1 }')
  [ -n "$uri" ] || fail "the source package $package of $suite has no $orig (its version moved on: change version and orig_sha256 together)"
  /usr/lib/apt/apt-helper -qq -o APT::Sandbox::User=root download-file "$uri" "$to/$orig" "SHA256:$sha256" >&2 ||
    fail "fetching $uri failed, or its SHA-256 is not $sha256"
}
