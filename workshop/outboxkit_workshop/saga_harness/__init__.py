"""The harness that runs the saga example (`saga`): its processes as an operator runs them on the
local stack (`processes`), the load generator (`load`), the invariants every run checks
(`invariants`), and the fault campaign with its fault kinds (`chaos`, `faults`).

`saga` is the example a user copies (three services, their rules, their event contracts, their
consumer jobs) and imports nothing from here or from the dev stack."""
