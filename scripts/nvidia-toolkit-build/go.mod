// The NVIDIA Container Toolkit that scripts/nvidia-toolkit-build.sh builds (nvidia-container-runtime,
// nvidia-ctk, nvidia-cdi-hook, nvidia-container-runtime-hook), to compare devinject against: this
// module only pins it. Its go.sum holds the checksums of the toolkit's module and of every module
// those commands are built from; the build refuses anything else (GOFLAGS=-mod=readonly). To move
// to a newer toolkit, change the version here and in the script, run
// `scripts/nvidia-toolkit-build.sh --refresh-sum`, and commit both files.
module devinject.test/nvidia-toolkit-build

go 1.26.0

require github.com/NVIDIA/nvidia-container-toolkit v1.20.2
