// The crictl that scripts/crio-build.sh builds beside CRI-O: this module only pins it.
module devinject.test/crictl-build

go 1.26.2

require sigs.k8s.io/cri-tools v1.36.0
