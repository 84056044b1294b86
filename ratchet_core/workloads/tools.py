"""`tools`: answer a customer request with one function call whose arguments follow the declared schema.

The request declares the tools below (OpenAI ``tools`` format) with ``tool_choice`` "auto" or "required";
the expected answer is an assistant message with one tool call and arguments as JSON text.
Drift: from the drift day on, requests to upgrade to "Ratchet Plus" appear (answered with `upgrade_plan`).
"""

from __future__ import annotations

from .base import Intent, TaskDescription


def _function(name: str, description: str, properties: dict) -> dict:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": properties,
                "required": list(properties),
                "additionalProperties": False,
            },
        },
    }


_ORDER_ID = {"type": "string", "description": "Order id such as A-12345."}

TOOLS = (
    _function("lookup_order", "Look up an order's status.", {"order_id": _ORDER_ID}),
    _function(
        "refund_order",
        "Refund an amount on an order.",
        {"order_id": _ORDER_ID, "amount": {"type": "number", "description": "Amount to refund."}},
    ),
    _function("cancel_order", "Cancel an order.", {"order_id": _ORDER_ID}),
    _function(
        "update_address",
        "Ship an order to another city.",
        {"order_id": _ORDER_ID, "city": {"type": "string"}},
    ),
    _function("upgrade_plan", "Upgrade an order's account to Ratchet Plus.", {"order_id": _ORDER_ID}),
)

TOOLS_TASK = TaskDescription(
    name="tools",
    comparator="tool_call",
    description="Customer request -> one function call (lookup_order, refund_order, cancel_order, ...).",
    system_prompt="You are a store assistant. Call the right function for the customer's request.",
    intents=(
        Intent(
            "lookup_order",
            (
                "Where is my order {order_id}?",
                "Can you track {order_id} for me?",
                "What is the status of {order_id}?",
            ),
            ("where is", "track", "status"),
            {"name": "lookup_order", "arguments": {"order_id": "{order_id}"}},
        ),
        Intent(
            "refund_order",
            (
                "Refund {money} on order {order_id}, it arrived broken.",
                "Order {order_id} was wrong, please refund {money}.",
            ),
            ("refund",),
            {"name": "refund_order", "arguments": {"order_id": "{order_id}", "amount": "{money.amount}"}},
        ),
        Intent(
            "cancel_order",
            (
                "Cancel order {order_id} please.",
                "I no longer need {order_id}, cancel it. My email is {email}.",
            ),
            ("cancel",),
            {"name": "cancel_order", "arguments": {"order_id": "{order_id}"}},
        ),
        Intent(
            "update_address",
            (
                "Send order {order_id} to {city} instead.",
                "I moved to {city}; change the address of {order_id}.",
            ),
            ("send", "address"),
            {"name": "update_address", "arguments": {"order_id": "{order_id}", "city": "{city}"}},
        ),
    ),
    drift_intents=(
        Intent(
            "upgrade_plan",
            ("Upgrade {order_id} to Ratchet Plus.", "Put order {order_id} on the Plus upgrade."),
            ("upgrade",),
            {"name": "upgrade_plan", "arguments": {"order_id": "{order_id}"}},
        ),
    ),
    fallback_answer={"name": "lookup_order", "arguments": {"order_id": None}},
    slots={"city": ("Lisbon", "Austin", "Leeds", "Osaka", "Lagos", "Denver")},
    prefixes=("", "Hi. "),
    suffixes=("", " Thanks."),
    tools=TOOLS,
    tool_choices=(("auto", 0.7), ("required", 0.3)),
)
