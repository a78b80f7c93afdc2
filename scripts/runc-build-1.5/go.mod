// runc 1.5, which `scripts/runc-build.sh --release 1.5` builds: this module only pins it, as
// ../runc-build/go.mod pins 1.4. To move to a newer 1.5, change the version here and in the
// script and run `scripts/runc-build.sh --release 1.5 --refresh-sum`; commit both files.
module devinject.test/runc-build

go 1.25.0

require github.com/opencontainers/runc v1.5.3
