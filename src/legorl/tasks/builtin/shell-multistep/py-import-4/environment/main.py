from util import tally

with open("/app/data.txt") as f:
    print("total:", tally(f.read().split()))
