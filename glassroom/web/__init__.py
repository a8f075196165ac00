"""The dashboard and the static site: read-only views of the run record (observe), the data atlas and
the ladder folders; never imports torch nor glassroom.train."""
