"""Results read back from the records runs leave, compared and shown as tables and figures."""
