"""Benchmarks comparing OxyGen with isolated and shared-only execution, with reports."""
