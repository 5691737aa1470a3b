"""The saga's business rules and event vocabulary, shared by its services."""

from __future__ import annotations

ORDER, PAYMENT, SHIPMENT = "order", "payment", "shipment"  # aggregate types (topic suffixes)

# Event types by producer.
ORDER_PLACED = "OrderPlaced"
PAYMENT_CAPTURED, PAYMENT_DECLINED, PAYMENT_REFUNDED = (
    "PaymentCaptured",
    "PaymentDeclined",
    "PaymentRefunded",
)
SHIPMENT_SCHEDULED, SHIPMENT_FAILED = "ShipmentScheduled", "ShipmentFailed"

PENDING, PAID, SHIPPED, CANCELLED = "PENDING", "PAID", "SHIPPED", "CANCELLED"
FINAL = (SHIPPED, CANCELLED)

VIP_PREFIX, VIP_LIMIT, STANDARD_LIMIT = "vip-", 1000, 500


def credit_limit(customer: str) -> int:
    """The largest order amount a customer may pay: 1000 for `vip-` customers, else 500."""
    return VIP_LIMIT if customer.startswith(VIP_PREFIX) else STANDARD_LIMIT


def payment_decision(customer: str, amount: int) -> tuple[bool, str]:
    """Capture when the amount is within the customer's per-order limit, else decline."""
    limit = credit_limit(customer)
    if amount <= limit:
        return True, f"within limit {limit}"
    return False, f"amount {amount} over limit {limit}"


ORDER_ID = r"^[0-9a-fA-F-]{1,36}$"  # order ids are UUIDs; anything else is a 422, never a query
