#!/bin/bash
# Oracle for pyfix-bank: writes the gold patch's files.
set -euo pipefail
cd /app
mkdir -p -- ledger
cat > ledger/account.py <<'LEGORL_EOF'
class InsufficientFunds(Exception):
    pass


class Account:
    def __init__(self, owner: str, balance: int = 0):
        self.owner = owner
        self.balance = balance

    def deposit(self, amount: int) -> None:
        if amount <= 0:
            raise ValueError("deposit must be positive")
        self.balance += amount

    def withdraw(self, amount: int) -> None:
        if amount <= 0:
            raise ValueError("withdrawal must be positive")
        if amount > self.balance:
            raise InsufficientFunds(f"{self.owner} has {self.balance}, needs {amount}")
        self.balance -= amount

    def transfer(self, other: "Account", amount: int) -> None:
        self.withdraw(amount)
        other.deposit(amount)
LEGORL_EOF
