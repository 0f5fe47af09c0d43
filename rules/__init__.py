"""Shipped YAML rules and their JSON Schema, shipped as package data (forensics.rules_data)."""
