from statkit.basic import mean, median, variance
