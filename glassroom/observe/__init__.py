"""What happened in a run, stored and explained: the run record (store, journal, tiles, incidents,
predictions, redaction), read by train, ladder and web. Never imports torch nor glassroom.train."""
