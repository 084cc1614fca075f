from series.window import moving_average, windows
