#!/usr/bin/env bash
# The test command: lint, then the whole suite (slow end-to-end tests included); the 15 slowest
# tests are printed at the end so the suite's cost stays visible.
# Two pytest-xdist workers, one OpenMP thread each: every test of a `*vllm*` file runs on one worker (one
# vLLM server start at a time), every tests/cluster test on one (one shared Ray cluster), the rest spread
# over both (tests/conftest.py).
# Measured on a 2-core machine with nothing else running: 13:16 to 14:49 with `-n 2` (545 tests, 2026-12-02; the
# machine's speed drifts; CI took 17:17 before its last cuts); `-n 3` was slower (13:45) and made timing bounds
# flake. 779 tests, 2026-12-05, 2-core Intel Xeon (Sapphire Rapids), quiet, `LEGORL_REQUIRE_VLLM=1 bash
# scripts/test.sh --durations=0`: 15:58 (958 s; 1,871 s of test time, 698 s of it the vLLM group), down from
# 19:20-21:05 before tests/serving shared one vLLM server and the servers one Inductor cache. 2026-12-06, the same
# box and command, quiet: 16:45 and 17:08 (1,006 / 1,029 s; 1,962 / 2,011 s of test time, 728 / 740 s the vLLM
# group) after the LoRA `legorl train` test moved onto test_vllm_lora.py's server (58 -> 19 s): the box ran slower
# those hours (the Ray group 260-263 s against 207 s, no change there; a vLLM start 42 s against ~30 s).
# 2026-12-06 morning, a 2-core AMD EPYC (Zen 5), quiet, `LEGORL_REQUIRE_VLLM=1 bash scripts/test.sh --durations=40`:
# 789 passed, 1 skipped, 13:42 (822 s). 2026-12-06 late morning, a fresh 2-core AMD EPYC (Zen 4), quiet, the same
# command: 829 passed, 1 skipped, 16:02 (962 s), 122 s of it the codex test's first npm install; a second run
# (agents installed): 830 passed, 1 skipped, 15:01 (901 s); at midday, the same box: 833 passed, 1 skipped, 17:28
# (1,048 s), its slowest tests 10-25% slower than at 08:34 (box drift; ~50 s was a test since folded into another);
# in the afternoon, the same box, quiet, `LEGORL_REQUIRE_VLLM=1 bash scripts/test.sh`: 843 passed, 1 skipped, 15:17 (918 s);
# in the evening, the same: 850 passed, 1 skipped, 15:11 (911 s), then 851 passed, 1 skipped, 15:15 (915 s).
# 2026-12-07, a 2-core Intel Xeon (Ice Lake), quiet, `LEGORL_REQUIRE_VLLM=1 bash scripts/test.sh --durations=0`: fresh
# box 19:16 (2,268 s of test time: vLLM group 710 s, the Codex test's tool model 155 s); after eager vLLM servers
# stopped compiling at their first request and the tool model's new recipe (112 s, built once per machine), with
# the tool model already built: 882 passed, 1 skipped, 15:35 (935 s; 1,823 s of test time, vLLM group 549 s); then
# 883 passed, 1 skipped, 15:09 (909 s). A fresh clone with a fresh LEGORL_HOME (`bash .ci/run`, pip/npm caches warm):
# .ci/run 20:19, the suite 16:24 (984 s, the tool model's 106 s build included).
# Later that day, the same box, quiet, after the fused AdamW (`--durations=40`): 886 passed, 1 skipped, 16:11 (972 s);
# its slowest integration tests ran 5-30% slower than at 07:36 (the box's hour: one of them, rerun alternately on the
# code before and after, read 45.6-46.0 s against 44.6-52.6 s). After the last code commit (5917683, 10:28-10:42):
# 887 passed, 1 skipped, 14:45 (886 s); after the review mend (a1408f8, 10:44-10:58): 887 passed, 1 skipped, 13:35 (816 s).
# 2026-12-07 midday, a fresh 2-core AMD EPYC (Zen 4) just set up, quiet, after the critic's fused AdamW (1531135,
# 12:51-13:09): 887 passed, 1 skipped, 17:31 (1,052 s), 114 s of it the Codex test's tool model built for this machine.
# That afternoon, the same box, quiet, `LEGORL_REQUIRE_VLLM=1 bash scripts/test.sh`: 887 passed, 1 skipped, 16:12 (973 s,
# `--durations=0`: 1,892 s of test time, 571 s the vLLM group, 245 s the Ray group); after the sandbox and compare work
# (a0015db, 16:01-16:17): 892 passed, 1 skipped, 15:34 (934 s); after 0c197d4 (16:20-16:35): 893 passed, 1 skipped, 15:14
# (915 s); after ca087da (16:37-16:53): 893 passed, 1 skipped, 15:15 (915 s). CI's run of 6e14319 took 18:30 (1,110 s) for the suite.
# That evening, the same box, quiet, after the phrasings and eval -O (cbc1215, 18:05-18:21): 895 passed, 1 skipped, 15:44 (944 s).
# That night, the same box, quiet, after the demonstration replay (9002b42, 21:59-22:15): 899 passed, 1 skipped, 15:52 (952 s).
# 2026-12-08 after midnight, the same box, quiet, `--durations=0`, tmp dirs of passed tests deleted (f0e9128, 00:28-00:43):
# 899 passed, 1 skipped, 15:35 (935 s; 1,823 s of test time); after the docs commits (22476af, 01:36-01:52): 899 passed, 1 skipped, 16:50 (1,011 s).
# Slow tests outside the two groups go first (tests/conftest.py): wall /
# (summed test time / 2) went from 1.064 to 1.025 (`--durations=0` runs); one test at a time was ~18 min (~30 on a
# fresh one) before the suite grew.
# Extra arguments go to pytest, e.g. `bash scripts/test.sh -m "not slow" -x`; `-n 0` runs serially.
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/ruff check .
exec .venv/bin/python -m pytest -n 2 --durations=15 "$@"
