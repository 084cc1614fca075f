from ledger.account import Account, InsufficientFunds
