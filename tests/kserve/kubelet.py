"""The `sluice` binary run exactly as a kubelet would run KServe's `sluice` runtime.

Run by tests/tests/kserve_pod.rs. Reads the ClusterServingRuntime manifest
(deploy/kserve/clusterservingruntime.yaml), takes its `kserve-container`: command, args
and env with `{{.Name}}` substituted, secretKeyRef values resolved to generated test
values, the volume mounts mapped to temporary directories (emptyDir: writable by the
container's user; Secret: one file per key in the kubelet's atomic-writer layout;
/mnt/models: the storage initializer's read-only model directory) and the ports mapped
to free ones (PORT set as Knative sets it); on a machine without a CUDA driver a
`--device=cuda` runs as `--device=cpu` (the CPU stands in for the GPU node). Nothing
else of the command line changes.

The model directory is produced by KServe's own storage code (`kserve_storage.Storage`)
from a bundle made by `sluice bundle`: a `file://` directory (symlinks, as the storage
initializer makes them) or an archive (`.tar.gz`, `.zip`) served over loopback HTTP.
As root, sluice runs as the container's securityContext user (runAsUser/runAsGroup, else
65534) so that the read-only model directory really is read-only; every path, size, mode,
mtime and content under it is compared before and after.

Then, as the kubelet and the clients of a Service would: the startup probe until it
passes, readiness until ready, an `echo` invocation over REST (tritonclient.http) and
over gRPC on the same HTTP port (tritonclient.grpc), `/metrics` without a key on the
Prometheus annotation's port, load from a few clients, SIGTERM, readiness polled at the
manifest's period; when it has failed failureThreshold times (the endpoint would be
removed) the load stops. Asserted: no failed request, readiness 503 before the exit,
exit status 0 before the pod's grace period ends (where the kubelet would SIGKILL).

Scenarios (argument): `file`, `tar.gz`, `zip` (model directory present at start) and
`async` (`MODEL_INIT_MODE=async`, the model directory absent at start: live 200, ready
503, then the download lands and the model serves). Prints `ok: ...` per check and
`all checks passed` at the end; any failure raises.
"""

import argparse
import ctypes
import hashlib
import http.server
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import urllib.error
import urllib.request
import zipfile
from functools import partial

import numpy as np
import tritonclient.grpc as tgrpc
import tritonclient.http as thttp
import yaml
from kserve_storage import Storage

CONTAINER = "kserve-container"
# Where KServe's storage initializer puts the model for the serving container.
MODEL_MOUNT = "/mnt/models"
ISVC_NAME = "echo"
NAMESPACE = "e2e"
TENANT = "acme"
OTHER_TENANT = "other"
UNPRIVILEGED = 65534
# What a kubelet probe counts as success.
PROBE_OK = range(200, 400)
# Port-valued flags and env variables of `sluice serve` (a free port each in the test).
PORT_FLAGS = {"--http-port": "http", "--grpc-port": "grpc", "--metrics-port": "metrics"}
PORT_ENV = {"PORT": "http", "SLUICE_GRPC_PORT": "grpc", "SLUICE_METRICS_PORT": "metrics"}
DEFAULT_PORTS = {"http": 8080, "grpc": 8081}


def ok(what):
    print(f"ok: {what}", flush=True)


def check(condition, what):
    if not condition:
        raise AssertionError(what)
    ok(what)


def cuda_driver():
    """Whether this machine has a CUDA driver (the node of a GPU pod has one)."""
    try:
        ctypes.CDLL("libcuda.so.1")
        return True
    except OSError:
        return False


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------------------------------
# The manifest


def load_runtime(path):
    """The manifest's spec (the ClusterServingRuntime named `sluice`) and its container."""
    with open(path) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    runtimes = [d for d in docs if d.get("kind") == "ClusterServingRuntime" and d["metadata"]["name"] == "sluice"]
    assert len(runtimes) == 1, f"{path}: expected one ClusterServingRuntime `sluice`, found {len(runtimes)}"
    spec = runtimes[0]["spec"]
    containers = [c for c in spec["containers"] if c["name"] == CONTAINER]
    assert len(containers) == 1, f"{path}: no container named {CONTAINER}"
    return spec, containers[0]


def template(value):
    """KServe's substitution of the runtime's template fields."""
    out = value.replace("{{.Name}}", ISVC_NAME).replace("{{.Namespace}}", NAMESPACE)
    assert "{{" not in out, f"an unsupported template field in {value!r}"
    return out


def split_flag(arg):
    """`--flag=value` -> (`--flag`, value); anything else -> (arg, None)."""
    if arg.startswith("--") and "=" in arg:
        flag, value = arg.split("=", 1)
        return flag, value
    return arg, None


def flag_values(args, names):
    """The values of `--name=value` and `--name value` arguments for names in `names`."""
    out = []
    for i, arg in enumerate(args):
        flag, value = split_flag(arg)
        if flag in names:
            out.append(value if value is not None else args[i + 1])
    return out


def rewrite_args(args, fn):
    """`args` with each flag's value replaced by fn(flag, value) (both spellings)."""
    out = list(args)
    i = 0
    while i < len(out):
        flag, value = split_flag(out[i])
        if value is not None:
            out[i] = f"{flag}={fn(flag, value)}"
        elif flag.startswith("--") and i + 1 < len(out) and not out[i + 1].startswith("--"):
            out[i + 1] = fn(flag, out[i + 1])
            i += 1
        i += 1
    return out


class Pod:
    """The container's process as a kubelet starts it, on temporary directories."""

    def __init__(self, manifest, sluice, root, init_mode=None):
        self.spec, self.container = load_runtime(manifest)
        self.root = root
        self.keys = {TENANT: secrets.token_urlsafe(32), OTHER_TENANT: secrets.token_urlsafe(32)}
        self.secret_values = {}
        self.ports = {}
        self.mounts = {}
        self.volumes = {v["name"]: v for v in self.spec.get("volumes", [])}
        self.proc = None
        self.log_path = os.path.join(root, "sluice.log")
        security = self.container.get("securityContext", {})
        self.uid = security.get("runAsUser", UNPRIVILEGED)
        self.gid = security.get("runAsGroup", self.uid)
        # As root, sluice runs as the container's user (chmod a-w does not stop root).
        self.unprivileged = os.geteuid() == 0
        self._map_volumes()
        self.argv, self.env = self._command(sluice, init_mode)

    # Volumes: mountPath -> a temporary directory of the volume's kind.
    def _map_volumes(self):
        for m in self.container.get("volumeMounts", []):
            volume = self.volumes.get(m["name"])
            assert volume is not None, f"volumeMount {m['name']} has no volume in the spec"
            local = os.path.join(self.root, "volumes", m["name"])
            os.makedirs(local)
            if "emptyDir" in volume:
                assert not m.get("readOnly"), f"emptyDir {m['name']} mounted read-only"
                self._own(local)
            elif "secret" in volume:
                pass  # filled by _secret_volume once we know what it is for
            else:
                raise AssertionError(f"volume {m['name']}: a kind this test does not map: {volume}")
            self.mounts[m["mountPath"].rstrip("/")] = (local, m, volume)
        # The storage initializer's volume, which KServe adds to the pod.
        self.model_dir = os.path.join(self.root, "volumes", "kserve-provision-location")
        self.mounts[MODEL_MOUNT] = (self.model_dir, {"readOnly": True}, {"emptyDir": {}})

    def _own(self, path):
        os.chmod(path, 0o755)
        if self.unprivileged:
            os.chown(path, self.uid, self.gid)

    def local_path(self, path):
        """The temporary path of a container path on a mounted volume."""
        for mount, (local, _, _) in sorted(self.mounts.items(), key=lambda kv: -len(kv[0])):
            if path == mount or path.startswith(mount + "/"):
                return local + path[len(mount) :]
        return None

    def _secret_volume(self, path, files):
        """Fills the Secret volume mounted at container path `path` as the kubelet does:
        `..<timestamp>/<key>` files, `..data` -> that directory, `<key>` -> `..data/<key>`."""
        for mount, (local, m, volume) in self.mounts.items():
            if path.rstrip("/") == mount:
                assert "secret" in volume, f"{path} is not a Secret volume: {volume}"
                break
        else:
            raise AssertionError(f"{path} is not a mounted volume")
        mode = volume["secret"].get("defaultMode", 0o644)
        stamp = "..2026_01_01_00_00_00.000000001"
        os.makedirs(os.path.join(local, stamp))
        for name, content in files.items():
            with open(os.path.join(local, stamp, name), "w") as f:
                f.write(content)
            os.chmod(os.path.join(local, stamp, name), mode)
            os.symlink(os.path.join("..data", name), os.path.join(local, name))
        os.symlink(stamp, os.path.join(local, "..data"))
        os.chmod(os.path.join(local, stamp), 0o755)
        os.chmod(local, 0o755)

    def _secret_value(self, ref):
        key = (ref["name"], ref["key"])
        if key not in self.secret_values:
            self.secret_values[key] = secrets.token_urlsafe(32)
        return self.secret_values[key]

    def _port(self, kind, manifest_value):
        if kind not in self.ports:
            self.ports[kind] = (int(manifest_value), free_port())
        assert self.ports[kind][0] == int(manifest_value), f"two {kind} ports in the manifest"
        return str(self.ports[kind][1])

    def _command(self, sluice, init_mode):
        c = self.container
        command = [template(a) for a in c.get("command", [])]
        args = [template(a) for a in c.get("args", [])]
        # The image's sluice is this build's binary (a copy the unprivileged user can run).
        binary = os.path.join(self.root, "bin", "sluice")
        os.makedirs(os.path.dirname(binary))
        shutil.copy(sluice, binary)
        os.chmod(os.path.dirname(binary), 0o755)
        os.chmod(binary, 0o755)
        if command:
            assert os.path.basename(command[0]) == "sluice", f"the command is not sluice: {command}"
            command[0] = binary
        else:
            command = [binary]

        def on_volume(what, value):
            local = self.local_path(value)
            assert local is not None, f"{what} {value} is on no volume (the root filesystem is read-only)"
            return local

        def arg_value(flag, value):
            if flag in PORT_FLAGS:
                return self._port(PORT_FLAGS[flag], value)
            if flag == "--device" and value == "cuda" and not cuda_driver():
                ok("no CUDA driver on this machine: the pod's --device=cuda runs as --device=cpu")
                return "cpu"
            if value.startswith("/"):
                return on_volume(flag, value)
            return value

        args = rewrite_args(args, arg_value)
        # What a kubelet (and Knative) put in every container's environment.
        env = {
            "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "HOSTNAME": f"{ISVC_NAME}-predictor-00001-deployment-0",
            "HOME": "/",
            "K_REVISION": f"{ISVC_NAME}-predictor-00001",
            "K_CONFIGURATION": f"{ISVC_NAME}-predictor",
            "K_SERVICE": f"{ISVC_NAME}-predictor",
        }
        for e in c.get("env", []):
            if "value" in e:
                value = template(str(e["value"]))
            elif "secretKeyRef" in e.get("valueFrom", {}):
                value = self._secret_value(e["valueFrom"]["secretKeyRef"])
            elif "fieldRef" in e.get("valueFrom", {}):
                value = {"metadata.name": env["HOSTNAME"], "metadata.namespace": NAMESPACE}.get(
                    e["valueFrom"]["fieldRef"]["fieldPath"], "127.0.0.1"
                )
            else:
                raise AssertionError(f"env {e['name']}: a source this test does not resolve: {e}")
            if e["name"] in PORT_ENV:
                value = self._port(PORT_ENV[e["name"]], value)
            elif value.startswith("/"):
                value = on_volume(e["name"], value)
            env[e["name"]] = value
        # Knative tells the container its port; every listener on a free port here.
        if "http" not in self.ports:
            self._port("http", self.container_port())
        env["PORT"] = str(self.ports["http"][1])
        if "grpc" not in self.ports:
            env["SLUICE_GRPC_PORT"] = self._port("grpc", DEFAULT_PORTS["grpc"])
        if init_mode is not None:
            env["MODEL_INIT_MODE"] = init_mode
        # The admin key and the tenant keys, as the Secrets would give them.
        if "SLUICE_ADMIN_KEY" not in env:
            ok("the manifest does not set SLUICE_ADMIN_KEY: the test sets it as a Secret would")
            env["SLUICE_ADMIN_KEY"] = secrets.token_urlsafe(32)
        self.admin_key = env["SLUICE_ADMIN_KEY"]
        keys_dirs = flag_values(c.get("args", []), {"--tenant-keys-dir"})
        if "SLUICE_TENANT_KEYS_DIR" in env:
            keys_dirs.append(next(e["value"] for e in c["env"] if e["name"] == "SLUICE_TENANT_KEYS_DIR"))
        if keys_dirs:
            assert len(set(keys_dirs)) == 1, f"two tenant key directories: {keys_dirs}"
            self._secret_volume(keys_dirs[0], self.keys)
        else:
            ok("the manifest names no tenant key directory: the test mounts one as a Secret would")
            local = os.path.join(self.root, "volumes", "tenant-keys")
            self.mounts["/etc/sluice/tenant-keys"] = (local, {"readOnly": True}, {"secret": {}})
            os.makedirs(local)
            self._secret_volume("/etc/sluice/tenant-keys", self.keys)
            env["SLUICE_TENANT_KEYS_DIR"] = local
        model_dirs = flag_values(args, {"--model-dir", "--model_dir"})
        if "SLUICE_MODEL_REPOSITORY" in env:
            model_dirs.append(env["SLUICE_MODEL_REPOSITORY"])
        assert model_dirs == [self.model_dir], f"the model directory is not {MODEL_MOUNT}: {args} {env}"
        data_dirs = flag_values(args, {"--data-dir"}) + [env[k] for k in ["SLUICE_DATA_DIR"] if k in env]
        assert len(data_dirs) == 1, f"no single data directory: {args}"
        self.data_dir = data_dirs[0]
        return command + args, env

    def container_port(self):
        ports = self.container.get("ports", [])
        return ports[0]["containerPort"] if ports else DEFAULT_PORTS["http"]

    def url(self, kind="http"):
        return f"127.0.0.1:{self.ports[kind][1]}"

    def probe(self, name):
        """The container's probe `name` (startupProbe, ...), its port mapped."""
        p = self.container.get(name)
        if p is None:
            return None
        get = p["httpGet"]
        port = get["port"]
        if isinstance(port, str):
            port = next(cp["containerPort"] for cp in self.container["ports"] if cp.get("name") == port)
        local = next((test for manifest, test in self.ports.values() if manifest == int(port)), None)
        assert local is not None, f"{name} probes port {port}, which no listener of sluice has"
        return Probe(name, f"http://127.0.0.1:{local}{get['path']}", p)

    def termination_grace(self):
        """Seconds between SIGTERM and the kubelet's SIGKILL: the pod's
        terminationGracePeriodSeconds (Kubernetes' default 30)."""
        return int(self.spec.get("terminationGracePeriodSeconds", 30))

    # The process
    def start(self):
        print("command:", " ".join(self.argv), flush=True)
        print("env:", {k: ("<secret>" if "KEY" in k else v) for k, v in sorted(self.env.items())}, flush=True)
        preexec = None
        if self.unprivileged:

            def preexec():
                os.setgroups([])
                os.setgid(self.gid)
                os.setuid(self.uid)

        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            self.argv,
            env=self.env,
            cwd="/",
            stdin=subprocess.DEVNULL,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            preexec_fn=preexec,
        )

    def exited(self):
        return self.proc.poll() is not None

    def log_text(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace")

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


class Probe:
    """A kubelet httpGet probe."""

    def __init__(self, name, url, spec):
        self.name = name
        self.url = url
        self.period = spec.get("periodSeconds", 10)
        self.threshold = spec.get("failureThreshold", 3)
        self.timeout = spec.get("timeoutSeconds", 1)
        self.initial_delay = spec.get("initialDelaySeconds", 0)

    def __call__(self):
        """The status it got (None: no answer)."""
        try:
            with urllib.request.urlopen(self.url, timeout=self.timeout) as r:
                return r.status
        except urllib.error.HTTPError as e:
            return e.code
        except (OSError, urllib.error.URLError):
            return None


class Prober(threading.Thread):
    """The kubelet's readiness and liveness probing, each at its period, recorded."""

    def __init__(self, pod, probes):
        super().__init__(daemon=True)
        self.pod = pod
        self.probes = probes
        self.records = {p.name: [] for p in probes}
        self.lock = threading.Condition()
        self.stopping = False

    def run(self):
        next_at = {p.name: time.monotonic() for p in self.probes}
        while True:
            with self.lock:
                if self.stopping:
                    return
            probe = min(self.probes, key=lambda p: next_at[p.name])
            delay = next_at[probe.name] - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            exited = self.pod.exited()
            status = probe()
            with self.lock:
                self.records[probe.name].append((status, exited))
                self.lock.notify_all()
            next_at[probe.name] += probe.period

    def wait_for(self, what, done):
        with self.lock:
            while not done(self.records):
                assert not self.stopping, what
                self.lock.wait()

    def stop(self):
        with self.lock:
            self.stopping = True
        self.join()


def max_consecutive_failures(records):
    longest = n = 0
    for status, _ in records:
        n = 0 if status in PROBE_OK else n + 1
        longest = max(longest, n)
    return longest


def consecutive_failures(records):
    n = 0
    for status, _ in reversed(records):
        if status in PROBE_OK:
            break
        n += 1
    return n


def wait_probe(pod, probe, want_ok=True, budget=None):
    """Polls `probe` at its period until it passes; fails after `budget` failures (the
    kubelet's failureThreshold for a startup probe), or if the process exits."""
    budget = budget if budget is not None else probe.threshold
    time.sleep(probe.initial_delay)
    failures = 0
    while True:
        assert not pod.exited(), f"sluice exited ({pod.proc.returncode}) before {probe.name} passed:\n{pod.log_text()}"
        status = probe()
        if (status in PROBE_OK) == want_ok:
            return failures
        failures += 1
        assert failures < budget, f"{probe.name} failed {failures} times (last {status}):\n{pod.log_text()}"
        time.sleep(probe.period)


# ---------------------------------------------------------------------------------------
# The model: a bundle, KServe's storage code, the read-only directory


def make_bundle(sluice, wasm, out):
    subprocess.run(
        [sluice, "bundle", "--out", out, "--name", ISVC_NAME, "--tenant", TENANT, wasm],
        check=True,
        stdin=subprocess.DEVNULL,
    )
    assert os.path.isfile(os.path.join(out, "sluice.toml")), os.listdir(out)
    ok(f"`sluice bundle` wrote {sorted(os.listdir(out))}")


class ArchiveServer:
    """A loopback-only HTTP server of one directory (the storage's http(s):// source)."""

    def __init__(self, directory):
        handler = partial(QuietHandler, directory=directory)
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def url(self, name):
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/{name}"

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def make_archive(bundle, kind, out_dir):
    """The bundle's files at the root of a `.tar.gz` or `.zip` in `out_dir`."""
    path = os.path.join(out_dir, f"{ISVC_NAME}.{kind}")
    names = sorted(os.listdir(bundle))
    if kind == "tar.gz":
        with tarfile.open(path, "w:gz") as t:
            for n in names:
                t.add(os.path.join(bundle, n), arcname=n)
    else:
        with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
            for n in names:
                z.write(os.path.join(bundle, n), arcname=n)
    return os.path.basename(path)


def download(uri, out_dir):
    """What the storage initializer does: `Storage.download(uri, out_dir)`."""
    os.environ["NO_PROXY"] = os.environ["no_proxy"] = "127.0.0.1,localhost"
    got = Storage.download(uri, out_dir)
    ok(f"kserve_storage downloaded {uri} -> {sorted(os.listdir(out_dir))}")
    return got


def read_only(path):
    """chmod a-w of everything under `path`, symlink targets included."""
    for root, dirs, files in os.walk(path, followlinks=True):
        for n in dirs + files:
            p = os.path.join(root, n)
            os.chmod(p, os.stat(p).st_mode & ~0o222)
        os.chmod(root, os.stat(root).st_mode & ~0o222)


# Writable by everyone here, read-only in the pod (readOnlyRootFilesystem).
SCRATCH_DIRS = ["/tmp", "/var/tmp", "/dev/shm"]


def owned_by(uid):
    """The entries of the world-writable directories owned by `uid`."""
    out = set()
    for d in SCRATCH_DIRS:
        try:
            names = os.listdir(d)
        except OSError:
            continue
        for n in names:
            try:
                if os.lstat(os.path.join(d, n)).st_uid == uid:
                    out.add(os.path.join(d, n))
            except OSError:
                pass
    return out


def snapshot(path):
    """Every path under `path` (symlinks followed) with its kind, size, mode, mtime and
    content hash."""
    out = {}
    for root, dirs, files in os.walk(path, followlinks=True):
        for n in [None] + dirs + files:
            p = root if n is None else os.path.join(root, n)
            st = os.stat(p)
            link = os.readlink(p) if os.path.islink(p) else None
            digest = None
            if os.path.isfile(p):
                with open(p, "rb") as f:
                    digest = hashlib.sha256(f.read()).hexdigest()
            out[os.path.relpath(p, path)] = (link, st.st_size, st.st_mode, st.st_mtime_ns, digest)
    return out


# ---------------------------------------------------------------------------------------
# Clients


def headers(key):
    return {"Authorization": f"Bearer {key}"}


def echo_request(values):
    x = thttp.InferInput("x", [len(values)], "FP32")
    x.set_data_from_numpy(np.array(values, dtype=np.float32))
    return [x]


def invoke_http(pod, key, values, client=None):
    client = client or thttp.InferenceServerClient(pod.url())
    result = client.infer(ISVC_NAME, echo_request(values), headers=headers(key))
    return result.as_numpy("x")


def check_invocations(pod):
    values = [1.5, -2.0, 3.25, 0.0]
    got = invoke_http(pod, pod.keys[TENANT], values)
    check(np.array_equal(got, np.array(values, dtype=np.float32)), f"echo over REST returns its input: {got}")
    try:
        thttp.InferenceServerClient(pod.url()).infer(ISVC_NAME, echo_request(values))
        raise AssertionError("an invocation without a key was served")
    except thttp.InferenceServerException as e:
        check(e.status() in ("401", 401), f"no key: {e.status()} {e.message()}")
    try:
        invoke_http(pod, pod.keys[OTHER_TENANT], values)
        raise AssertionError("another tenant's key invoked the model")
    except thttp.InferenceServerException as e:
        check(e.status() in ("404", 404), f"another tenant's key: {e.status()} {e.message()}")
    # gRPC on the HTTP port (h2c): one port for both, as the Knative gRPC example needs.
    g = tgrpc.InferenceServerClient(pod.url("http"))
    x = tgrpc.InferInput("x", [len(values)], "FP32")
    x.set_data_from_numpy(np.array(values, dtype=np.float32))
    result = g.infer(ISVC_NAME, [x], headers={"authorization": f"Bearer {pod.keys[TENANT]}"})
    got = result.as_numpy("x")
    check(np.array_equal(got, np.array(values, dtype=np.float32)), f"echo over gRPC on the HTTP port: {got}")
    g.close()


def check_metrics(pod):
    """`/metrics` without a key on the port the Prometheus annotations name."""
    annotations = pod.spec.get("annotations", {})
    prefix = "prometheus.kserve.io" if "prometheus.kserve.io/port" in annotations else "prometheus.io"
    port = annotations.get(f"{prefix}/port")
    if port is None:
        ok("no Prometheus annotation in the manifest: metrics port not checked")
        return
    local = next((t for m, t in pod.ports.values() if m == int(port)), None)
    assert local is not None, f"the Prometheus annotation names port {port}, which sluice does not listen on"
    path = annotations.get(f"{prefix}/path", "/metrics")
    with urllib.request.urlopen(f"http://127.0.0.1:{local}{path}", timeout=30) as r:
        text = r.read().decode()
    check(r.status == 200 and "sluice_" in text, f"{path} on the annotated port {port} without a key")


class Load:
    """Clients invoking `echo` continuously, each counting its answers and failures."""

    def __init__(self, pod, clients=3):
        self.pod = pod
        self.stop_event = threading.Event()
        self.lock = threading.Lock()
        self.done = 0
        self.failures = []
        self.threads = [threading.Thread(target=self.client, args=(i,), daemon=True) for i in range(clients)]
        for t in self.threads:
            t.start()

    def client(self, i):
        client = thttp.InferenceServerClient(self.pod.url(), network_timeout=600.0, connection_timeout=600.0)
        n = 0
        while not self.stop_event.is_set():
            values = [float(i), float(n)]
            try:
                got = invoke_http(self.pod, self.pod.keys[TENANT], values, client)
                assert np.array_equal(got, np.array(values, dtype=np.float32)), got
                with self.lock:
                    self.done += 1
            except Exception as e:  # noqa: BLE001 - every failure is counted and reported
                with self.lock:
                    self.failures.append(f"client {i} request {n}: {type(e).__name__}: {e}")
            n += 1

    def count(self):
        with self.lock:
            return self.done

    def stop(self):
        self.stop_event.set()
        for t in self.threads:
            t.join()


# ---------------------------------------------------------------------------------------
# Scenarios


def lifecycle(pod, prober, readiness):
    """Load, SIGTERM, the endpoint removed after failureThreshold failed readiness
    probes, then the exit."""
    load = Load(pod)
    # Some answers and two readiness periods under load before the SIGTERM.
    before = len(prober.records[readiness.name])
    prober.wait_for("readiness probed under load", lambda r: len(r[readiness.name]) >= before + 2)
    while load.count() < 10 and not load.failures:
        time.sleep(0.05)
    served_before = load.count()
    live = prober.records.get("livenessProbe", [])
    check(all(s in PROBE_OK for s, _ in live), f"liveness passed all {len(live)} times before SIGTERM")
    # A probe may time out on a saturated machine; the kubelet acts only on
    # failureThreshold failures in a row, and so does this check.
    check(
        max_consecutive_failures(prober.records[readiness.name]) < readiness.threshold,
        f"readiness never failed {readiness.threshold} times in a row under load",
    )
    term_at = len(prober.records[readiness.name])
    pod.proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + pod.termination_grace()
    prober.wait_for(
        "readiness failed failureThreshold times",
        lambda r: consecutive_failures(r[readiness.name][term_at:]) >= readiness.threshold,
    )
    load.stop()
    after = prober.records[readiness.name][term_at:]
    ok(f"readiness after SIGTERM until the endpoint went: {[s for s, _ in after]}")
    check(
        load.failures == [],
        f"no failed request: {load.done} answered ({served_before} before SIGTERM), failures {load.failures[:5]}",
    )
    check(
        any(s == 503 and not exited for s, exited in after),
        "readiness answered 503 while the process was still running",
    )
    # The kubelet's SIGKILL comes at the end of the grace period.
    while pod.proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    if pod.proc.poll() is None:
        pod.kill()
        raise AssertionError(
            f"still running {pod.termination_grace()} s after SIGTERM (the kubelet's SIGKILL):\n{pod.log_text()}"
        )
    prober.stop()
    check(pod.proc.returncode == 0, f"exit status {pod.proc.returncode} within the grace period")


def run(args):
    root = tempfile.mkdtemp(prefix="sluice-kubelet-")
    os.chmod(root, 0o755)
    server = None
    pod = None
    try:
        pod = Pod(args.manifest, args.sluice, root, init_mode="async" if args.scenario == "async" else None)
        if pod.unprivileged:
            ok(f"running as root: sluice runs as uid {pod.uid}, gid {pod.gid}")
        source = os.path.join(root, "source")
        os.makedirs(source)
        bundle = os.path.join(source, "bundle")
        make_bundle(args.sluice, args.wasm, bundle)
        if args.scenario in ("tar.gz", "zip"):
            archives = os.path.join(root, "archives")
            os.makedirs(archives)
            name = make_archive(bundle, args.scenario, archives)
            server = ArchiveServer(archives)
            uri = server.url(name)
        else:
            uri = f"file://{bundle}"
        scratch_before = owned_by(pod.uid) if pod.unprivileged else set()
        startup = pod.probe("startupProbe")
        readiness = pod.probe("readinessProbe")
        liveness = pod.probe("livenessProbe")
        assert readiness is not None, "the container has no readiness probe"
        assert liveness is not None, "the container has no liveness probe"
        if args.scenario != "async":
            download(uri, pod.model_dir)
            read_only(pod.model_dir)
            read_only(source)
            before = snapshot(pod.model_dir)
            pod.start()
        else:
            read_only(source)
            check(not os.path.exists(pod.model_dir), "the model directory does not exist at start")
            pod.start()
        first = startup or liveness
        budget = first.threshold
        failures = wait_probe(pod, first, budget=budget)
        ok(f"{first.name} passed after {failures} failures (threshold {budget}, period {first.period} s)")
        if args.scenario == "async":
            live, ready = liveness(), readiness()
            check(live == 200 and ready == 503, f"model directory absent: live {live}, ready {ready}")
            # The storage initializer's copy lands now, into place.
            download(uri, pod.model_dir)
            read_only(pod.model_dir)
            before = snapshot(pod.model_dir)
        # Readiness until ready, at its period (bounded by the startup budget, against a hang).
        failures = wait_probe(pod, readiness, budget=budget)
        ok(f"readiness passed after {failures} failures")
        prober = Prober(pod, [readiness, liveness])
        prober.start()
        check_invocations(pod)
        check_metrics(pod)
        lifecycle(pod, prober, readiness)
        after = snapshot(pod.model_dir)
        changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
        check(changed == [], f"nothing under the model directory changed ({len(before)} paths): {changed}")
        check(len(os.listdir(pod.data_dir)) > 0, "sluice wrote its state into the data directory")
        if pod.unprivileged:
            written = sorted(owned_by(pod.uid) - scratch_before)
            check(written == [], f"nothing written to {', '.join(SCRATCH_DIRS)} (read-only in the pod): {written}")
        print("--- sluice log (tail) ---")
        print("\n".join(pod.log_text().splitlines()[-15:]))
        print("all checks passed", flush=True)
    except BaseException:
        if pod is not None and pod.proc is not None:
            pod.kill()
            print("--- sluice log ---", file=sys.stderr)
            print(pod.log_text(), file=sys.stderr)
        raise
    finally:
        if pod is not None:
            pod.kill()
        if server is not None:
            server.close()
        for r, dirs, files in os.walk(root):
            for n in dirs:
                p = os.path.join(r, n)
                if not os.path.islink(p):
                    os.chmod(p, 0o755)
        os.chmod(root, 0o755)
        shutil.rmtree(root, ignore_errors=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("scenario", choices=["file", "tar.gz", "zip", "async"])
    p.add_argument("--manifest", required=True, help="deploy/kserve/clusterservingruntime.yaml")
    p.add_argument("--sluice", required=True, help="the sluice binary")
    p.add_argument("--wasm", required=True, help="functions/target/wasm32-wasip2/release/echo.wasm")
    run(p.parse_args())


if __name__ == "__main__":
    main()
