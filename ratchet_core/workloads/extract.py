"""`extract`: read an order out of a customer message as JSON that follows a JSON schema.

The request carries ``response_format={"type": "json_schema", "json_schema": {"name": "order", "schema": ...,
"strict": true}}``; the answer is ``{"order_id", "amount", "currency", "intent"}`` in schema key order.
The amount is written as ``$12.50``, ``12.50 USD`` or ``EUR 12.50``; the answer always has the ISO code.
Drift: from the drift day on, requests to upgrade to the new "Ratchet Plus" product (intent `upgrade`) appear.
"""

from __future__ import annotations

from .base import CURRENCIES, Intent, TaskDescription

INTENTS = ("refund", "cancel", "status", "change_address", "upgrade")

ORDER_SCHEMA = {
    "type": "object",
    "properties": {
        "order_id": {"type": "string", "pattern": "^[A-Z]-[0-9]{5}$"},
        "amount": {"type": "number"},
        "currency": {"type": "string", "enum": sorted(CURRENCIES)},
        "intent": {"type": "string", "enum": list(INTENTS)},
    },
    "required": ["order_id", "amount", "currency", "intent"],
    "additionalProperties": False,
}

RESPONSE_FORMAT = {
    "type": "json_schema",
    "json_schema": {"name": "order", "schema": ORDER_SCHEMA, "strict": True},
}


def _answer(intent: str) -> dict:
    return {
        "order_id": "{order_id}",
        "amount": "{money.amount}",
        "currency": "{money.currency}",
        "intent": intent,
    }


EXTRACT = TaskDescription(
    name="extract",
    comparator="json",
    description="Customer message -> order JSON (order_id, amount, currency, intent) per a JSON schema.",
    system_prompt="Extract the order from the message as JSON with order_id, amount, currency and intent.",
    intents=(
        Intent(
            "refund",
            (
                "Please refund {money} for order {order_id}.",
                "Order {order_id} cost {money}, I want a refund.",
                "Refund order {order_id}: {money}. My email is {email}.",
            ),
            ("refund",),
            _answer("refund"),
        ),
        Intent(
            "cancel",
            (
                "Cancel order {order_id} ({money}), I changed my mind.",
                "I need to cancel {order_id}, paid {money}.",
                "Please cancel my {money} order {order_id}. Call {phone}.",
            ),
            ("cancel",),
            _answer("cancel"),
        ),
        Intent(
            "status",
            (
                "What is the status of order {order_id}? I paid {money}.",
                "Where is my {money} order {order_id}?",
                "Any news on order {order_id} for {money}?",
            ),
            ("status", "where is", "news"),
            _answer("status"),
        ),
        Intent(
            "change_address",
            (
                "Ship order {order_id} ({money}) to my new address in {city}.",
                "New address for order {order_id}, {money}: {city}.",
            ),
            ("address",),
            _answer("change_address"),
        ),
    ),
    drift_intents=(
        Intent(
            "upgrade",
            (
                "Upgrade order {order_id} to Ratchet Plus for {money}.",
                "I want to upgrade {order_id} to Plus, {money} is fine.",
            ),
            ("upgrade",),
            _answer("upgrade"),
        ),
    ),
    fallback_answer={"order_id": None, "amount": None, "currency": None, "intent": "status"},
    slots={"city": ("Lisbon", "Austin", "Leeds", "Osaka", "Lagos", "Denver")},
    prefixes=("", "Hi. ", "Hello! "),
    suffixes=("", " Thanks."),
    response_format=RESPONSE_FORMAT,
)
