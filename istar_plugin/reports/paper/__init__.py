"""Numbers the papers report, carried as data (each file names its source) for reports to show beside ours."""
