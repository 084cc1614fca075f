"""Grade a SWE-bench-style run: reward 1 only if every FAIL_TO_PASS and PASS_TO_PASS test passed.

Usage: python3 grade.py CONFIG.json OUTCOMES.json LOGS_DIR. Writes LOGS_DIR/reward.txt and a
per-test LOGS_DIR/report.json. Standard library only (runs inside the sandbox).
"""

import json
import os
import sys


def grade(config, outcomes):
    tests = outcomes.get("tests", {})
    report = {"fail_to_pass": {}, "pass_to_pass": {}}
    for group in report:
        for test_id in config.get(group, []):
            report[group][test_id] = tests.get(test_id, "missing")
    ok = all(o == "passed" for group in report.values() for o in group.values())
    return (1 if ok else 0), report


def main(argv):
    config_path, outcomes_path, logs_dir = argv[1:4]
    with open(config_path, encoding="utf-8") as f:
        config = json.load(f)
    try:
        with open(outcomes_path, encoding="utf-8") as f:
            outcomes = json.load(f)
    except (OSError, ValueError):
        outcomes = {"tests": {}, "exitstatus": None}
    reward, report = grade(config, outcomes)
    report["reward"] = reward
    report["pytest_exitstatus"] = outcomes.get("exitstatus")
    with open(os.path.join(logs_dir, "report.json"), "w", encoding="utf-8") as f:
        json.dump(report, f, indent=1)
    for group, results in report.items():
        if isinstance(results, dict):
            bad = {k: v for k, v in results.items() if v != "passed"}
            print(f"{group}: {len(results) - len(bad)}/{len(results)} passed")
            for test_id, outcome in sorted(bad.items()):
                print(f"  {outcome}: {test_id}")
    with open(os.path.join(logs_dir, "reward.txt"), "w", encoding="utf-8") as f:
        f.write(f"{reward}\n")
    print(f"reward: {reward}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
