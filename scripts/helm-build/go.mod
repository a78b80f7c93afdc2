// The helm that scripts/helm-build.sh builds: this module only pins it (require line and go.sum).
module devinject.io/helm-build

go 1.26.0

require helm.sh/helm/v4 v4.3.1
