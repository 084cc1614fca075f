from stock.errors import OutOfStock


class Inventory:
    def __init__(self):
        self._stock: dict[str, int] = {}

    def add(self, item: str, qty: int = 1) -> None:
        if qty <= 0:
            raise ValueError("quantity must be positive")
        self._stock[item] = self._stock.get(item, 0) + qty

    def remove(self, item: str, qty: int = 1) -> None:
        have = self._stock.get(item, 0)
        if qty > have:
            raise OutOfStock(item, have, qty)
        self._stock[item] = have - qty

    def count(self, item: str) -> int:
        return self._stock.get(item, 0)

    def items(self) -> list[str]:
        return sorted(self._stock)
