"""The Dockerfile subset of the local backend: supported lines work, the rest fail naming the line."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import pytest

from legorl.env.dockerfile import DockerfileError, env_pairs, parse, substitute
from legorl.env.local import LocalSandbox
from legorl.tasks.model import TaskLimits

pytestmark = pytest.mark.skipif(not os.access("/usr/bin/bwrap", os.X_OK), reason="bubblewrap not installed")

DOCKERFILE = """\
# syntax=docker/dockerfile:1
FROM ubuntu:24.04
ARG GREETING=hi
WORKDIR /app
ENV APP_MODE=test \\
    NAME="two words"
ENV LEGACY value with spaces
COPY src/ ./src/
COPY config.txt data/config.txt
COPY ["notes.md", "/app/docs/"]
RUN echo "$GREETING $APP_MODE" > built.txt && mkdir -p out && echo made > out/x
EXPOSE 8080
CMD ["bash"]
"""


async def test_supported_lines_work(make_task, sandbox_root: Path) -> None:
    task = make_task(
        files={
            "Dockerfile": DOCKERFILE,
            "src/main.py": "print('m')\n",
            "config.txt": "cfg\n",
            "notes.md": "n\n",
            "not_copied.txt": "x\n",
        }
    )
    async with LocalSandbox(task, root_dir=sandbox_root) as sb:
        r = await sb.exec(
            "cat built.txt src/main.py data/config.txt docs/notes.md out/x; echo $APP_MODE/$NAME/$LEGACY/$GREETING"
        )
        assert r.ok, r
        assert r.stdout.splitlines() == [
            "hi test",
            "print('m')",
            "cfg",
            "n",
            "made",
            "test/two words/value with spaces/",
        ]
        r = await sb.exec("ls /app")
        assert "not_copied.txt" not in r.stdout and "Dockerfile" not in r.stdout  # only COPY lands


async def test_workdir_outside_app_and_add_archive(make_task, sandbox_root: Path, tmp_path: Path) -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("pkg/inside.txt")
        data = b"unpacked\n"
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    task = make_task(
        files={"Dockerfile": "FROM ubuntu:24.04\nWORKDIR /opt/proj\nADD bundle.tar .\nRUN ls pkg > listing\n"}
    )
    (task.environment_dir / "bundle.tar").write_bytes(buf.getvalue())
    async with LocalSandbox(task, root_dir=sandbox_root) as sb:
        r = await sb.exec("pwd; cat pkg/inside.txt listing")
        assert r.stdout.splitlines() == ["/opt/proj", "unpacked", "inside.txt"], r


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ("FROM golang AS build", "multi-stage"),
        ("COPY --from=build /x /y", "COPY --from"),
        ("ADD https://example.com/x.tgz /app/", "remote URL"),
        ("ONBUILD RUN true", "ONBUILD"),
        ("SHELL /bin/zsh -c", "SHELL needs a JSON array"),
        ("RUN --mount=type=cache,target=/root/.cache true", "RUN --mount"),
        ("FROZBULATE now", "unknown"),
        ("COPY missing.txt /app/", "not found"),
        ("COPY ../secret /app/", "outside the build context"),
        ("RUN exit 9", "RUN failed (exit code 9)"),
    ],
)
async def test_unsupported_lines_fail_naming_the_line(
    make_task, sandbox_root: Path, line: str, why: str
) -> None:
    task = make_task(files={"Dockerfile": f"FROM ubuntu:24.04\nWORKDIR /app\n\n{line}\n", "a.txt": "a"})
    sb = LocalSandbox(task, root_dir=sandbox_root)
    with pytest.raises(Exception) as ei:
        await sb.start()
    msg = str(ei.value)
    assert why in msg and "Dockerfile:4" in msg, msg
    assert sb.root is None  # a failed start cleans up after itself


async def test_build_has_network_trial_only_if_allowed(make_task, sandbox_root: Path) -> None:
    """Root builds reach the host network (apt, pip); the trial gets it only when the task asks."""
    df = "FROM ubuntu:24.04\nRUN grep -c : /proc/net/dev > /app/nics\n"  # interfaces in the RUN's network namespace
    host_nics = sum(":" in line for line in Path("/proc/net/dev").read_text().splitlines())
    for allow in (False, True):
        task = make_task(files={"Dockerfile": df}, limits=TaskLimits(allow_internet=allow, memory_mb=512))
        async with LocalSandbox(task, root_dir=sandbox_root) as sb:
            built = int((await sb.exec("cat /app/nics")).stdout.strip() or 0)
            now = int((await sb.exec("grep -c : /proc/net/dev")).stdout.strip() or 0)
            assert built == host_nics if sb.layer is not None else (built > 1) == allow or host_nics == 1
            assert (now > 1) == allow or host_nics == 1


def test_parser_details(tmp_path: Path) -> None:
    p = tmp_path / "Dockerfile"
    p.write_text("from debian:12\n# c\nrun echo a \\\n  # inner comment\n  && echo b\nUSER nobody\nVOLUME /data\n")
    ins = parse(p)
    assert [(i.keyword, i.lineno) for i in ins] == [("FROM", 1), ("RUN", 3), ("USER", 6), ("VOLUME", 7)]
    assert ins[1].args == "echo a && echo b"
    assert substitute("${A}/$B/${C:-dflt}", {"A": "1", "B": "2"}) == "1/2/dflt"
    p.write_text("FROM ubuntu:24.04\nENV NOEQ\n")
    with pytest.raises(DockerfileError, match="Dockerfile:2"):
        env_pairs(parse(p)[1], p)


async def test_run_results_are_cached_across_trials(make_task, sandbox_root: Path) -> None:
    df = "FROM ubuntu:24.04\nENV K=v\nWORKDIR /opt/tool\nRUN cat /proc/sys/kernel/random/uuid > stamp && mkdir -p .cache && echo h > .cache/x\n"
    task = make_task(files={"Dockerfile": df})
    stamps = []
    for cache in (True, True, False):
        async with LocalSandbox(task, root_dir=sandbox_root, build_cache=cache) as sb:
            r = await sb.exec("cat stamp .cache/x; pwd; echo $K; touch /opt/tool/mine")
            assert r.ok and r.stdout.splitlines()[1:] == ["h", "/opt/tool", "v"], r
            stamps.append(r.stdout.splitlines()[0])
    assert stamps[0] == stamps[1] != stamps[2]  # the 2nd trial reused the 1st's build; no-cache rebuilt


def test_env_expansion_as_docker_does_it(tmp_path: Path) -> None:
    """ENV/ARG values: quotes, escapes and $-forms expanded while read, against the pre-line values."""
    p = tmp_path / "Dockerfile"
    p.write_text(
        "FROM ubuntu:24.04\n"
        'ENV PATH="/opt/verifier/bin:${PATH}"\n'
        "ENV A=1 B=$A C=${UNSET:-dflt} D=${A:+alt} E=${UNSET:+alt} F=${EMPTY-set-but-empty}\n"
        "ENV Q='$A literal' R=\"two $A\" S=a\\ b T=\\$A\n"
        "ENV LEGACY hello ${A} \"quoted\"\n"
        "ARG NOVALUE\n"
        "ARG VER=3.${MINOR:-11}\n"
    )
    ins = parse(p)
    env: dict[str, str] = {"A": "0", "EMPTY": ""}
    (k, v), = env_pairs(ins[1], p, env)
    assert k == "PATH" and v is not None and v.startswith("/opt/verifier/bin:") and ":/usr/bin:" in v
    assert dict(env_pairs(ins[2], p, env)) == {"A": "1", "B": "0", "C": "dflt", "D": "alt", "E": "", "F": ""}
    assert dict(env_pairs(ins[3], p, env)) == {"Q": "$A literal", "R": "two 0", "S": "a b", "T": "$A"}
    assert env_pairs(ins[4], p, env) == [("LEGACY", "hello 0 quoted")]
    assert env_pairs(ins[5], p, env) == [("NOVALUE", None)]
    assert env_pairs(ins[6], p, {}) == [("VER", "3.11")]
    assert substitute("${A}/$B/${C:-dflt}/${D:+x}", {"A": "1", "B": "2", "D": "y"}) == "1/2/dflt/x"
    p.write_text("FROM ubuntu:24.04\nENV X=${NEED:?set NEED}\n")
    with pytest.raises(DockerfileError, match="set NEED"):
        env_pairs(parse(p)[1], p, {})


async def test_env_path_keeps_the_system_path_in_every_phase(make_task, sandbox_root: Path) -> None:
    task = make_task(files={"Dockerfile": 'FROM ubuntu:24.04\nWORKDIR /app\nENV PATH="/opt/v/bin:${PATH}" '
                                          "GREET=${GREET:-hi}\n"})
    async with LocalSandbox(task, root_dir=sandbox_root) as sb:
        r = await sb.exec('echo "$PATH"; echo $GREET; command -v ls')
        assert r.ok, r
        path, greet, ls = r.stdout.split()
        assert path.startswith("/opt/v/bin:") and "/usr/bin" in path.split(":") and greet == "hi" and ls


def test_entrypoint_rule() -> None:
    """Which ENTRYPOINT/CMD is a service to start, and which is the image's default shell."""
    from legorl.env.entrypoint import service_argv

    sh = ["/bin/sh", "-c"]
    assert service_argv({"cmd": ["bash"]}) is None
    assert service_argv({"cmd": [*sh, "/bin/bash -l"]}) is None
    assert service_argv({"cmd": ["python3"]}) is None and service_argv({"cmd": ["sleep", "infinity"]}) is None
    assert service_argv({"cmd": ["tail", "-f", "/dev/null"]}) is None and service_argv({}) is None
    assert service_argv({"cmd": ["python3", "-m", "http.server"]}) == ["python3", "-m", "http.server"]
    assert service_argv({"cmd": [*sh, "python3 app.py"]}) == [*sh, "python3 app.py"]
    assert service_argv({"entrypoint": ["/entry.sh"], "cmd": ["postgres"]}) == ["/entry.sh", "postgres"]
    assert service_argv({"entrypoint": ["/entry.sh"], "cmd": ["bash"]}) == ["/entry.sh"]
    assert service_argv({"entrypoint": [*sh, "serve --port 1"], "cmd": ["x"]}) == [*sh, "serve --port 1"]
