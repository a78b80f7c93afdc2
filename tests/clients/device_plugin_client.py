"""A device plugin client on gRPC C-core (Python grpcio from PyPI), not on our HTTP/2 stack.

grpcio sends the Unix socket's path as the HTTP/2 :authority by default, as kubelets before
1.26 and grpc-java do. Usage: device_plugin_client.py PROTO SOCKET
Prints one JSON line: the devices of the first ListAndWatch answer, and the env of an Allocate
for the first of them. Exits non-zero with the gRPC error otherwise.
"""

import json
import os
import sys
import tempfile

import grpc
from grpc_tools import protoc


def main() -> int:
    proto, socket = sys.argv[1], sys.argv[2]
    out = tempfile.mkdtemp(prefix="devinject-stubs-")
    include = os.path.join(os.path.dirname(protoc.__file__), "_proto")
    code = protoc.main([
        "protoc",
        f"-I{os.path.dirname(proto)}",
        f"-I{include}",
        f"--python_out={out}",
        f"--grpc_python_out={out}",
        proto,
    ])
    if code != 0:
        print(f"protoc failed: {code}", file=sys.stderr)
        return 2
    sys.path.insert(0, out)
    name = os.path.splitext(os.path.basename(proto))[0]
    pb = __import__(f"{name}_pb2")
    rpc = __import__(f"{name}_pb2_grpc")
    with grpc.insecure_channel(f"unix://{socket}") as channel:
        stub = rpc.DevicePluginStub(channel)
        stream = stub.ListAndWatch(pb.Empty(), timeout=20)
        first = next(stream)
        ids = [d.ID for d in first.devices]
        request = pb.AllocateRequest(
            container_requests=[pb.ContainerAllocateRequest(devices_ids=ids[:1])]
        )
        # With ListAndWatch still open, as a kubelet keeps it: the plugin takes the end of that
        # stream for the kubelet's going and registers again on a new socket.
        answer = stub.Allocate(request, timeout=20)
        stream.cancel()
    envs = dict(answer.container_responses[0].envs)
    print(json.dumps({"devices": ids, "envs": envs}))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except grpc.RpcError as e:
        print(f"gRPC error: {e.code()}: {e.details()}", file=sys.stderr)
        sys.exit(1)
