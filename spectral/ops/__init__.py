"""Consumer operations for the network surfaces: lag and progress of each deployment's group
(read from Kafka, so no running consumer is needed), dead letters by reason, and redrive and
replay dry runs (the write variants behind the ``ops:redrive`` scope)."""
