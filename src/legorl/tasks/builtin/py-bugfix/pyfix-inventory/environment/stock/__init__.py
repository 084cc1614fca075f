from stock.errors import OutOfStock
from stock.inventory import Inventory
