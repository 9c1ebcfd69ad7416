"""The benchmark: prompt sets (sets.py), runs of every mode side by side (main.py: `python -m engine
bench`) and the paper's tables (report.py)."""
