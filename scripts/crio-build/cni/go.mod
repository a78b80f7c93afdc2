// The CNI loopback plugin that scripts/crio-build.sh builds beside CRI-O (CRI-O wants a network
// configuration even for host-network pods): this module only pins it.
module devinject.test/cni-build

go 1.24.2

require github.com/containernetworking/plugins v1.9.1
