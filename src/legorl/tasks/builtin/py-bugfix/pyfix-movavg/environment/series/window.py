def windows(values, size):
    if size <= 0:
        raise ValueError("window size must be positive")
    return [values[i:i + size] for i in range(len(values) - size)]


def moving_average(values, size):
    return [sum(w) / size for w in windows(values, size)]
