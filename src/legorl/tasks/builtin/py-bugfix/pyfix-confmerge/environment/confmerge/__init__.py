from confmerge.merge import deep_merge
from confmerge.overrides import apply_overrides
