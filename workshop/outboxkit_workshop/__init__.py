"""The workshop: what proves and demonstrates outboxkit in its repository (the embedded dev
stack, the example order saga and its harness, fault campaigns, benchmarks, the saga's
Kubernetes renderer). It imports the framework; the framework never imports it."""
