"""Kafka client plumbing both sides use: SASL/TLS settings and their librdkafka and JAAS forms
(`security`), and the end offsets of topics as a consumer reads them (`offsets`)."""
