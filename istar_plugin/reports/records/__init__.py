"""What a grid's runs recorded, read back: one record per finished cell (:mod:`.cells`) and the records grouped into
settings over their seeds (:mod:`.settings`)."""
