def add(a, b):
    retrun a + b
