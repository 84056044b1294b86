"""A five-label classification task the project has never seen (not a built-in workload): ``moods``.

Used by the per-task night test and the learner measurement. Like ``tickets`` the label is decided by keywords,
but the labels, phrasings and slots are new. Only the tests know it: to Ratchet it is just a task name.
"""

from __future__ import annotations

from ratchet_core.workloads.base import Intent, TaskDescription, Workload

LABELS = ("praise", "complaint", "question", "cancel", "urgent")

MOODS = TaskDescription(
    name="moods",
    comparator="label",
    description="Customer note -> one of praise, complaint, question, cancel, urgent.",
    system_prompt="Label the customer note as one of: " + ", ".join(LABELS) + ". Answer with the label only.",
    intents=(
        Intent(
            "praise",
            (
                "I love the {product}, great work!",
                "Thanks, the {product} is wonderful.",
                "Your team was fantastic with my order {order_id}.",
                "Great service in {city}, I love it.",
            ),
            ("love", "great", "wonderful", "fantastic"),
            "praise",
        ),
        Intent(
            "complaint",
            (
                "The {product} is awful and noisy.",
                "I am unhappy with order {order_id}, it was terrible.",
                "Terrible experience at the {city} store.",
                "The {product} arrived dirty, awful quality.",
            ),
            ("awful", "terrible", "unhappy", "dirty"),
            "complaint",
        ),
        Intent(
            "question",
            (
                "Does the {product} come in another colour?",
                "What sizes does the {product} have?",
                "Which store in {city} stocks the {product}?",
                "Does order {order_id} include a manual?",
            ),
            ("does", "what", "which"),
            "question",
        ),
        Intent(
            "cancel",
            (
                "Cancel order {order_id} please.",
                "Please cancel my {product} order.",
                "Stop my order {order_id}, cancel it.",
                "I need to cancel, write to {email}.",
            ),
            ("cancel", "stop"),
            "cancel",
        ),
        Intent(
            "urgent",
            (
                "Urgent: the {product} is smoking, call {phone} now!",
                "Emergency with order {order_id}, respond immediately.",
                "This is urgent, the {product} sparked.",
                "Immediately help, the {product} is leaking in {city}.",
            ),
            ("urgent", "emergency", "immediately", "now"),
            "urgent",
        ),
    ),
    fallback_answer="question",
    slots={
        "product": ("heater", "blender", "backpack", "tent", "drone", "monitor"),
        "city": ("Porto", "Dallas", "York", "Kyoto", "Accra", "Boise"),
    },
    prefixes=("", "", "Hey. ", "Hello, "),
    suffixes=("", "", " Cheers.", " Thanks!"),
)

MOODS_WORKLOAD = Workload("moods", (MOODS,))
