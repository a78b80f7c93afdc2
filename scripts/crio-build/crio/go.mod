// The CRI-O that scripts/crio-build.sh builds: this module only pins it (and, through the module,
// the pinns sources it compiles). go.sum holds the checksum of every module the build reads; the
// build refuses anything else (-mod=readonly). To move to a newer patch, change the version here
// and in the script, run `scripts/crio-build.sh --refresh-sum`, and commit both files.
module devinject.test/crio-build

go 1.26.3

require github.com/cri-o/cri-o v1.36.3
