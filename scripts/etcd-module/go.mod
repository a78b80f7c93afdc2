// The etcd that scripts/kube-module-build.sh builds beside Kubernetes 1.36 (which wants etcd
// 3.6; Debian 12's is 3.4): this module only pins it. The etcd binary is the main package of
// go.etcd.io/etcd/server/v3. go.sum holds the checksum of every module the build reads; the build
// refuses anything else (-mod=readonly). To move to a newer patch, change the version here and in
// the script, run `scripts/kube-module-build.sh --refresh-sum`, and commit both files.
module devinject.test/etcd-module

go 1.26.0

require go.etcd.io/etcd/server/v3 v3.6.16
