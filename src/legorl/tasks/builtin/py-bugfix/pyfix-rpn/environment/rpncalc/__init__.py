from rpncalc.evaluate import evaluate
