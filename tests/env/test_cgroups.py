"""cgroup detection and limit writing for v1 and v2, over fake /proc and cgroupfs trees (the host has
v1 only: these keep the v2 path honest). Real v1 behaviour is covered by the escape tests."""

from __future__ import annotations

from pathlib import Path

from legorl.env.cgroups import TrialCgroup, detect


def _proc(tmp_path: Path, mountinfo: str, cgroup: str) -> Path:
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "mountinfo").write_text(mountinfo)
    (proc / "cgroup").write_text(cgroup)
    return proc


def test_v2_delegation_and_limits(tmp_path: Path) -> None:
    own = tmp_path / "cg" / "user.slice" / "job.scope"
    own.mkdir(parents=True)
    (own / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    (own / "cgroup.subtree_control").write_text("")
    proc = _proc(
        tmp_path,
        f"30 23 0:26 / {tmp_path / 'cg'} rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n",
        "0::/user.slice/job.scope\n",
    )
    lay = detect(proc)
    assert lay.version == 2 and lay.reason == ""
    assert lay.parents == {c: own for c in ("memory", "pids", "cpu")}
    assert set((own / "cgroup.subtree_control").read_text().split()) == {"+memory", "+pids", "+cpu"}
    t = TrialCgroup("legorl-1-abc", lay)
    t.create(memory_mb=256, pids_max=64, cpus=0.5)
    d = own / "legorl-1-abc"
    assert (d / "memory.max").read_text() == str(256 * 2**20)
    assert (d / "memory.swap.max").read_text() == "0"
    assert (d / "pids.max").read_text() == "64"
    assert (d / "cpu.max").read_text() == "50000 100000"
    assert t.procs_files() == [d / "cgroup.procs"] and t.unavailable == []


def test_v1_hierarchies_and_limits(tmp_path: Path) -> None:
    root = tmp_path / "cg"
    for c in ("memory", "pids", "cpu"):
        (root / c / "jobs").mkdir(parents=True)
    mountinfo = "".join(
        f"{30 + i} 23 0:{40 + i} / {root / c} rw - cgroup cgroup rw,{c}\n"
        for i, c in enumerate(("memory", "pids", "cpu"))
    )
    proc = _proc(tmp_path, mountinfo, "4:memory:/jobs\n8:pids:/jobs\n1:cpu:/jobs\n0::/\n")
    lay = detect(proc)
    assert lay.version == 1 and lay.versions == {"memory": 1, "pids": 1, "cpu": 1}
    t = TrialCgroup("legorl-2-x", lay)
    t.create(memory_mb=128, pids_max=32, cpus=2)
    assert (root / "memory" / "jobs" / "legorl-2-x" / "memory.limit_in_bytes").read_text() == str(128 * 2**20)
    assert (root / "memory" / "jobs" / "legorl-2-x" / "memory.memsw.limit_in_bytes").read_text() == str(
        128 * 2**20
    )
    assert (root / "pids" / "jobs" / "legorl-2-x" / "pids.max").read_text() == "32"
    assert (root / "cpu" / "jobs" / "legorl-2-x" / "cpu.cfs_quota_us").read_text() == "200000"
    assert len(t.procs_files()) == 3  # a process must join each v1 hierarchy


def test_nothing_usable_is_reported(tmp_path: Path) -> None:
    proc = _proc(tmp_path, "", "0::/\n")
    lay = detect(proc)
    assert lay.version == 0 and "no usable cgroup controller" in lay.reason
    t = TrialCgroup("legorl-3-x", lay)
    t.create(memory_mb=128, pids_max=32, cpus=1)
    assert t.dirs == {} and set(t.unavailable) == {"memory", "pids", "cpu"}
