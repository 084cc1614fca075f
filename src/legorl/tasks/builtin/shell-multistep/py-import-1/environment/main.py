from util import count_up

with open("/app/data.txt") as f:
    print("total:", count_up(f.read().split()))
