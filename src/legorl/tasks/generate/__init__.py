"""Look-then-act task distributions from parts that combine: where the value lives x what to do with it.

    from legorl.tasks.generate import generate, all_kinds
    generate(Path("datasets/lookact"), n=400, seed=0)          # or: legorl tasks generate DIR --n 400
    generate(Path("datasets/json"), n=50, kinds=["json-*"])    # one source's kinds only

Sources (`sources.py`) hide a value among decoys (a note, a pointer file, JSON/INI/env/YAML keys, a log's
ERROR line, a script's output or error, a CSV row, the largest/newest/only executable file, a count);
actions (`actions.py`) say what to do with it (write, create, rename, copy, delete, chmod, fix a config
line, a Python constant, a wrong import). `builtin:look-act` is one such draw, made on first use.
"""

from legorl.tasks.generate.kinds import Kind, all_kinds, make_spec, select_kinds
from legorl.tasks.generate.render import generate, write_task

__all__ = ["Kind", "all_kinds", "generate", "make_spec", "select_kinds", "write_task"]
