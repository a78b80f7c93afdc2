// The runc that scripts/runc-build.sh builds: this module only pins it. Its go.sum holds the
// checksums of runc's module and of every module it is built from; the build refuses anything
// else (GOFLAGS=-mod=readonly). To move to a newer runc, change the version here and in the
// script, run `go mod download github.com/opencontainers/runc@NEW` and
// `GOFLAGS=-mod=mod go build -tags "seccomp urfave_cli_no_docs" -o /dev/null github.com/opencontainers/runc`
// in this directory, and commit both files.
module devinject.test/runc-build

go 1.24.0

require github.com/opencontainers/runc v1.4.3
