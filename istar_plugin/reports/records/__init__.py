"""What runs recorded, read back: a grid's cells and settings, a search, their archives, and analyses."""
