"""Contract suites: abstract test classes that every implementation of a seam subclasses and
passes (eventsourcing's persistence test cases are the anchor). A suite here is never collected
on its own (no ``Test`` prefix); a concrete ``Test…`` subclass beside the implementation's tests
provides the fixtures it names."""
