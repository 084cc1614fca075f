from util import total_of

with open("/app/data.txt") as f:
    print("total:", total_of(f.read().split()))
