"""What happened in a run, stored and explained. store.py never imports torch."""
