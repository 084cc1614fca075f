def c_to_f(c: float) -> float:
    return c * 9 / 5 + 32


def f_to_c(f: float) -> float:
    return f - 32 * 5 / 9


_TO_C = {"C": lambda v: v, "F": f_to_c, "K": lambda v: v - 273.15}
_FROM_C = {"C": lambda v: v, "F": c_to_f, "K": lambda v: v + 273.15}


def convert(value: float, from_unit: str, to_unit: str) -> float:
    if from_unit not in _TO_C or to_unit not in _FROM_C:
        raise ValueError(f"unknown unit: {from_unit} or {to_unit}")
    return _FROM_C[to_unit](_TO_C[from_unit](value))
