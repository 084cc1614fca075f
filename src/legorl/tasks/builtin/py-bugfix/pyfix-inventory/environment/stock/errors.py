class OutOfStock(Exception):
    def __init__(self, item: str, have: int, want: int):
        super().__init__(f"{item}: have {have}, want {want}")
        self.item, self.have, self.want = item, have, want
