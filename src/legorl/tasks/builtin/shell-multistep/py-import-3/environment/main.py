from util import add_all

with open("/app/data.txt") as f:
    print("total:", add_all(f.read().split()))
