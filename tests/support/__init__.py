"""Support code for the tests: fakes of the platforms, harnesses, settings roots and shared helpers."""
