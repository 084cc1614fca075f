"""Generated built-in sets: drawn once per generator version into `$LEGORL_HOME/tasks/`, then reused.

The directory name carries a digest of the generator's code and parameters, so a changed generator
makes a fresh set instead of reusing a stale one; the draw is atomic (a temp dir renamed into place),
so two processes starting at once both end up reading one complete set.
"""

from __future__ import annotations

import hashlib
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path

from legorl.models.home import legorl_home


@dataclass(frozen=True)
class GeneratedSet:
    description: str
    per_kind: int  # tasks per kind
    seed: int
    kinds: tuple[str, ...] = ()  # globs; empty: every kind
    phrasings: bool = False  # each request in one of several wordings (`legorl tasks generate --phrasings`)


GENERATED: dict[str, GeneratedSet] = {
    "look-act": GeneratedSet("generated look-then-act tasks: 14 places a value hides x 9 things to do with it "
                             "(133 kinds; a third take two looks; legorl tasks generate)", per_kind=3, seed=0),
    "look-act-phrased": GeneratedSet("look-act with each request in one of several wordings (legorl tasks "
                                     "generate --phrasings)", per_kind=3, seed=0, phrasings=True),
}


def _digest(name: str, gs: GeneratedSet) -> str:
    h = hashlib.sha256(repr((name, gs)).encode())
    for path in sorted(Path(__file__).parent.glob("*.py")):
        h.update(path.read_bytes())
    return h.hexdigest()[:12]


def generated_path(name: str) -> Path:
    """The set's directory, drawn now if this generator version has not drawn it yet."""
    from legorl.tasks.generate.kinds import select_kinds
    from legorl.tasks.generate.render import MANIFEST, generate

    gs = GENERATED[name]
    root = legorl_home() / "tasks" / f"{name}-{_digest(name, gs)}"
    if (root / MANIFEST).is_file():
        return root
    n = gs.per_kind * len(select_kinds(list(gs.kinds) or None))
    tmp = root.parent / f".{root.name}.{uuid.uuid4().hex[:8]}"
    generate(tmp, n, gs.seed, list(gs.kinds) or None, set_name=f"builtin:{name}", phrasings=gs.phrasings)
    try:
        tmp.rename(root)
    except OSError:  # another process drew it first: same content
        shutil.rmtree(tmp, ignore_errors=True)
    return root
