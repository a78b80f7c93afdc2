# What the image ships, one list for scripts/build-image.sh and scripts/arm64-check.sh: the
# packages to build and the binaries to take from them. Sourced, not run.
#
# devinject-podresources asks the kubelet what a container was granted, as the request policy
# does in-process, for checking by hand; it is installed next to the hook and the shim.
# devinject-nri is the NRI plugin the nri overlay runs in the pod (deploy/overlays/nri).
# devinject-webhook is the admission webhook of deploy/overlays/webhook.
# devinject-dra is the DRA driver the dra overlay runs in the pod (deploy/overlays/dra).
# devinject-device-plugin is the kubelet device plugin of deploy/base.
# shellcheck disable=SC2034 # used by the scripts that source this file
packages=(-p devinject-installer -p devinject-oci -p devinject-podresources -p devinject-ctl
  -p devinject-nri -p devinject-webhook -p devinject-dra -p devinject-device-plugin)
# shellcheck disable=SC2034
bins=(devinject-installer devinject-hook devinject-podresources devinject-runtime devinject-ctl devinject-nri
  devinject-webhook devinject-dra devinject-device-plugin)
