"""Lark grammars, one per artifact kind, shipped as package data (forensics.grammars)."""
