"""The package's version and folder, for records that name the code (provenance, predictions)
without importing the package's `load`."""

from pathlib import Path

__version__ = "0.1.0"
PACKAGE_DIR = Path(__file__).parent  # what glassroom.__file__'s folder is
