"""The dashboard and the static site: read-only views of the run store; never imports torch."""
