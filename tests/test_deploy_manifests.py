"""The deployment files, checked offline: `Containerfile`, `deploy/compose.yaml` (with
`deploy/haproxy-compose.cfg`), `deploy/compose-sqlite.yaml`, `deploy/kubernetes.yaml` and
`deploy/kubernetes-sqlite.yaml`.

Each is parsed for real (PyYAML; the Kubernetes objects against the Kubernetes schemas with
`kubernetes-validate --strict`; the compose file by `docker-compose config` and the HAProxy file
by `haproxy -c`, both installed by `.ci/run`) and held to the server: every variable they set is
one the server reads, every probe is a route it answers 200 on, every port is its default port,
every image is the one `scripts/image.sh` builds. `scripts/image.sh smoke` runs the image itself.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import Client
from pg_support import require_tool

from taguru_server.server.variables import BY_NAME, default_str

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
DEFAULT_PORT = int(default_str("TAGURU_ADDR").rpartition(":")[2])
UID = 65532
COMPOSE_ENV = {"TAGURU_API_TOKENS": "ops:tok-compose", "POSTGRES_PASSWORD": "pw-compose"}


def compose(name: str = "compose.yaml") -> dict[str, Any]:
    data = yaml.safe_load((DEPLOY / name).read_text())
    assert isinstance(data, dict)
    return data


def kubernetes(file: str = "kubernetes.yaml") -> list[dict[str, Any]]:
    docs = [d for d in yaml.safe_load_all((DEPLOY / file).read_text()) if d is not None]
    assert docs and all(isinstance(d, dict) for d in docs)
    return docs


def k8s_object(kind: str, name: str, file: str = "kubernetes.yaml") -> dict[str, Any]:
    found = [d for d in kubernetes(file) if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, (kind, name)
    return found[0]


def instructions() -> list[tuple[str, str]]:
    """The Containerfile as (INSTRUCTION, arguments), continuation lines joined, comments left out."""
    joined: list[str] = []
    pending = ""
    for line in (ROOT / "Containerfile").read_text().splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        joined.append(pending + line)
        pending = ""
    assert not pending
    return [(w.split(None, 1)[0].upper(), (w.split(None, 1) + [""])[1].strip()) for w in joined]


def final_stage() -> list[tuple[str, str]]:
    """The instructions of the Containerfile's last stage (the image that ships)."""
    steps = instructions()
    last = max(i for i, (op, _a) in enumerate(steps) if op == "FROM")
    return steps[last:]


def image_env() -> dict[str, str]:
    """The ENV of the shipped stage."""
    env: dict[str, str] = {}
    for op, arg in final_stage():
        if op == "ENV":
            env.update(pair.split("=", 1) for pair in shlex.split(arg))
    return env


def script_default(name: str) -> str:
    """A `NAME=${NAME:-default}` default of scripts/image.sh."""
    match = re.search(rf"^{name}=\$\{{{name}:-([^}}]+)\}}$", (ROOT / "scripts" / "image.sh").read_text(), re.M)
    assert match, name
    return match.group(1)


def compose_default(value: str) -> str:
    """`${VAR:-default}` → default; a plain value as it is."""
    match = re.fullmatch(r"\$\{\w+:-([^}]+)\}", value)
    return match.group(1) if match else value


def taguru_services() -> dict[str, dict[str, Any]]:
    """The compose services that run the taguru image."""
    image = script_default("IMAGE")
    services = compose()["services"]
    return {name: s for name, s in services.items() if compose_default(s["image"]) == image}


def pod_containers(deployment: dict[str, Any]) -> list[dict[str, Any]]:
    spec = deployment["spec"]["template"]["spec"]
    return [*spec.get("initContainers", []), *spec["containers"]]


def haproxy_sections(path: Path) -> dict[str, list[str]]:
    """An HAProxy config as {section header: its directive lines}, comments and blank lines left out."""
    sections: dict[str, list[str]] = {}
    current = ""
    for raw in path.read_text().splitlines():
        line = raw.split("#", 1)[0].rstrip()
        if not line.strip():
            continue
        if not line[0].isspace():
            current = " ".join(line.split())
            sections[current] = []
        else:
            sections[current].append(" ".join(line.split()))
    return sections


# ---- the image -------------------------------------------------------------------------------


def test_the_image_runs_as_65532_serves_on_the_default_port_and_checks_itself_with_taguru_health() -> None:
    stage = final_stage()
    ops = [op for op, _a in stage]
    args = {op: arg for op, arg in stage if op != "ENV" and op != "RUN" and op != "LABEL"}
    assert args["USER"] == f"{UID}:{UID}"
    assert args["ENTRYPOINT"] == '["taguru"]' and "CMD" not in ops  # bare `taguru` serves
    assert "VOLUME" not in ops  # compose and Kubernetes mount /data themselves
    assert args["EXPOSE"] == str(DEFAULT_PORT)
    assert args["HEALTHCHECK"] == '--interval=30s --timeout=5s --start-period=2s CMD ["taguru", "health"]'
    assert args["WORKDIR"] == "/data"
    env = image_env()
    assert env["TAGURU_ADDR"] == f"0.0.0.0:{DEFAULT_PORT}" and env["TAGURU_DATA_DIR"] == "/data"
    assert env["TMPDIR"] == "/data" and env["PYTHONDONTWRITEBYTECODE"] == "1"  # a read-only root holds
    assert any(f"chown {UID}:{UID} /data" in arg for op, arg in stage if op == "RUN")
    for name in env:
        if name.startswith("TAGURU_"):
            assert name in BY_NAME, name


def test_the_base_and_the_image_are_the_ones_the_build_script_names() -> None:
    steps = instructions()
    assert steps[0] == ("ARG", f"BASE={script_default('BASE')}")
    assert ("ARG", "PIP_CERT") in steps
    assert script_default("BASE") == "localhost/debian:bookworm"
    assert script_default("IMAGE") == "localhost/taguru-server:dev"


def test_the_build_context_is_a_whitelist_of_every_package_folder() -> None:
    ignore = (ROOT / ".containerignore").read_text()
    assert (ROOT / ".dockerignore").read_text() == ignore
    lines = [line for line in ignore.splitlines() if line and not line.startswith("#")]
    assert lines[0] == "*"
    kept = {line[1:] for line in lines if line.startswith("!")}
    import tomllib

    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    folders = {path.split("/")[0] for path in pyproject["tool"]["setuptools"]["package-dir"].values()}
    assert folders <= kept, folders - kept
    assert {"pyproject.toml", pyproject["project"]["readme"]} <= kept
    assert not kept & {".venv", "data", "tests", "artifacts", "clients", "node_modules"}
    for name in kept:
        assert (ROOT / name).exists(), name


# ---- compose ---------------------------------------------------------------------------------


def test_compose_runs_replicas_of_the_built_image_on_postgresql_behind_haproxy() -> None:
    services = compose()["services"]
    replicas = {n: s for n, s in taguru_services().items() if "command" not in s}
    assert len(replicas) >= 2, "replicas of one database"
    assert taguru_services()["migrate"]["command"] == ["migrate"]
    assert services["postgres"]["image"].startswith("postgres:")
    for name, service in taguru_services().items():
        env = service["environment"]
        url = env["TAGURU_DATABASE_URL"]
        assert url.startswith("postgresql://") and "@postgres:5432/" in url, name
        for var in env:
            assert var in BY_NAME, (name, var)
        assert service["read_only"] is True and "/data" in service["tmpfs"], name  # TMPDIR is /data
        assert "ports" not in service, f"{name}: replicas are reached through HAProxy only"
    for name, service in replicas.items():
        assert service["healthcheck"]["test"] == ["CMD", "taguru", "health"], name
        assert service["stop_grace_period"] == "60s", name
        assert service["environment"]["TAGURU_API_TOKENS"].startswith("${TAGURU_API_TOKENS:?"), "no open deploy"
        assert service["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
    proxy = services["haproxy"]
    assert proxy["ports"] == [f"127.0.0.1:{DEFAULT_PORT}:{DEFAULT_PORT}"]  # loopback only
    assert {n for n, d in proxy["depends_on"].items() if d["condition"] == "service_healthy"} == set(replicas)


def test_compose_haproxy_config_exists_names_every_replica_and_keeps_the_rules_of_haproxy_cfg() -> None:
    proxy = compose()["services"]["haproxy"]
    (mount,) = proxy["volumes"]
    source, target, mode = mount.split(":")
    assert target == "/usr/local/etc/haproxy/haproxy.cfg" and mode == "ro"
    config = (DEPLOY / source).resolve()
    assert config == DEPLOY / "haproxy-compose.cfg" and config.is_file()
    ours, reference = haproxy_sections(config), haproxy_sections(DEPLOY / "haproxy.cfg")
    assert ours["defaults"] == reference["defaults"]
    assert ours["frontend taguru"] == ["bind :8248", "default_backend replicas"]

    def rules(lines: list[str]) -> list[str]:
        return [line for line in lines if not line.startswith("server ")]

    (default_server,) = [line for line in ours["backend replicas"] if line.startswith("default-server ")]
    (reference_default,) = [line for line in reference["backend replicas"] if line.startswith("default-server ")]
    assert default_server.startswith(reference_default + " ")  # plus DNS resolution of the service names
    assert [line for line in rules(ours["backend replicas"]) if line != default_server] == [
        line for line in rules(reference["backend replicas"]) if line != reference_default
    ]
    servers = [line.split() for line in ours["backend replicas"] if line.startswith("server ")]
    replicas = {n for n, s in taguru_services().items() if "command" not in s}
    assert {s[1] for s in servers} == replicas
    assert all(s[2] == f"{s[1]}:{DEFAULT_PORT}" and s[3] == "check" for s in servers)
    assert "option httpchk GET /ready" in ours["backend replicas"]


def test_haproxy_accepts_the_compose_config() -> None:
    require_tool("haproxy")
    run = subprocess.run(
        ["haproxy", "-c", "-f", str(DEPLOY / "haproxy-compose.cfg")], capture_output=True, text=True, timeout=30
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "Configuration file is valid" in run.stdout + run.stderr


def _docker_compose(env: dict[str, str], name: str = "compose.yaml") -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in COMPOSE_ENV and k not in ("IMAGE", "HOST_PORT")}
    return subprocess.run(
        ["docker-compose", "-f", str(DEPLOY / name), "config"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**clean, **env},
    )


def test_docker_compose_validates_the_file_and_refuses_it_without_a_token() -> None:
    require_tool("docker-compose")
    run = _docker_compose(COMPOSE_ENV)
    assert run.returncode == 0, run.stderr
    rendered = yaml.safe_load(run.stdout)
    assert rendered["services"]["taguru-1"]["image"] == script_default("IMAGE")
    assert rendered["services"]["taguru-2"]["environment"]["TAGURU_API_TOKENS"] == "ops:tok-compose"
    assert rendered["services"]["migrate"]["environment"]["TAGURU_DATABASE_URL"] == (
        "postgresql://taguru:pw-compose@postgres:5432/taguru"
    )
    refused = _docker_compose({"POSTGRES_PASSWORD": "pw"})
    assert refused.returncode != 0 and "set TAGURU_API_TOKENS=name:token" in refused.stderr
    single = _docker_compose(COMPOSE_ENV, "compose-sqlite.yaml")
    assert single.returncode == 0, single.stderr
    service = yaml.safe_load(single.stdout)["services"]["taguru"]
    assert service["image"] == script_default("IMAGE")
    assert service["ports"] == [f"127.0.0.1:{DEFAULT_PORT}:{DEFAULT_PORT}/tcp"]
    refused = _docker_compose({}, "compose-sqlite.yaml")
    assert refused.returncode != 0 and "set TAGURU_API_TOKENS=name:token" in refused.stderr


def test_compose_sqlite_is_one_server_on_a_named_volume_at_data() -> None:
    data = compose("compose-sqlite.yaml")
    ((name, service),) = data["services"].items()
    assert compose_default(service["image"]) == script_default("IMAGE")
    assert service["ports"] == [f"127.0.0.1:${{HOST_PORT:-{DEFAULT_PORT}}}:{DEFAULT_PORT}"]  # loopback only
    assert service["volumes"] == ["taguru-data:/data"] and "taguru-data" in data["volumes"]
    assert service["read_only"] is True and service["stop_grace_period"] == "60s"
    assert service["healthcheck"]["test"] == ["CMD", "taguru", "health"]
    assert list(service["environment"]) == ["TAGURU_API_TOKENS"]
    assert service["environment"]["TAGURU_API_TOKENS"].startswith("${TAGURU_API_TOKENS:?"), "no open deploy"
    assert "deploy" not in service, f"{name}: one server per SQLite volume"


def test_every_taguru_variable_the_compose_files_name_is_one_the_server_reads() -> None:
    for name in ("compose.yaml", "compose-sqlite.yaml"):
        text = (DEPLOY / name).read_text()
        named = set(re.findall(r"\b(TAGURU_[A-Z0-9_]+)", text))
        assert named, name
        assert named <= BY_NAME.keys(), (name, named - BY_NAME.keys())


# ---- Kubernetes ------------------------------------------------------------------------------

KUBERNETES = ("kubernetes.yaml", "kubernetes-sqlite.yaml")  # PostgreSQL replicas; one SQLite writer


@pytest.mark.parametrize("file", KUBERNETES)
def test_the_kubernetes_objects_validate_strictly_against_the_kubernetes_schemas(file: str) -> None:
    import kubernetes_validate

    for doc in kubernetes(file):
        kubernetes_validate.validate(doc, kubernetes_validate.latest_version(), strict=True)
    bad = k8s_object("Deployment", "taguru", file)
    bad["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGet"]["paht"] = "/ready"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, kubernetes_validate.latest_version(), strict=True)


@pytest.mark.parametrize("file", KUBERNETES)
def test_the_deployment_runs_the_built_image_as_65532_on_a_read_only_root(file: str) -> None:
    deployment = k8s_object("Deployment", "taguru", file)
    spec = deployment["spec"]
    assert spec["selector"]["matchLabels"].items() <= spec["template"]["metadata"]["labels"].items()
    pod = spec["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] == 60
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == UID and pod["securityContext"]["fsGroup"] == UID
    volumes = {v["name"] for v in pod["volumes"]}
    for container in pod_containers(deployment):
        assert container["image"] == script_default("IMAGE"), container["name"]
        security = container["securityContext"]
        assert security["readOnlyRootFilesystem"] is True and security["allowPrivilegeEscalation"] is False
        mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
        assert "/data" in mounts and mounts["/data"] in volumes  # TMPDIR is /data
        assert {"cpu", "memory"} <= container["resources"]["requests"].keys()
        assert "memory" in container["resources"]["limits"]
    (server,) = pod["containers"]
    assert "command" not in server and server.get("args", []) in ([], ["--workers", "2"])  # the bare image serves
    for container in pod_containers(deployment):
        for name in (e["name"] for e in container.get("env", [])):
            assert name in BY_NAME, (file, container["name"], name)
    assert {"secretRef": {"name": "taguru-keys"}} in server["envFrom"]  # the keys live in a Secret


def test_the_postgresql_deployment_rolls_replicas_and_migrates_first() -> None:
    deployment = k8s_object("Deployment", "taguru")
    assert deployment["spec"]["replicas"] >= 2 and deployment["spec"]["strategy"]["type"] == "RollingUpdate"
    (migrate,) = deployment["spec"]["template"]["spec"]["initContainers"]
    assert migrate["args"] == ["migrate"]
    (data,) = deployment["spec"]["template"]["spec"]["volumes"]
    assert "emptyDir" in data  # the pods hold no state: the database is the store


def test_the_sqlite_deployment_is_one_writer_recreated_on_its_own_claim() -> None:
    deployment = k8s_object("Deployment", "taguru", "kubernetes-sqlite.yaml")
    assert deployment["spec"]["replicas"] == 1 and deployment["spec"]["strategy"] == {"type": "Recreate"}
    pod = deployment["spec"]["template"]["spec"]
    assert "initContainers" not in pod
    (data,) = pod["volumes"]
    claim = k8s_object("PersistentVolumeClaim", data["persistentVolumeClaim"]["claimName"], "kubernetes-sqlite.yaml")
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]  # the SQLite lock does not protect a shared volume
    (server,) = pod["containers"]
    assert "TAGURU_DATABASE_URL" not in {e["name"] for e in server["env"]}


def test_the_postgresql_deployment_takes_its_database_url_and_keys_from_secrets() -> None:
    deployment = k8s_object("Deployment", "taguru")
    config = k8s_object("ConfigMap", "taguru-config")
    for name in config["data"]:
        assert name in BY_NAME, name
    for container in pod_containers(deployment):
        env = {e["name"]: e for e in container.get("env", [])}
        url = env["TAGURU_DATABASE_URL"]
        assert "value" not in url, "a credential comes from a Secret"
        assert url["valueFrom"]["secretKeyRef"]["key"] == "TAGURU_DATABASE_URL"
    (server,) = deployment["spec"]["template"]["spec"]["containers"]
    refs = {(next(iter(r)), next(iter(r.values()))["name"]) for r in server["envFrom"]}
    assert refs == {("configMapRef", "taguru-config"), ("secretRef", "taguru-keys")}
    assert "TAGURU_API_TOKENS" not in config["data"]  # keys live in the Secret


@pytest.mark.parametrize("file", KUBERNETES)
def test_the_service_and_probes_reach_the_servers_default_port(file: str) -> None:
    (server,) = k8s_object("Deployment", "taguru", file)["spec"]["template"]["spec"]["containers"]
    (port,) = server["ports"]
    assert port == {"name": "http", "containerPort": DEFAULT_PORT}
    assert server["livenessProbe"]["httpGet"] == {"path": "/live", "port": "http"}
    assert server["readinessProbe"]["httpGet"] == {"path": "/ready", "port": "http"}
    service = k8s_object("Service", "taguru", file)
    assert service["spec"]["selector"] == {"app": "taguru"}
    assert service["spec"]["ports"] == [{"name": "http", "port": DEFAULT_PORT, "targetPort": "http"}]


def _probe_paths() -> set[str]:
    """Every path a manifest probes: the Kubernetes probes and HAProxy's check."""
    paths: set[str] = set()
    for file in KUBERNETES:
        for container in k8s_object("Deployment", "taguru", file)["spec"]["template"]["spec"]["containers"]:
            for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
                if probe in container:
                    paths.add(container[probe]["httpGet"]["path"])
    for config in ("haproxy.cfg", "haproxy-compose.cfg"):
        for line in haproxy_sections(DEPLOY / config)["backend replicas"]:
            if line.startswith("option httpchk "):
                paths.add(line.split()[-1])
    return paths


@pytest.mark.anyio
async def test_every_probed_path_answers_200_on_a_running_server(client: Client) -> None:
    paths = _probe_paths()
    assert paths == {"/live", "/ready"}
    for path in sorted(paths):
        status, _body, _headers = await client.fetch("GET", path)
        assert status == 200, path
    status, _body, _headers = await client.fetch("GET", "/health")  # what `taguru health` asks
    assert status == 200


def test_the_image_script_parses() -> None:
    assert shutil.which("bash") is not None
    syntax = subprocess.run(["bash", "-n", str(ROOT / "scripts" / "image.sh")], capture_output=True, text=True)
    assert syntax.returncode == 0, syntax.stderr
