#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""cri_client.py — a small CRI client for the tests, as crictl would be
(Debian 12 packages no crictl): calls containerd's CRI plugin
(runtime.v1.RuntimeService, runtime.v1.ImageService) on its socket through
python3-grpcio's generic unary calls, the messages those of
cri_api.proto, compiled by protoc (--python_out) into GEN on first use.

  cri_client.py --socket SOCK --gen GEN COMMAND ARGS...

  version                 the runtime's name, version and CRI version
  pull IMAGE [USER:PASS]  PullImage, with those credentials if given (the
                          request's auth, as kubelet's image pull secrets);
                          prints the image's id (image_ref)
  images                  ListImages, as JSON
  inspecti IMAGE          ImageStatus, as JSON; exits 3 if there is none
  rmi IMAGE               RemoveImage
  runp POD.json           RunPodSandbox of that PodSandboxConfig (JSON,
                          the proto's field names); prints the pod's id
  create POD CTR.json POD.json
                          CreateContainer of that ContainerConfig in pod
                          POD (whose config POD.json was); prints its id
  start ID | stop ID [TIMEOUT] | rm ID     the container's
  stopp ID | rmp ID                        the pod's
  inspectp ID             PodSandboxStatus (verbose), as JSON: its status
                          (state: SANDBOX_..., network.ip) and its info,
                          each value (JSON of the runtime's) parsed
  inspect ID              ContainerStatus, as JSON (state: CONTAINER_...)
  ps | pods               ListContainers, ListPodSandbox, as JSON

A failed call prints `cri_client: METHOD: CODE: DETAILS` and exits 1;
every call gives up after --timeout seconds (default 60). --api v1alpha2
calls the CRI's older API (runtime.v1alpha2, which kubelets before 1.26
speak and containerd 1.6 serves beside v1) with the same messages: v1's
were made a copy of v1alpha2's, the fields used here the same numbers.
"""
import argparse, json, os, subprocess, sys

HERE = os.path.dirname(os.path.abspath(__file__))


def load(gen):
    """The compiled messages (cri_api_pb2), compiled into GEN if not yet."""
    out = os.path.join(gen, "cri_api_pb2.py")
    if not os.path.exists(out):
        os.makedirs(gen, exist_ok=True)
        subprocess.run(["protoc", "-I", HERE, "--python_out", gen,
                        os.path.join(HERE, "cri_api.proto")], check=True)
    sys.path.insert(0, gen)
    import cri_api_pb2
    return cri_api_pb2


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--socket", required=True)
    ap.add_argument("--gen", required=True)
    ap.add_argument("--timeout", type=float, default=60)
    ap.add_argument("--api", choices=("v1", "v1alpha2"), default="v1")
    ap.add_argument("command")
    ap.add_argument("args", nargs="*")
    a = ap.parse_args()

    import grpc
    from google.protobuf import json_format
    pb = load(a.gen)
    channel = grpc.insecure_channel("unix://" + a.socket)

    def call(service, name, request):
        resp = getattr(pb, name + "Response")
        rpc = channel.unary_unary(f"/runtime.{a.api}.{service}/{name}",
                                  request_serializer=type(request).SerializeToString,
                                  response_deserializer=resp.FromString)
        try:
            return rpc(request, timeout=a.timeout)
        except grpc.RpcError as e:
            print(f"cri_client: {name}: {e.code().name}: {e.details()}", file=sys.stderr)
            sys.exit(1)

    def rt(method, **kw):
        return call("RuntimeService", method, getattr(pb, method + "Request")(**kw))

    def im(method, **kw):
        return call("ImageService", method, getattr(pb, method + "Request")(**kw))

    def from_json(path, message):
        with open(path) as f:
            return json_format.Parse(f.read(), message())

    def show(msg):
        print(json.dumps(json_format.MessageToDict(msg, preserving_proto_field_name=True),
                         indent=1, sort_keys=True))

    def args(n, usage):
        if len(a.args) != n:
            print(f"cri_client: {a.command}: usage: {a.command} {usage}", file=sys.stderr)
            sys.exit(2)
        return a.args

    c = a.command
    if c == "version":
        args(0, "")
        show(rt("Version", version=a.api))
    elif c == "pull":
        if len(a.args) == 1:
            a.args.append("")
        image, creds = args(2, "IMAGE [USER:PASS]")
        auth = None
        if creds:
            user, _, password = creds.partition(":")
            auth = pb.AuthConfig(username=user, password=password)
        print(im("PullImage", image=pb.ImageSpec(image=image), auth=auth).image_ref)
    elif c == "images":
        args(0, "")
        show(im("ListImages"))
    elif c == "inspecti":
        (image,) = args(1, "IMAGE")
        r = im("ImageStatus", image=pb.ImageSpec(image=image))
        if not r.image.id:
            print(f"cri_client: inspecti: {image}: no such image", file=sys.stderr)
            sys.exit(3)
        show(r)
    elif c == "rmi":
        (image,) = args(1, "IMAGE")
        im("RemoveImage", image=pb.ImageSpec(image=image))
    elif c == "runp":
        (pod,) = args(1, "POD.json")
        print(rt("RunPodSandbox", config=from_json(pod, pb.PodSandboxConfig)).pod_sandbox_id)
    elif c == "create":
        pod_id, ctr, pod = args(3, "POD CTR.json POD.json")
        print(rt("CreateContainer", pod_sandbox_id=pod_id,
                 config=from_json(ctr, pb.ContainerConfig),
                 sandbox_config=from_json(pod, pb.PodSandboxConfig)).container_id)
    elif c == "start":
        (cid,) = args(1, "ID")
        rt("StartContainer", container_id=cid)
    elif c == "stop":
        if len(a.args) == 1:
            a.args.append("0")
        cid, t = args(2, "ID [TIMEOUT]")
        rt("StopContainer", container_id=cid, timeout=int(t))
    elif c == "rm":
        (cid,) = args(1, "ID")
        rt("RemoveContainer", container_id=cid)
    elif c == "stopp":
        (pid,) = args(1, "ID")
        rt("StopPodSandbox", pod_sandbox_id=pid)
    elif c == "rmp":
        (pid,) = args(1, "ID")
        rt("RemovePodSandbox", pod_sandbox_id=pid)
    elif c == "inspectp":
        (pid,) = args(1, "ID")
        r = rt("PodSandboxStatus", pod_sandbox_id=pid, verbose=True)
        out = json_format.MessageToDict(r.status, preserving_proto_field_name=True)
        info = {}
        for k, v in r.info.items():
            try:
                info[k] = json.loads(v)
            except ValueError:
                info[k] = v
        print(json.dumps({"status": out, "info": info}, indent=1, sort_keys=True))
    elif c == "inspect":
        (cid,) = args(1, "ID")
        show(rt("ContainerStatus", container_id=cid))
    elif c == "ps":
        args(0, "")
        show(rt("ListContainers"))
    elif c == "pods":
        args(0, "")
        show(rt("ListPodSandbox"))
    else:
        print(f"cri_client: {c}: no such command (see --help)", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
