"""Experiments reproducing the paper's figures."""
