"""The order -> pay -> ship saga: three services, each with its own database, migrations,
outbox and connector, talking only through events (the framework's example and its proof)."""
