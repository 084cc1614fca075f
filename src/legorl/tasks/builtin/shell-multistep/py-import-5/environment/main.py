from util import sum_values

with open("/app/data.txt") as f:
    print("total:", sum_values(f.read().split()))
