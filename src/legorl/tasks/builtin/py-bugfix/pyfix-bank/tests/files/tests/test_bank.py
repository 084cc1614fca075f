import pytest

from ledger import Account, InsufficientFunds

def test_deposit_withdraw():
    a = Account("ann", 10)
    a.deposit(5)
    a.withdraw(3)
    assert a.balance == 12

def test_overdraw():
    with pytest.raises(InsufficientFunds):
        Account("bob", 1).withdraw(2)

def test_transfer():
    a, b = Account("a", 10), Account("b")
    a.transfer(b, 4)
    assert (a.balance, b.balance) == (6, 4)


def test_negative_withdraw():
    with pytest.raises(ValueError):
        Account("c", 10).withdraw(-50)

def test_failed_transfer_changes_nothing():
    a, b = Account("a", 1), Account("b", 0)
    with pytest.raises(InsufficientFunds):
        a.transfer(b, 5)
    assert (a.balance, b.balance) == (1, 0)
